//! A thin epoll wrapper with typed tokens.

use rustix::event::epoll;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// What an epoll event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Token {
    Listener(u32),
    Signal(u32),
    Conn(u64),
    Stdout(u32),
    Stderr(u32),
    /// The standard input of `pontoon srun-rendezvous`: task 0's end of a pipe.
    Parent,
}

const SHIFT: u32 = 56;
const LOW: u64 = (1 << SHIFT) - 1;

impl Token {
    fn encode(self) -> u64 {
        let (kind, v) = match self {
            Token::Listener(i) => (1, u64::from(i)),
            Token::Signal(i) => (2, u64::from(i)),
            Token::Conn(i) => (3, i & LOW),
            Token::Stdout(r) => (4, u64::from(r)),
            Token::Stderr(r) => (5, u64::from(r)),
            Token::Parent => (6, 0),
        };
        (kind << SHIFT) | v
    }

    fn decode(x: u64) -> Option<Token> {
        let v = x & LOW;
        let small = u32::try_from(v).ok();
        Some(match x >> SHIFT {
            1 => Token::Listener(small?),
            2 => Token::Signal(small?),
            3 => Token::Conn(v),
            4 => Token::Stdout(small?),
            5 => Token::Stderr(small?),
            6 => Token::Parent,
            _ => return None,
        })
    }
}

/// One readiness report.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready {
    pub token: Token,
    /// Readable, or hung up / in error (a read then reports what happened).
    pub read: bool,
    pub write: bool,
}

pub(crate) struct Poller {
    ep: OwnedFd,
    events: Vec<epoll::Event>,
}

fn flags(write: bool) -> epoll::EventFlags {
    let mut f = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
    if write {
        f |= epoll::EventFlags::OUT;
    }
    f
}

impl Poller {
    pub(crate) fn new() -> io::Result<Poller> {
        Ok(Poller {
            ep: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            events: Vec::with_capacity(256),
        })
    }

    pub(crate) fn add(&self, fd: impl AsFd, token: Token, write: bool) -> io::Result<()> {
        Ok(epoll::add(
            &self.ep,
            fd,
            epoll::EventData::new_u64(token.encode()),
            flags(write),
        )?)
    }

    pub(crate) fn modify(&self, fd: impl AsFd, token: Token, write: bool) -> io::Result<()> {
        Ok(epoll::modify(
            &self.ep,
            fd,
            epoll::EventData::new_u64(token.encode()),
            flags(write),
        )?)
    }

    /// Stops watching `fd` (closing it would too; this is for fds that stay open).
    pub(crate) fn delete(&self, fd: impl AsFd) {
        let _ = epoll::delete(&self.ep, fd);
    }

    /// Waits at most `timeout` for events; an interrupted wait returns no events.
    pub(crate) fn wait(&mut self, timeout: Duration) -> io::Result<Vec<Ready>> {
        let ts = rustix::event::Timespec::try_from(timeout).unwrap_or(rustix::event::Timespec {
            tv_sec: 3600,
            tv_nsec: 0,
        });
        self.events.clear();
        match epoll::wait(
            &self.ep,
            rustix::buffer::spare_capacity(&mut self.events),
            Some(&ts),
        ) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
        let hup = epoll::EventFlags::HUP | epoll::EventFlags::ERR | epoll::EventFlags::RDHUP;
        Ok(self
            .events
            .iter()
            .filter_map(|e| {
                let f = e.flags;
                Token::decode(e.data.u64()).map(|token| Ready {
                    token,
                    read: f.intersects(epoll::EventFlags::IN | hup),
                    write: f.contains(epoll::EventFlags::OUT),
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for t in [
            Token::Listener(1),
            Token::Signal(2),
            Token::Conn(1 << 40),
            Token::Stdout(7),
            Token::Stderr(u32::MAX),
            Token::Parent,
        ] {
            assert_eq!(Token::decode(t.encode()), Some(t));
        }
        assert_eq!(Token::decode(0), None);
    }
}
