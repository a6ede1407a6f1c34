//! Authenticated encryption of a stream lane (`PONTOON_ENCRYPT`; seed 000 proposes
//! IPsec for the traffic between clusters). A [`Sealed`] pipe carries the bytes of any
//! [`Pipe`] as AES-256-GCM records:
//!
//! ```text
//!   u32 length of what follows (big-endian): ciphertext + 16-byte tag, at most
//!       RECORD_MAX + 16; it is the record's associated data
//!   ciphertext, tag
//! ```
//!
//! Each direction has its own key, derived from the lane's key (the job secret and both
//! handshake nonces: fresh for every lane, known only to its two ends) and its own
//! counter as the nonce, so a record cannot be replayed, dropped, reordered or moved to
//! another lane or direction without failing its tag. AES-GCM because every CPU a
//! cluster runs has AES and carry-less multiplication instructions (several GB/s per
//! core, `docs/wan.md`); the RustCrypto crate picks them at run time.

use std::io::IoSlice;
use std::os::fd::BorrowedFd;

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};

use crate::stream::Pipe;
use crate::{LinkError, PathFigures};

/// Plaintext bytes of one record at most (TLS's 16 KiB): its 20 bytes of length and tag
/// cost 0.1 %, and a receiver buffers no more than one record before it checks it.
pub const RECORD_MAX: usize = 16 << 10;
const LEN: usize = 4;
const TAG: usize = 16;
/// Records sealed per write: a bulk transfer makes one system call per 64 KiB.
const RECORDS_PER_WRITE: usize = 4;

/// The two keys of a sealed lane, one per direction.
#[derive(Clone)]
pub struct LaneKeys {
    send: [u8; 32],
    recv: [u8; 32],
}

impl LaneKeys {
    /// From the lane's key (`proto::handshake`'s `lane_key`), at the end that
    /// `initiated` the connection or the one that accepted it.
    pub fn new(lane_key: &[u8; 32], initiated: bool) -> LaneKeys {
        let there = blake3::derive_key("pontoon 2026-11 sealed lane, initiator to acceptor", lane_key);
        let back = blake3::derive_key("pontoon 2026-11 sealed lane, acceptor to initiator", lane_key);
        if initiated {
            LaneKeys {
                send: there,
                recv: back,
            }
        } else {
            LaneKeys {
                send: back,
                recv: there,
            }
        }
    }
}

/// One direction: its cipher and the number of the next record.
struct Direction {
    cipher: Aes256Gcm,
    next: u64,
}

impl Direction {
    fn new(key: &[u8; 32]) -> Direction {
        Direction {
            cipher: Aes256Gcm::new(key.into()),
            next: 0,
        }
    }

    /// The nonce of the next record (96 bits: 32 zero, then the record's number).
    fn nonce(&mut self) -> Result<Nonce<U12>, LinkError> {
        let n = self.next;
        self.next = n.checked_add(1).ok_or(LinkError::Protocol(
            "a sealed lane ran out of record numbers".into(),
        ))?;
        let mut nonce = [0u8; 12];
        nonce[4..].copy_from_slice(&n.to_be_bytes());
        Ok(nonce.into())
    }
}

/// A pipe whose bytes travel sealed.
pub struct Sealed<P> {
    inner: P,
    tx: Direction,
    rx: Direction,
    /// Sealed records not yet taken by the inner pipe, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// Bytes from the inner pipe in `inb[in_start..in_end]`; an opened record's
    /// plaintext is `inb[plain_start..plain_end]`, ahead of `in_start`.
    inb: Vec<u8>,
    in_start: usize,
    in_end: usize,
    plain_start: usize,
    plain_end: usize,
}

impl<P: Pipe> Sealed<P> {
    pub fn new(inner: P, keys: &LaneKeys) -> Sealed<P> {
        Sealed {
            inner,
            tx: Direction::new(&keys.send),
            rx: Direction::new(&keys.recv),
            out: Vec::new(),
            out_at: 0,
            inb: vec![0; 2 * (LEN + RECORD_MAX + TAG)],
            in_start: 0,
            in_end: 0,
            plain_start: 0,
            plain_end: 0,
        }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    /// Writes sealed bytes to the inner pipe while it takes them; whether all went.
    fn push_out(&mut self) -> Result<bool, LinkError> {
        while self.out_at < self.out.len() {
            match self.inner.write(&[IoSlice::new(&self.out[self.out_at..])])? {
                0 => return Ok(false),
                n => self.out_at += n,
            }
        }
        self.out.clear();
        self.out_at = 0;
        Ok(true)
    }

    /// Seals the next `n` bytes of `iov` (from `skip` in) as one record at the end of `out`.
    fn seal(&mut self, iov: &[IoSlice<'_>], mut skip: usize, n: usize) -> Result<(), LinkError> {
        let at = self.out.len();
        self.out.extend_from_slice(&((n + TAG) as u32).to_be_bytes());
        let mut left = n;
        for s in iov {
            if skip >= s.len() {
                skip -= s.len();
                continue;
            }
            let take = (s.len() - skip).min(left);
            self.out.extend_from_slice(&s[skip..skip + take]);
            left -= take;
            skip = 0;
            if left == 0 {
                break;
            }
        }
        let nonce = self.tx.nonce()?;
        let (len, body) = self.out[at..].split_at_mut(LEN);
        let tag = self
            .tx
            .cipher
            .encrypt_in_place_detached(&nonce, len, body)
            .map_err(|_| LinkError::Protocol("a record could not be sealed".into()))?;
        self.out.extend_from_slice(&tag);
        Ok(())
    }

    /// Opens the record at the front of the input, if it is whole; whether it did.
    fn open(&mut self) -> Result<bool, LinkError> {
        let have = self.in_end - self.in_start;
        if have < LEN {
            return Ok(false);
        }
        let head = &self.inb[self.in_start..self.in_start + LEN];
        let len = u32::from_be_bytes(head.try_into().expect("four bytes")) as usize;
        if !(TAG..=RECORD_MAX + TAG).contains(&len) {
            return Err(LinkError::Protocol(format!(
                "a sealed record of {len} bytes (at most {} are sent)",
                RECORD_MAX + TAG
            )));
        }
        if have < LEN + len {
            return Ok(false);
        }
        let nonce = self.rx.nonce()?;
        let start = self.in_start;
        let (head, rest) = self.inb[start..start + LEN + len].split_at_mut(LEN);
        let (body, tag) = rest.split_at_mut(len - TAG);
        let tag = Tag::from_slice(tag);
        self.rx
            .cipher
            .decrypt_in_place_detached(&nonce, head, body, tag)
            .map_err(|_| {
                LinkError::Protocol(
                    "a sealed record failed its check: altered, replayed or out of order, or the \
                     peer does not hold this lane's key"
                        .into(),
                )
            })?;
        self.plain_start = start + LEN;
        self.plain_end = start + LEN + len - TAG;
        self.in_start = start + LEN + len;
        Ok(true)
    }

    /// Makes room at the end of the input for the next read (moves what is left of it,
    /// and of an opened record's plaintext, to the front).
    fn compact(&mut self) {
        let from = if self.plain_start < self.plain_end {
            self.plain_start
        } else {
            self.in_start
        };
        if from == 0 {
            return;
        }
        self.inb.copy_within(from..self.in_end, 0);
        self.plain_start -= from.min(self.plain_start);
        self.plain_end -= from.min(self.plain_end);
        self.in_start -= from;
        self.in_end -= from;
    }
}

impl<P: Pipe> Pipe for Sealed<P> {
    /// Takes up to [`RECORDS_PER_WRITE`] records' worth of `iov` once the records before
    /// them are out; `Ok(0)` while those still wait for room in the inner pipe.
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        if !self.push_out()? {
            return Ok(0);
        }
        let total: usize = iov.iter().map(|s| s.len()).sum();
        let mut taken = 0;
        for _ in 0..RECORDS_PER_WRITE {
            let n = (total - taken).min(RECORD_MAX);
            if n == 0 {
                break;
            }
            self.seal(iov, taken, n)?;
            taken += n;
        }
        // Taken whether or not the inner pipe takes all of it now: `queued` counts the
        // rest, and `flush` sends it.
        self.push_out()?;
        Ok(taken)
    }

    /// Fills `dst` from as many records as have come, so that a short read means the
    /// inner pipe is empty (the stream reader relies on it).
    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        let mut got = 0;
        while got < dst.len() {
            if self.plain_start < self.plain_end {
                let n = (self.plain_end - self.plain_start).min(dst.len() - got);
                crate::copy::copy_into(
                    &mut dst[got..got + n],
                    &self.inb[self.plain_start..self.plain_start + n],
                );
                self.plain_start += n;
                got += n;
                continue;
            }
            if self.open()? {
                continue;
            }
            self.compact();
            match self.inner.read(&mut self.inb[self.in_end..])? {
                Some(n) => self.in_end += n,
                None => break,
            }
        }
        Ok((got > 0).then_some(got))
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        self.push_out().map(|_| ())
    }

    fn queued(&self) -> u64 {
        self.inner.queued() + (self.out.len() - self.out_at) as u64
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.fd()
    }

    fn polled(&self) -> bool {
        self.inner.polled()
    }

    fn watch_while_sleeping(&self) -> bool {
        self.inner.watch_while_sleeping()
    }

    fn wake_within(&self) -> Option<std::time::Duration> {
        self.inner.wake_within()
    }

    fn arm_wakeup(&mut self) -> bool {
        self.inner.arm_wakeup()
    }

    fn service_wakeup(&mut self) -> Result<(), LinkError> {
        self.inner.service_wakeup()
    }

    fn check_path(&self, stall_ms: u32) -> Result<Option<PathFigures>, LinkError> {
        self.inner.check_path(stall_ms)
    }
}
