//! The control channel between a rank and the launcher's coordinator: authentication,
//! a key-value store with a fence (PMI-like), abort, failure notices and finalize.
//!
//! Framing: `u32` little-endian length, then a postcard-encoded message. The codec is
//! sans-IO: feed bytes with [`Decoder::push`], take messages with [`Decoder::next`].

use serde::{Deserialize, Serialize};

/// Largest control message accepted; a fence result for thousands of ranks fits.
pub const MAX_MESSAGE: usize = 64 << 20;

/// Rank → coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToCoordinator {
    /// First message: proves the rank holds the job secret (`mac` over job id, rank, nonce).
    Hello {
        job_id: [u8; 16],
        rank: u32,
        pid: u32,
        nonce: [u8; 16],
        mac: [u8; 32],
    },
    /// Publishes a key for the next fence.
    Put { key: String, value: Vec<u8> },
    /// Waits until every rank has reached fence `epoch`; answered with `FenceDone`.
    Fence { epoch: u32 },
    /// MPI_Abort: the coordinator ends the job with `code`.
    Abort { code: i32, message: String },
    /// The rank has entered finalize; its exit is expected from now on.
    Finalize,
    /// The rank gave up on reaching `rank`, which failed there: the coordinator tells
    /// `rank`, so that its operations with the sender fail too instead of waiting.
    Unreachable { rank: u32, cause: String },
}

/// Coordinator → rank.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FromCoordinator {
    /// Answer to `Hello`; `mac` over the rank's nonce proves the coordinator knows the secret.
    /// `seen_from` is the address the connection came from as the coordinator sees it: not
    /// one of the rank's own when a NAT lies between them.
    Welcome {
        mac: [u8; 32],
        seen_from: core::net::SocketAddr,
    },
    /// Every key put by any rank before fence `epoch`.
    FenceDone { epoch: u32, kvs: Vec<(String, Vec<u8>)> },
    /// A rank died or failed; pending operations with it must fail, not hang.
    PeerFailed { rank: u32, cause: String },
    /// The job is being ended (abort by a rank, timeout, signal); the rank should exit,
    /// with `code` (what the job as a whole ends with: an abort's code, for instance).
    Shutdown { reason: String, code: i32 },
    /// Finalize fence reached by every rank.
    FinalizeDone,
}

fn transcript(tag: &[u8], job_id: &[u8; 16], rank: u32, nonce: &[u8; 16]) -> Vec<u8> {
    let mut t = Vec::with_capacity(tag.len() + 36);
    t.extend_from_slice(tag);
    t.extend_from_slice(job_id);
    t.extend_from_slice(&rank.to_le_bytes());
    t.extend_from_slice(nonce);
    t
}

/// MAC a rank puts in its `Hello`.
pub fn hello_mac(secret: &[u8; 32], job_id: &[u8; 16], rank: u32, nonce: &[u8; 16]) -> [u8; 32] {
    crate::wire::handshake::mac(secret, &transcript(b"pontoon-ctl-hello", job_id, rank, nonce))
}

/// MAC the coordinator puts in its `Welcome` (over `seen_from` too).
pub fn welcome_mac(
    secret: &[u8; 32],
    job_id: &[u8; 16],
    rank: u32,
    nonce: &[u8; 16],
    seen_from: &core::net::SocketAddr,
) -> [u8; 32] {
    let mut t = transcript(b"pontoon-ctl-welcome", job_id, rank, nonce);
    t.extend_from_slice(seen_from.to_string().as_bytes());
    crate::wire::handshake::mac(secret, &t)
}

pub use crate::wire::handshake::mac_eq;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ControlError {
    #[error("control message of {0} bytes exceeds the limit of {MAX_MESSAGE}")]
    TooLarge(usize),
    #[error("malformed control message: {0}")]
    Malformed(String),
}

/// Encodes one framed message.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let body = postcard::to_stdvec(msg).expect("control messages always serialize");
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Incremental decoder for a byte stream of framed messages.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Next complete message, if any. An error poisons the stream: close it.
    // Generic over the message type, so it cannot be `Iterator::next`.
    #[allow(clippy::should_implement_trait)]
    pub fn next<T: for<'de> Deserialize<'de>>(&mut self) -> Result<Option<T>, ControlError> {
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if len > MAX_MESSAGE {
            return Err(ControlError::TooLarge(len));
        }
        if self.buf.len() < 4 + len {
            return Ok(None);
        }
        let msg =
            postcard::from_bytes(&self.buf[4..4 + len]).map_err(|e| ControlError::Malformed(e.to_string()));
        self.buf.drain(..4 + len);
        msg.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_in_pieces() {
        let msgs = vec![
            ToCoordinator::Hello {
                job_id: [1; 16],
                rank: 3,
                pid: 77,
                nonce: [2; 16],
                mac: [3; 32],
            },
            ToCoordinator::Put {
                key: "card/3".into(),
                value: vec![1, 2, 3],
            },
            ToCoordinator::Fence { epoch: 1 },
            ToCoordinator::Abort {
                code: 2,
                message: "boom".into(),
            },
            ToCoordinator::Finalize,
        ];
        let bytes: Vec<u8> = msgs.iter().flat_map(encode).collect();
        let mut d = Decoder::default();
        let mut got = Vec::new();
        for chunk in bytes.chunks(3) {
            d.push(chunk);
            while let Some(m) = d.next::<ToCoordinator>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
    }

    #[test]
    fn oversized_length_is_refused() {
        let mut d = Decoder::default();
        d.push(&u32::MAX.to_le_bytes());
        assert!(matches!(
            d.next::<FromCoordinator>(),
            Err(ControlError::TooLarge(_))
        ));
    }

    #[test]
    fn macs_bind_rank_and_direction() {
        let s = [5; 32];
        let h = hello_mac(&s, &[1; 16], 2, &[3; 16]);
        assert_ne!(h, hello_mac(&s, &[1; 16], 3, &[3; 16]));
        let from: core::net::SocketAddr = "10.0.0.5:4000".parse().unwrap();
        let w = welcome_mac(&s, &[1; 16], 2, &[3; 16], &from);
        assert_ne!(h, w);
        // A forged `seen_from` breaks the MAC.
        assert_ne!(
            w,
            welcome_mac(&s, &[1; 16], 2, &[3; 16], &"198.51.100.9:4000".parse().unwrap())
        );
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut d = Decoder::default();
            d.push(&bytes);
            for _ in 0..4 {
                match d.next::<FromCoordinator>() { Ok(Some(_)) => continue, _ => break }
            }
        }
    }
}
