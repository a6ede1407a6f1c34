//! Flow control of eager messages: the memory a rank holds for eager messages it has
//! not matched yet is bounded by `EngineConfig::unexpected_cap`.
//!
//! Each rank grants every peer an equal share of its cap (`grant`). A sender spends
//! credit on each eager message (its length plus a fixed charge for the envelope, so
//! that a flood of empty messages is bounded too) and sends a message as a rendezvous
//! when its credit does not cover it: an RTS holds no payload at the receiver, and the
//! receiver pulls the data once a receive matches. The receiver gives credit back once
//! a message has left its buffers (matched, or placed straight into a posted receive),
//! in batches of a quarter of the grant, with a CREDIT frame carrying the running total
//! (so a repeated frame changes nothing). Both sides derive the grant from the cap and
//! the job size, which must therefore be the same on every rank.

/// Bytes charged per eager message on top of its payload (the envelope and queue entry).
pub const MESSAGE_CHARGE: u64 = 64;

/// What an eager message of `len` bytes costs in credit.
#[inline]
pub fn cost(len: u64) -> u64 {
    len.saturating_add(MESSAGE_CHARGE)
}

/// The credit share of each peer: the cap divided among the other ranks.
pub fn grant(cap: u64, size: u32) -> u64 {
    cap / u64::from(size.saturating_sub(1).max(1))
}

/// Both directions of the eager flow control with one peer.
#[derive(Debug, Clone)]
pub(super) struct Credit {
    /// Sender side: bytes this rank may still send eagerly to the peer.
    available: u64,
    /// Sender side: the highest running total the peer has given back.
    returned_seen: u64,
    /// Receiver side: bytes of the peer's eager messages received and not yet given back.
    charged: u64,
    /// Receiver side: bytes consumed and not yet given back.
    to_return: u64,
    /// Receiver side: running total given back.
    returned_total: u64,
}

impl Credit {
    pub(super) fn new(grant: u64) -> Credit {
        Credit {
            available: grant,
            returned_seen: 0,
            charged: 0,
            to_return: 0,
            returned_total: 0,
        }
    }

    /// Sender: spends the credit for an eager message of `len` bytes; false (nothing
    /// spent) when there is not enough and the message must go as a rendezvous.
    #[inline]
    pub(super) fn spend(&mut self, len: u64) -> bool {
        let c = cost(len);
        if c > self.available {
            return false;
        }
        self.available -= c;
        true
    }

    /// Sender: the peer's CREDIT frame with its running total.
    pub(super) fn handle_returned(&mut self, total: u64, grant: u64) -> Result<(), String> {
        if total <= self.returned_seen {
            return Ok(()); // nothing new
        }
        let more = total - self.returned_seen;
        match self.available.checked_add(more) {
            Some(a) if a <= grant => {
                self.available = a;
                self.returned_seen = total;
                Ok(())
            }
            _ => Err(format!(
                "gave back {more} bytes of eager credit it was never given (grant {grant})"
            )),
        }
    }

    /// Receiver: an eager message of `len` bytes arrived from the peer.
    #[inline]
    pub(super) fn charge(&mut self, len: u64, grant: u64) -> Result<(), String> {
        let charged = self.charged.saturating_add(cost(len));
        if charged > grant {
            return Err(self.beyond_credit(len, grant));
        }
        self.charged = charged;
        Ok(())
    }

    /// Receiver: the longest eager message [`Credit::charge`] would take now (`None`:
    /// not even an empty one).
    #[inline]
    pub(super) fn chargeable(&self, grant: u64) -> Option<u64> {
        grant.checked_sub(self.charged)?.checked_sub(MESSAGE_CHARGE)
    }

    #[cold]
    #[inline(never)]
    fn beyond_credit(&self, len: u64, grant: u64) -> String {
        format!(
            "sent an eager message of {len} bytes beyond its credit ({} of {grant} bytes already \
             held; PONTOON_UNEXPECTED_CAP must be the same on every rank)",
            self.charged
        )
    }

    /// Receiver: an eager message of `len` bytes charged by [`Credit::charge`] never
    /// arrived whole (a broken lane cut it off); its copy sent again is charged anew.
    pub(super) fn uncharge(&mut self, len: u64) {
        self.charged -= cost(len).min(self.charged);
    }

    /// Receiver: an eager message of `len` bytes left this rank's buffers. Returns the
    /// running total to send in a CREDIT frame when a batch is due.
    #[inline]
    pub(super) fn consumed(&mut self, len: u64, grant: u64) -> Option<u64> {
        self.to_return += cost(len);
        if self.to_return < (grant / 4).max(1) {
            return None;
        }
        self.charged -= self.to_return.min(self.charged);
        self.returned_total += self.to_return;
        self.to_return = 0;
        Some(self.returned_total)
    }

    /// Sender: credit left for eager messages.
    pub(super) fn available(&self) -> u64 {
        self.available
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_is_spent_given_back_and_never_exceeds_the_grant() {
        let grant = 1000;
        let mut tx = Credit::new(grant);
        let mut rx = Credit::new(grant);
        assert!(tx.spend(500));
        rx.charge(500, grant).unwrap();
        assert!(!tx.spend(400), "564 + 464 > 1000");
        assert!(tx.spend(300));
        rx.charge(300, grant).unwrap();
        assert!(rx.charge(100, grant).is_err(), "beyond what was granted");
        let total = rx.consumed(500, grant).expect("a batch is due");
        tx.handle_returned(total, grant).unwrap();
        tx.handle_returned(total, grant).unwrap(); // a repeated frame changes nothing
        assert_eq!(tx.available(), grant - cost(300));
        assert!(tx.handle_returned(total + grant, grant).is_err());
    }

    #[test]
    fn small_returns_are_batched() {
        let grant = 64 * cost(8);
        let mut rx = Credit::new(grant);
        let due: Vec<_> = (0..32).filter_map(|_| rx.consumed(8, grant)).collect();
        assert_eq!(due.len(), 2, "one CREDIT per quarter of the grant");
    }

    #[test]
    fn the_grant_is_an_equal_share_of_the_cap() {
        assert_eq!(grant(1 << 20, 1), 1 << 20);
        assert_eq!(grant(1 << 20, 2), 1 << 20);
        assert_eq!(grant(1600, 17), 100);
    }
}
