//! The rank's epoll sets. [`ReadySet`] holds the links (level-triggered) and is where a
//! rank sleeps; [`Waiter`] holds the sockets that are rarely busy (listeners, the
//! coordinator, handshakes; edge-triggered) and sits inside the ready set as one entry.
//!
//! A socket in an epoll set costs every message sent to it: the sender's system call
//! runs the set's wake-up callback under the socket's wait-queue lock (on loopback,
//! ~0.1 µs per set and message, measured with `bench/sock/sockpp`). So a link is in one
//! set at most, and in none while it is the rank's only link and the rank busy-polls:
//! then it joins the ready set only for the length of a sleep.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};

pub struct Waiter {
    epoll: OwnedFd,
    events: Vec<Event>,
    /// Keys of handshake sockets reported since the wire-up last looked
    /// ([`Waiter::take_ready`]).
    ready: HashSet<u64>,
    /// The last key given to a handshake's socket ([`Waiter::watch_handshake`]).
    handshake_keys: u64,
}

impl Waiter {
    /// The key of the listening sockets (TCP and shared memory): accept only when told.
    pub const LISTENING: u64 = u64::MAX;
    /// The key of this rank's shared-memory bell.
    pub const BELL: u64 = u64::MAX - 1;
    /// Marks the keys of polled lanes' doorbells (`doorbell(lane)`) in their upper half;
    /// handshake keys count up from 1 and never reach it.
    const DOORBELL: u64 = 1 << 63;

    /// The key under which a polled lane's doorbell socket is watched.
    pub fn doorbell(lane: u32) -> u64 {
        Self::DOORBELL | u64::from(lane)
    }

    pub fn new() -> io::Result<Waiter> {
        Ok(Waiter {
            epoll: epoll::create(CreateFlags::CLOEXEC)?,
            events: Vec::with_capacity(64),
            ready: HashSet::new(),
            handshake_keys: 0,
        })
    }

    /// Wakes a sleeping rank when `fd` becomes readable or writable or closes. A closed
    /// fd leaves the set by itself (once every fd of its open file is closed).
    pub fn watch(&self, fd: impl AsFd) {
        self.watch_as(fd, 0);
    }

    /// Like [`watch`](Self::watch), and also reports `key` (non-zero) through
    /// [`take_ready`](Self::take_ready): the wire-up then reads the handshakes whose
    /// sockets have something, not every one on every pass. With hundreds of ranks on a
    /// node, a `recvmsg` per pending handshake and pass made wire-up grow with the cube
    /// of the job's size.
    pub fn watch_as(&self, fd: impl AsFd, key: u64) {
        let flags = EventFlags::IN | EventFlags::OUT | EventFlags::RDHUP | EventFlags::ET;
        if let Err(e) = epoll::add(&self.epoll, fd, EventData::new_u64(key), flags) {
            // Without the registration the rank still works, only wakes up later (timeout).
            tracing::warn!("cannot watch a socket with epoll: {e}");
        }
    }

    /// Watches a handshake's socket under a fresh key (never 0), which it returns.
    pub fn watch_handshake(&mut self, fd: impl AsFd) -> u64 {
        self.handshake_keys += 1;
        self.watch_as(fd, self.handshake_keys);
        self.handshake_keys
    }

    /// Like [`watch_as`](Self::watch_as), for reading only: a socket that can always be
    /// written to (a raw packet socket) reports EPOLLOUT as soon as it is added, so
    /// watched for writing too, one added just before a sleep ended the sleep at once.
    pub fn watch_readable(&self, fd: impl AsFd, key: u64) {
        let flags = EventFlags::IN | EventFlags::ET;
        if let Err(e) = epoll::add(&self.epoll, fd, EventData::new_u64(key), flags) {
            tracing::warn!("cannot watch a socket with epoll: {e}");
        }
    }

    /// The keys reported since the last call (edge-triggered: each readiness once).
    pub fn take_ready(&mut self) -> HashSet<u64> {
        std::mem::take(&mut self.ready)
    }

    /// Whether `key` was reported since it was last taken (and takes it).
    pub fn take_key(&mut self, key: u64) -> bool {
        self.ready.remove(&key)
    }

    /// The lanes whose doorbell rang or closed since the last call (taken out of the
    /// keys [`take_ready`](Self::take_ready) reports). With hundreds of node-local
    /// peers, a `recv()` on every doorbell after each wake-up was a rank's main cost.
    pub fn take_doorbells(&mut self) -> Vec<u32> {
        let rung: Vec<u64> = self
            .ready
            .iter()
            .copied()
            .filter(|&k| k >> 32 == Self::DOORBELL >> 32)
            .collect();
        rung.iter()
            .map(|k| {
                self.ready.remove(k);
                (k & !Self::DOORBELL) as u32
            })
            .collect()
    }

    /// Stops watching `fd` (an accepted socket that became a link moves to the ready set).
    pub fn unwatch(&self, fd: impl AsFd) {
        let _ = epoll::delete(&self.epoll, fd);
    }

    /// Forgets the events that woke the rank: the caller is about to look at every
    /// socket here anyway, and until then the ready set would report this set again.
    /// Returns how many sockets were ready.
    pub fn drain(&mut self) -> usize {
        let mut total = 0;
        loop {
            wait_events(&self.epoll, &mut self.events, Duration::ZERO);
            total += self.events.len();
            self.ready
                .extend(self.events.iter().map(|e| e.data.u64()).filter(|&k| k != 0));
            // A full batch may leave more behind (an edge is reported once: keep them all).
            if self.events.len() < self.events.capacity() {
                return total;
            }
        }
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
    /// Shared with the [`Sleeper`]s, which wait on it without the set.
    epoll: Arc<OwnedFd>,
    events: Vec<Event>,
    /// The eventfd of [`ReadySet::waker`], once made.
    waker: Option<Arc<OwnedFd>>,
}

/// Wakes a thread sleeping on a [`ReadySet`] from another thread: under
/// `MPI_THREAD_MULTIPLE`, one that completed what the sleeper waits for.
#[derive(Clone)]
pub struct Waker {
    eventfd: Arc<OwnedFd>,
}

impl Waker {
    pub fn wake(&self) {
        // Full only after 2^64 - 2 wake-ups nobody drained; then it is awake anyway.
        let _ = rustix::io::write(&*self.eventfd, &1u64.to_ne_bytes());
    }
}

/// A wait on a [`ReadySet`] that needs nothing else: a thread may take it while another
/// drives the rank (a blocking call under `MPI_THREAD_MULTIPLE` sleeps so, without the
/// library's lock).
pub struct Sleeper {
    epoll: Arc<OwnedFd>,
}

impl Sleeper {
    /// Sleeps up to `max` until a socket of the set is ready; what is ready stays for the
    /// next look at the set.
    pub fn sleep(&self, max: Duration) {
        let mut events = Vec::with_capacity(1);
        wait_events(&self.epoll, &mut events, max);
    }
}

impl ReadySet {
    /// The key under which the [`Waiter`] inside reports that one of its sockets is ready.
    pub const WAITER: u64 = u64::MAX;

    pub fn new(waiter: &Waiter) -> io::Result<ReadySet> {
        let epoll = epoll::create(CreateFlags::CLOEXEC)?;
        let flags = EventFlags::IN;
        epoll::add(&epoll, &waiter.epoll, EventData::new_u64(Self::WAITER), flags)?;
        Ok(ReadySet {
            epoll: Arc::new(epoll),
            events: Vec::with_capacity(64),
            waker: None,
        })
    }

    /// The key under which the set reports its [`Waker`] rang.
    pub const WAKER: u64 = u64::MAX - 1;

    /// The set's waker, made on first use. It stays ready (level-triggered) until
    /// [`ReadySet::drain_waker`]: a wake-up given just before a sleep is not lost.
    pub fn waker(&mut self) -> io::Result<Waker> {
        if let Some(fd) = &self.waker {
            return Ok(Waker {
                eventfd: Arc::clone(fd),
            });
        }
        let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
        let fd = Arc::new(rustix::event::eventfd(0, flags)?);
        epoll::add(&self.epoll, &*fd, EventData::new_u64(Self::WAKER), EventFlags::IN)?;
        self.waker = Some(Arc::clone(&fd));
        Ok(Waker { eventfd: fd })
    }

    /// Takes back the wake-ups given so far.
    pub fn drain_waker(&self) {
        if let Some(fd) = &self.waker {
            let _ = rustix::io::read(&**fd, &mut [0u8; 8]);
        }
    }

    /// Reports `fd` under `key` while it has bytes to read or was closed, and also while
    /// it has room to write if `writable`. A closed fd leaves the set by itself.
    pub fn watch(&self, fd: impl AsFd, key: u64, writable: bool) -> io::Result<()> {
        Ok(epoll::add(
            &self.epoll,
            fd,
            EventData::new_u64(key),
            Self::flags(writable),
        )?)
    }

    /// Changes whether `fd` (watched under `key`) is reported while it has room to write.
    pub fn set_writable(&self, fd: impl AsFd, key: u64, writable: bool) -> io::Result<()> {
        Ok(epoll::modify(
            &self.epoll,
            fd,
            EventData::new_u64(key),
            Self::flags(writable),
        )?)
    }

    pub fn unwatch(&self, fd: impl AsFd) {
        let _ = epoll::delete(&self.epoll, fd);
    }

    fn flags(writable: bool) -> EventFlags {
        let read = EventFlags::IN | EventFlags::RDHUP;
        if writable {
            read | EventFlags::OUT
        } else {
            read
        }
    }

    /// A wait on this set that another thread can take.
    pub fn sleeper(&self) -> Sleeper {
        Sleeper {
            epoll: Arc::clone(&self.epoll),
        }
    }

    /// Puts the keys of the sockets ready now into `keys` (as many as fit; the rest come
    /// next time); returns how many.
    pub fn poll(&mut self, keys: &mut [u64]) -> usize {
        self.wait(Duration::ZERO, keys)
    }

    /// Like [`poll`](Self::poll), but sleeps up to `max` until something is ready.
    pub fn wait(&mut self, max: Duration, keys: &mut [u64]) -> usize {
        wait_events(&self.epoll, &mut self.events, max);
        for (k, e) in keys.iter_mut().zip(&self.events) {
            *k = e.data.u64();
        }
        self.events.len().min(keys.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    fn ready(set: &mut ReadySet) -> Vec<u64> {
        let mut keys = [0u64; 8];
        let n = set.poll(&mut keys);
        keys[..n].to_vec()
    }

    #[test]
    fn sleepers_in_other_threads_wake_when_a_watched_socket_is_ready() {
        let waiter = Waiter::new().unwrap();
        let mut set = ReadySet::new(&waiter).unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        set.watch(&b, 7, false).unwrap();
        let sleepers: Vec<_> = (0..2)
            .map(|_| {
                let sleeper = set.sleeper();
                std::thread::spawn(move || {
                    let start = std::time::Instant::now();
                    sleeper.sleep(Duration::from_secs(20));
                    start.elapsed()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        a.write_all(b"x").unwrap();
        for s in sleepers {
            // Woken by the byte, not by the end of their 20 s.
            assert!(s.join().unwrap() < Duration::from_secs(10));
        }
        // What woke them is still there for the set.
        assert_eq!(ready(&mut set), vec![7]);
    }

    #[test]
    fn a_link_is_reported_under_its_key_until_all_is_read() {
        let waiter = Waiter::new().unwrap();
        let mut set = ReadySet::new(&waiter).unwrap();
        let (mut a, mut b) = UnixStream::pair().unwrap();
        set.watch(&b, 7, false).unwrap();
        assert_eq!(ready(&mut set), Vec::<u64>::new());
        a.write_all(b"abcd").unwrap();
        assert_eq!(ready(&mut set), [7]);
        let mut two = [0u8; 2];
        b.read_exact(&mut two).unwrap();
        assert_eq!(ready(&mut set), [7], "level-triggered: half read is still ready");
        b.read_exact(&mut two).unwrap();
        assert_eq!(ready(&mut set), Vec::<u64>::new());
        set.unwatch(&b);
        a.write_all(b"x").unwrap();
        assert_eq!(ready(&mut set), Vec::<u64>::new(), "unwatched");
    }

    #[test]
    fn a_socket_watched_for_reading_before_a_sleep_does_not_end_it_until_it_has_data() {
        // A writable socket added for reading only: the sleep lasts (added with
        // `watch_as`, its room to write ended every sleep at once).
        let waiter = Waiter::new().unwrap();
        let mut set = ReadySet::new(&waiter).unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        waiter.watch_readable(&b, 0);
        let start = std::time::Instant::now();
        set.wait(Duration::from_millis(30), &mut [0; 1]);
        assert!(
            start.elapsed() >= Duration::from_millis(25),
            "{:?}",
            start.elapsed()
        );
        waiter.unwatch(&b);
        a.write_all(b"x").unwrap();
        waiter.watch_readable(&b, 0);
        let start = std::time::Instant::now();
        assert_eq!(
            set.wait(Duration::from_secs(5), &mut [0; 1]),
            1,
            "data before the watch wakes it"
        );
        assert!(start.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn only_the_doorbells_that_rang_are_taken_and_handshake_keys_stay() {
        let mut waiter = Waiter::new().unwrap();
        let (mut ringers, bells): (Vec<UnixStream>, Vec<UnixStream>) =
            (0..3).map(|_| UnixStream::pair().unwrap()).unzip();
        for (lane, bell) in bells.iter().enumerate() {
            waiter.watch_readable(bell, Waiter::doorbell(lane as u32));
        }
        let (mut hs, hs_peer) = UnixStream::pair().unwrap();
        waiter.watch_readable(&hs_peer, 5);
        waiter.drain();
        assert!(waiter.take_doorbells().is_empty(), "nothing rang");
        ringers[2].write_all(b"x").unwrap();
        hs.write_all(b"hello").unwrap();
        drop(ringers.remove(0)); // lane 0's peer ended: its doorbell reports it
        waiter.drain();
        let mut rung = waiter.take_doorbells();
        rung.sort();
        assert_eq!(rung, [0, 2]);
        assert!(waiter.take_doorbells().is_empty(), "each ring is taken once");
        assert_eq!(
            waiter.take_ready(),
            HashSet::from([5]),
            "the handshake's key is left for wire-up"
        );
    }

    #[test]
    fn room_to_write_is_reported_only_when_asked_for() {
        let waiter = Waiter::new().unwrap();
        let mut set = ReadySet::new(&waiter).unwrap();
        let (a, _b) = UnixStream::pair().unwrap();
        set.watch(&a, 3, false).unwrap();
        assert_eq!(ready(&mut set), Vec::<u64>::new());
        set.set_writable(&a, 3, true).unwrap();
        assert_eq!(ready(&mut set), [3]);
        set.set_writable(&a, 3, false).unwrap();
        assert_eq!(ready(&mut set), Vec::<u64>::new());
    }

    #[test]
    fn a_socket_of_the_waiter_wakes_the_ready_set_until_drained() {
        let mut waiter = Waiter::new().unwrap();
        let mut set = ReadySet::new(&waiter).unwrap();
        let (mut a, b) = UnixStream::pair().unwrap();
        // Edge-triggered with OUT: the writable edge of registration is an event too.
        waiter.watch(&b);
        waiter.drain();
        assert_eq!(ready(&mut set), Vec::<u64>::new());
        a.write_all(b"hello").unwrap();
        let mut keys = [0u64; 4];
        let n = set.wait(Duration::from_secs(5), &mut keys);
        assert_eq!(&keys[..n], [ReadySet::WAITER]);
        assert_eq!(ready(&mut set), [ReadySet::WAITER], "reported until drained");
        waiter.drain();
        assert_eq!(ready(&mut set), Vec::<u64>::new());
    }
}
