//! The rank's epoll sets: [`Waiter`] sleeps until any socket is ready (edge-triggered,
//! so registering a socket once is enough and a sleep costs one system call);
//! [`ReadySet`] tells a progress pass which links have something to read.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};

pub struct Waiter {
    epoll: OwnedFd,
    events: Vec<Event>,
}

impl Waiter {
    pub fn new() -> io::Result<Waiter> {
        Ok(Waiter {
            epoll: epoll::create(CreateFlags::CLOEXEC)?,
            events: Vec::with_capacity(64),
        })
    }

    /// Wakes `wait` when `fd` becomes readable or writable or closes. A closed fd leaves
    /// the set by itself.
    pub fn watch(&self, fd: impl AsFd) {
        let flags = EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP | EventFlags::ET;
        match epoll::add(&self.epoll, fd, EventData::new_u64(0), flags) {
            // An accepted socket that became a link is watched already.
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => {
                // Without the registration the rank still works, only wakes up later (timeout).
                tracing::warn!("cannot watch a socket with epoll: {e}");
            }
        }
    }

    /// Sleeps until a watched socket changed state or `max` passed.
    pub fn wait(&mut self, max: Duration) {
        wait_events(&self.epoll, &mut self.events, max);
    }
}

/// One `epoll_wait` of at most `max` into `events` (cleared first).
fn wait_events(epoll: &OwnedFd, events: &mut Vec<Event>, max: Duration) {
    let ts = rustix::time::Timespec {
        tv_sec: max.as_secs() as i64,
        tv_nsec: max.subsec_nanos() as i64,
    };
    events.clear();
    let _ = epoll::wait(epoll, rustix::buffer::spare_capacity(events), Some(&ts));
}

/// The links with bytes to read, found with one `epoll_wait` that does not block:
/// with many peers, a pass that tried `recv()` on every socket would spend most of
/// its time in calls that return EAGAIN (level-triggered, so a link read only in part
/// is reported again).
pub struct ReadySet {
    epoll: OwnedFd,
    events: Vec<Event>,
}

impl ReadySet {
    pub fn new() -> io::Result<ReadySet> {
        Ok(ReadySet {
            epoll: epoll::create(CreateFlags::CLOEXEC)?,
            events: Vec::with_capacity(64),
        })
    }

    /// Reports `fd` under `key` while it has bytes to read or was closed. A closed fd
    /// leaves the set by itself. A link that could not be added would never be read
    /// once there are several: the caller must not use it.
    pub fn watch(&self, fd: impl AsFd, key: u64) -> io::Result<()> {
        let flags = EventFlags::IN | EventFlags::RDHUP;
        Ok(epoll::add(&self.epoll, fd, EventData::new_u64(key), flags)?)
    }

    /// Puts the keys of the sockets readable now into `keys` (as many as fit; the rest
    /// come next time); returns how many.
    pub fn poll(&mut self, keys: &mut [u64]) -> usize {
        wait_events(&self.epoll, &mut self.events, Duration::ZERO);
        for (k, e) in keys.iter_mut().zip(&self.events) {
            *k = e.data.u64();
        }
        self.events.len().min(keys.len())
    }
}
