//! What a TCP lane that just came up leads to: the rest of its hole punch, a punch of
//! its own, further lanes (one per interface pair, the parallel streams of a WAN path,
//! a raw-Ethernet probe). Decided here, from what the lane is, so the rules are tested
//! without sockets; the runtime carries them out.

use crate::wire::handshake::PathKind;
use crate::Rank;

/// A TCP lane that came up, as far as the decision needs it.
#[derive(Debug, Clone, Copy)]
pub struct LaneUp {
    pub me: Rank,
    pub peer: Rank,
    /// The first lane of the pair (not a further one).
    pub first: bool,
    /// This rank set it up (rather than accepted it).
    pub initiated: bool,
    pub kind: PathKind,
    /// Its round trip makes it a WAN lane ([`crate::Caps::is_wan`]).
    pub wan: bool,
    /// Raw Ethernet may carry lanes to the peer (allowed, ports on both ends, another
    /// node).
    pub raw_possible: bool,
}

/// One thing to do after a lane came up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Further {
    /// The lane is the punch's own: the punch succeeded.
    PunchSucceeded,
    /// Punch a straight path through both NATs, to leave the relay.
    StartPunch,
    /// A further lane for every other interface pair.
    InterfacePairs,
    /// The parallel streams of a WAN path.
    WanStreams,
    /// Probe the peer for a raw-Ethernet lane.
    RawProbe,
}

/// What `up` leads to, in order. Only the lower rank of a pair opens further lanes, so
/// that there is one set; a pair that needs a relay has no direct interface pairs to
/// add, and punches instead (the rank that dialled the relay).
pub fn after_lane_up(up: &LaneUp) -> Vec<Further> {
    let mut next = Vec::new();
    if up.kind == PathKind::Punched {
        next.push(Further::PunchSucceeded);
    } else if up.initiated && up.first && up.kind.relayed() {
        next.push(Further::StartPunch);
    }
    if up.first && up.me < up.peer && up.kind == PathKind::Direct {
        next.push(Further::InterfacePairs);
        if up.wan {
            next.push(Further::WanStreams);
        }
        if up.raw_possible {
            next.push(Further::RawProbe);
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(me: Rank, peer: Rank, kind: PathKind) -> LaneUp {
        LaneUp {
            me,
            peer,
            first: true,
            initiated: true,
            kind,
            wan: false,
            raw_possible: false,
        }
    }

    #[test]
    fn the_lower_rank_of_a_direct_pair_opens_the_further_lanes() {
        assert_eq!(
            after_lane_up(&up(0, 1, PathKind::Direct)),
            [Further::InterfacePairs]
        );
        assert_eq!(after_lane_up(&up(1, 0, PathKind::Direct)), []);
        let far = LaneUp {
            wan: true,
            raw_possible: true,
            ..up(0, 1, PathKind::Direct)
        };
        assert_eq!(
            after_lane_up(&far),
            [Further::InterfacePairs, Further::WanStreams, Further::RawProbe]
        );
        // A further lane leads to nothing more.
        let extra = LaneUp { first: false, ..far };
        assert_eq!(after_lane_up(&extra), []);
    }

    #[test]
    fn a_relayed_first_lane_is_punched_by_the_rank_that_dialled_it() {
        for kind in [PathKind::NatProxy, PathKind::TwoProxy] {
            assert_eq!(after_lane_up(&up(0, 1, kind)), [Further::StartPunch]);
            assert_eq!(after_lane_up(&up(1, 0, kind)), [Further::StartPunch]);
            let accepted = LaneUp {
                initiated: false,
                ..up(0, 1, kind)
            };
            assert_eq!(after_lane_up(&accepted), [], "the accepting end waits");
        }
        assert_eq!(
            after_lane_up(&up(1, 0, PathKind::Punched)),
            [Further::PunchSucceeded]
        );
        let punched_extra = LaneUp {
            first: false,
            ..up(0, 1, PathKind::Punched)
        };
        assert_eq!(after_lane_up(&punched_extra), [Further::PunchSucceeded]);
    }
}
