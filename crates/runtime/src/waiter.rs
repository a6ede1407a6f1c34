//! Sleeping until any socket of the rank is ready: one epoll set, edge-triggered, so
//! that registering a socket once is enough and a sleep costs one system call.

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
        let ts = rustix::time::Timespec {
            tv_sec: max.as_secs() as i64,
            tv_nsec: max.subsec_nanos() as i64,
        };
        self.events.clear();
        let _ = epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut self.events),
            Some(&ts),
        );
    }
}
