//! Arbitrary bytes arriving on a sealed (encrypted) lane, cut into pieces anywhere: the
//! reader never panics and never hands out a byte, since nobody without the lane's key
//! can make a record that passes its check.
#![no_main]

use std::io::IoSlice;
use std::os::fd::BorrowedFd;

use libfuzzer_sys::fuzz_target;
use transport::sealed::{LaneKeys, Sealed};
use transport::stream::Pipe;
use transport::LinkError;

/// Bytes handed out in the given piece sizes, then "nothing now".
struct Feed {
    bytes: Vec<u8>,
    at: usize,
    pieces: Vec<usize>,
    next: usize,
}

impl Pipe for Feed {
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        Ok(iov.iter().map(|s| s.len()).sum())
    }
    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if self.at == self.bytes.len() {
            return Ok(None);
        }
        let piece = self.pieces.get(self.next).copied().unwrap_or(usize::MAX).max(1);
        self.next += 1;
        let n = piece.min(dst.len()).min(self.bytes.len() - self.at);
        dst[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
        self.at += n;
        Ok(Some(n))
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn polled(&self) -> bool {
        true
    }
    fn arm_wakeup(&mut self) -> bool {
        true
    }
}

fuzz_target!(|data: &[u8]| {
    let (cut, bytes) = data.split_at(data.len().min(8));
    let feed = Feed {
        bytes: bytes.to_vec(),
        at: 0,
        pieces: cut.iter().map(|b| usize::from(*b) * 64 + 1).collect(),
        next: 0,
    };
    let mut sealed = Sealed::new(feed, &LaneKeys::new(&[7; 32], false));
    let mut dst = [0u8; 4096];
    for _ in 0..=bytes.len() {
        match sealed.read(&mut dst) {
            Ok(Some(n)) => panic!("{n} bytes passed a record check without the key"),
            Ok(None) | Err(_) => break,
        }
    }
});
