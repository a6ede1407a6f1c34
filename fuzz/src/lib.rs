//! Helpers shared by the fuzz targets.

use proto::control::{encode, ControlError, Decoder};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

/// Everything a `Decoder` yields from `chunks`, pushed one after another, draining
/// after each push: the messages, then the error that poisoned the stream, if any.
fn decode_chunks<'a, T: DeserializeOwned>(
    chunks: impl Iterator<Item = &'a [u8]>,
) -> (Vec<T>, Option<ControlError>) {
    let mut d = Decoder::default();
    let mut msgs = Vec::new();
    for chunk in chunks {
        d.push(chunk);
        loop {
            match d.next::<T>() {
                Ok(Some(m)) => msgs.push(m),
                Ok(None) => break,
                Err(e) => return (msgs, Some(e)),
            }
        }
    }
    (msgs, None)
}

/// Cuts `data` into pieces of 0 to 15 bytes, sizes drawn from `seed`.
fn pieces(data: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut state = u32::from(seed) | 1;
    let mut at = 0;
    while at < data.len() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let n = ((state >> 16) as usize % 16).min(data.len() - at);
        out.push(&data[at..at + n]);
        at += n;
    }
    out
}

/// The control-stream property, for messages of type `T`: the first input byte
/// chooses how the rest is cut into pushes. Decoding never panics; decoding in
/// pieces yields exactly what decoding in one push yields (messages and error);
/// every decoded message re-encodes into a frame that decodes to itself alone.
pub fn control_stream<T: DeserializeOwned + Serialize + PartialEq + Debug>(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let whole = decode_chunks::<T>(std::iter::once(stream));
    let cut = decode_chunks::<T>(pieces(stream, seed).into_iter());
    assert_eq!(whole, cut, "decoding in pieces differs from decoding at once");

    for m in &whole.0 {
        let frame = encode(m);
        let (again, err) = decode_chunks::<T>(std::iter::once(&frame[..]));
        assert_eq!(err, None, "a re-encoded {m:?} is refused");
        assert_eq!(again.as_slice(), std::slice::from_ref(m));
    }
}

/// Bytes from a peer as a stream lane's pipe hands them out: in the given piece sizes,
/// then "nothing now" (the `stream_frames` and `sealed_records` targets).
pub struct Feed {
    bytes: Vec<u8>,
    at: usize,
    pieces: Vec<usize>,
    next: usize,
}

impl Feed {
    pub fn new(bytes: &[u8], pieces: Vec<usize>) -> Feed {
        Feed {
            bytes: bytes.to_vec(),
            at: 0,
            pieces,
            next: 0,
        }
    }
}

impl transport::stream::Pipe for Feed {
    fn write(&mut self, iov: &[std::io::IoSlice<'_>]) -> Result<usize, transport::LinkError> {
        Ok(iov.iter().map(|s| s.len()).sum())
    }
    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, transport::LinkError> {
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
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }
    fn polled(&self) -> bool {
        true
    }
    fn arm_wakeup(&mut self) -> bool {
        true
    }
}
