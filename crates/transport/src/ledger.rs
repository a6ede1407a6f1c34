//! A lane's ledger of frames: how many went out and how many came in whole, and copies
//! of the frames sent that the peer may not have processed yet — all but rendezvous
//! fragments, which the engine sends again itself — so that, when the lane breaks, what
//! the peer missed goes again on another lane. The peer says how many it processed
//! (LANE_ACK, so the copies can go; LANE_LOST, once the lane broke); frames count from 0
//! on each lane, at both ends alike.

use std::collections::VecDeque;

use proto::wire::data::{HeaderBytes, Kind};

/// Bytes of copies a lane keeps at most: past this it stops keeping (a peer that
/// acknowledges nothing for that long), and its loss can no longer be made good.
pub const MAX_KEPT_BYTES: usize = 64 << 20;

#[derive(Debug, Default)]
pub struct Ledger {
    sent: u64,
    received: u64,
    keeping: bool,
    /// Index of the first frame of the unbroken run of kept ones (fragments included).
    kept_from: u64,
    kept: VecDeque<(u64, HeaderBytes, Vec<u8>)>,
    kept_bytes: usize,
}

impl Ledger {
    /// Frames handed to the link for sending so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Frames received whole (header and payload handed on).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Keep copies of the frames sent from now on.
    pub fn keep(&mut self) {
        if !self.keeping {
            self.keeping = true;
            self.kept_from = self.sent;
        }
    }

    /// Whether copies are kept: whether this lane's loss can be made good.
    pub fn keeping(&self) -> bool {
        self.keeping
    }

    /// Copies held now (frames, bytes).
    pub fn kept(&self) -> (usize, usize) {
        (self.kept.len(), self.kept_bytes)
    }

    #[inline]
    pub(crate) fn on_send(&mut self, header: &HeaderBytes, payload: &[u8]) {
        let index = self.sent;
        self.sent += 1;
        if self.keeping && header.kind() != Kind::Frag {
            self.keep_copy(index, header, payload);
        }
    }

    #[inline(never)]
    fn keep_copy(&mut self, index: u64, header: &HeaderBytes, payload: &[u8]) {
        let bytes = header.as_slice().len() + payload.len();
        if self.kept_bytes + bytes > MAX_KEPT_BYTES {
            self.keeping = false;
            self.kept.clear();
            self.kept_bytes = 0;
            return;
        }
        self.kept_bytes += bytes;
        self.kept.push_back((index, *header, payload.to_vec()));
    }

    #[inline]
    pub(crate) fn on_received(&mut self) {
        self.received += 1;
    }

    /// The peer processed the first `frames` frames: their copies go.
    pub fn forget_below(&mut self, frames: u64) {
        while let Some((index, header, payload)) = self.kept.front() {
            if *index >= frames {
                break;
            }
            self.kept_bytes -= header.as_slice().len() + payload.len();
            self.kept.pop_front();
        }
    }

    /// The lane broke and the peer processed its first `frames` frames: the copies of
    /// the rest (header, payload), in order, to send again; all copies go. `Err` when
    /// some of them were never kept.
    pub fn take_from(&mut self, frames: u64) -> Result<Vec<(HeaderBytes, Vec<u8>)>, String> {
        let kept = std::mem::take(&mut self.kept);
        self.kept_bytes = 0;
        if !self.keeping || frames < self.kept_from {
            return Err(format!(
                "the peer got {frames} of the {} frames sent on the lane, and copies were not kept of them all",
                self.sent
            ));
        }
        Ok(kept
            .into_iter()
            .filter(|(index, _, _)| *index >= frames)
            .map(|(_, h, p)| (h, p))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::wire::data::{DataRepr, Envelope};

    fn matched(seq: u32, len: u64) -> HeaderBytes {
        let env = Envelope {
            ctx: 0,
            src: 0,
            tag: 1,
            seq,
            msg_len: len,
        };
        HeaderBytes::new(&DataRepr::Match { env })
    }

    fn frag() -> HeaderBytes {
        HeaderBytes::new(&DataRepr::Frag {
            recv_id: 1,
            offset: 0,
            len: 3,
        })
    }

    #[test]
    fn copies_of_all_but_fragments_from_the_moment_keeping_starts() {
        let mut l = Ledger::default();
        l.on_send(&matched(0, 2), b"ab");
        l.keep();
        l.on_send(&matched(1, 2), b"cd");
        l.on_send(&frag(), b"xyz");
        l.on_send(&matched(2, 0), b"");
        assert_eq!(
            (l.sent(), l.kept()),
            (4, (2, matched(1, 2).as_slice().len() * 2 + 2))
        );
        let again = l.take_from(2).unwrap();
        assert_eq!(again.len(), 1, "frame 1 arrived; 2 is a fragment, 3 goes again");
        assert_eq!(again[0].0.as_slice(), matched(2, 0).as_slice());
        assert_eq!(l.kept(), (0, 0));
    }

    #[test]
    fn acknowledged_copies_go_and_unkept_frames_cannot_be_replayed() {
        let mut l = Ledger::default();
        l.on_send(&matched(0, 1), b"a");
        l.keep();
        for seq in 1..5 {
            l.on_send(&matched(seq, 1), b"b");
        }
        l.forget_below(3);
        assert_eq!(l.kept().0, 2);
        assert_eq!(l.take_from(3).unwrap().len(), 2);
        let mut l = Ledger::default();
        l.on_send(&matched(0, 1), b"a");
        l.keep();
        l.on_send(&matched(1, 1), b"b");
        assert!(l.take_from(0).is_err(), "frame 0 was sent before keeping began");
    }

    #[test]
    fn a_lane_whose_copies_grow_past_the_bound_stops_keeping() {
        let mut l = Ledger::default();
        l.keep();
        let big = vec![0u8; 1 << 20];
        for seq in 0..70 {
            l.on_send(&matched(seq, big.len() as u64), &big);
        }
        assert!(!l.keeping());
        assert_eq!(l.kept(), (0, 0));
        assert!(l.take_from(69).is_err());
    }

    #[test]
    fn received_frames_count() {
        let mut l = Ledger::default();
        l.on_received();
        l.on_received();
        assert_eq!(l.received(), 2);
    }
}
