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
