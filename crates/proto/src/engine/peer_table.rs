//! The engine's state per peer, made when a peer is first changed. Every rank has a
//! peer for each rank of the job, but few talk to many (a rank of 256 talks to 16 in
//! Bruck's alltoall): 328 bytes for each of them, written at start-up, were 21 fresh
//! pages at 256 ranks, each faulted in at every rank.

use super::{Peer, PeerState};
use crate::caps::LanePlan;
use crate::engine::credit::Credit;
use std::collections::{BTreeMap, VecDeque};
use std::ops::{Index, IndexMut};

pub(super) struct Peers {
    slots: Vec<Option<Box<Peer>>>,
    /// What a peer not changed yet reads as.
    idle: Peer,
    start: Start,
}

/// What a peer's state starts from.
#[derive(Clone, Copy)]
struct Start {
    eager_limit: u32,
    frag_size: u32,
    grant: u64,
}

impl Start {
    fn peer(self) -> Peer {
        Peer {
            state: PeerState::Idle,
            lanes: Vec::new(),
            plan: LanePlan::default(),
            control: None,
            next_send_seq: 0,
            next_recv_seq: 0,
            held: BTreeMap::new(),
            backlog: VecDeque::new(),
            eager_limit: self.eager_limit,
            small_eager: self.eager_limit,
            frag_size: self.frag_size,
            streams: VecDeque::new(),
            credit: Credit::new(self.grant),
            coalesce_delay: None,
            batch: Default::default(),
            origin: None,
            offered_out: 0,
            cancels_ahead: Vec::new(),
        }
    }
}

impl Peers {
    pub(super) fn new(size: u32, eager_limit: u32, frag_size: u32, grant: u64) -> Peers {
        let start = Start {
            eager_limit,
            frag_size,
            grant,
        };
        Peers {
            slots: (0..size).map(|_| None).collect(),
            idle: start.peer(),
            start,
        }
    }

    /// How many peers have a state of their own.
    #[cfg(test)]
    fn made(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    #[inline]
    pub(super) fn get(&self, peer: usize) -> Option<&Peer> {
        let slot = self.slots.get(peer)?;
        Some(slot.as_deref().unwrap_or(&self.idle))
    }

    /// Inlined: every message looks its peer up; making one is the rare case.
    #[inline]
    pub(super) fn get_mut(&mut self, peer: usize) -> Option<&mut Peer> {
        if matches!(self.slots.get(peer), Some(None)) {
            self.make(peer);
        }
        self.slots.get_mut(peer)?.as_deref_mut()
    }

    #[cold]
    #[inline(never)]
    fn make(&mut self, peer: usize) {
        self.slots[peer] = Some(Box::new(self.start.peer()));
    }
}

impl Index<usize> for Peers {
    type Output = Peer;
    #[inline]
    fn index(&self, peer: usize) -> &Peer {
        self.get(peer).expect("a rank of the job")
    }
}

impl IndexMut<usize> for Peers {
    #[inline]
    fn index_mut(&mut self, peer: usize) -> &mut Peer {
        self.get_mut(peer).expect("a rank of the job")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_reads_as_idle_until_changed_and_only_a_change_allocates_it() {
        let mut peers = Peers::new(256, 4096, 65536, 1000);
        assert!(peers.slots.iter().all(Option::is_none));
        assert_eq!(peers[7].state, PeerState::Idle);
        assert_eq!((peers[7].eager_limit, peers[7].frag_size), (4096, 65536));
        assert!(peers.get(256).is_none() && peers.get_mut(256).is_none());
        assert!(peers.slots.iter().all(Option::is_none), "reading made nothing");
        peers[7].next_send_seq = 3;
        assert_eq!(peers[7].next_send_seq, 3);
        assert_eq!(peers[8].next_send_seq, 0, "the others start idle");
        assert_eq!(peers.made(), 1);
    }

    #[test]
    fn finalizing_a_job_of_many_ranks_makes_no_state_for_peers_never_talked_to() {
        let cfg = crate::engine::EngineConfig {
            eager_limit: 4096,
            wan_eager_limit: 65536,
            frag_size: 65536,
            lane_queue: 131072,
            unexpected_cap: 1 << 20,
            coalesce_delay_ns: 0,
            coalesce_bytes: 0,
            single_copy: Default::default(),
        };
        let mut ep = crate::engine::Endpoint::new(3, 256, cfg);
        ep.finalize();
        for peer in 0..256 {
            ep.handle_peer_finalized(peer);
            assert!(!ep.coalesce(peer, 0, 0, &[1, 2], 0));
        }
        ep.handle_peer_failed(9, "test");
        assert_eq!(ep.peers.made(), 1, "only the failed peer changed");
        assert_eq!(ep.peer_failure(9), Some("test"));
    }
}
