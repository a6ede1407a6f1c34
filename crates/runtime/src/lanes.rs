//! The lanes of a rank: each one's link, route and peer, under the identity the engine
//! gave it ([`LaneId`]). The one table the runtime, its epoll sets and `pontoon doctor`
//! look lanes up in.

use std::net::SocketAddr;

use net::AddrClass;
use proto::{LaneId, PayloadToken, Rank};
use transport::{AnyLink, Link, Transport};

/// Where a lane runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A network lane between two socket addresses; `class` is the remote address's.
    Ip {
        local: SocketAddr,
        remote: SocketAddr,
        class: AddrClass,
    },
    /// Within one node (shared memory).
    Node,
    /// Raw Ethernet from this rank's interface `ifindex` to the peer's MAC.
    Eth {
        ifindex: u32,
        local: [u8; 6],
        remote: [u8; 6],
    },
}

impl std::fmt::Display for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Route::Ip { local, remote, .. } => write!(f, "{local} -> {remote}"),
            Route::Node => write!(f, "within the node"),
            Route::Eth { local, remote, .. } => write!(
                f,
                "{} -> {} (raw Ethernet)",
                crate::eth_wireup::mac_text(local),
                crate::eth_wireup::mac_text(remote)
            ),
        }
    }
}

/// A lane as `pontoon doctor` and error messages describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    pub lane: LaneId,
    pub transport: Transport,
    pub route: Route,
    /// This rank set the lane up (rather than accepted it).
    pub initiated: bool,
    /// Direct, or through relays (then the route's remote end is a relay).
    pub via: Via,
    /// Its bytes travel encrypted (`PONTOON_ENCRYPT`).
    pub sealed: bool,
}

/// How a lane reaches its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Via {
    pub kind: net::PathKind,
    /// On a two-proxy lane this rank set up: the relay at the peer's site, which the one
    /// at the route's remote end passed the stream on to.
    pub next: Option<SocketAddr>,
}

pub(crate) struct Lane {
    pub peer: Rank,
    pub link: AnyLink<PayloadToken>,
    pub info: PathInfo,
    /// The lane's name at both ends (from its handshake): how each tells the other
    /// which lane a LANE_ACK or LANE_LOST is about.
    pub tag: u64,
    /// Frames of the peer on this lane acknowledged to it so far.
    pub acked: u64,
    /// Passes to go before this lane is read again (see `Runtime::progress`).
    pub rest: u8,
}

/// Every open lane, by identity, with an index by peer.
pub(crate) struct Lanes {
    /// Indexed by `LaneId` (identities are small and never reused: a closed lane leaves
    /// a `None`).
    slots: Vec<Option<Lane>>,
    by_peer: Vec<Vec<LaneId>>,
    /// The lanes whose frames arrive without waking their fd (shared memory; raw
    /// Ethernet) and that are read on every pass (not those that are signalled).
    polled: Vec<LaneId>,
    /// The lanes that are not polled (their fd says when to read).
    sockets: Vec<LaneId>,
}

impl Lanes {
    pub fn new(peers: usize) -> Lanes {
        Lanes {
            slots: Vec::new(),
            by_peer: vec![Vec::new(); peers],
            polled: Vec::new(),
            sockets: Vec::new(),
        }
    }

    pub fn insert(&mut self, lane: Lane) {
        let id = lane.info.lane;
        if self.slots.len() <= id.index() {
            self.slots.resize_with(id.index() + 1, || None);
        }
        self.by_peer[lane.peer as usize].push(id);
        if lane.link.signalled() {
            // Read when the node's bitmap of writers says so (`Runtime::service_signalled`).
        } else if lane.link.polled() {
            self.polled.push(id);
        } else {
            self.sockets.push(id);
        }
        self.slots[id.index()] = Some(lane);
    }

    pub fn remove(&mut self, id: LaneId) -> Option<Lane> {
        let lane = self.slots.get_mut(id.index())?.take()?;
        self.by_peer[lane.peer as usize].retain(|l| *l != id);
        self.polled.retain(|l| *l != id);
        self.sockets.retain(|l| *l != id);
        Some(lane)
    }

    #[inline]
    pub fn get(&self, id: LaneId) -> Option<&Lane> {
        self.slots.get(id.index())?.as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, id: LaneId) -> Option<&mut Lane> {
        self.slots.get_mut(id.index())?.as_mut()
    }

    /// The lanes to `peer`, in the order they came up.
    pub fn of_peer(&self, peer: Rank) -> &[LaneId] {
        self.by_peer.get(peer as usize).map_or(&[], Vec::as_slice)
    }

    /// The lanes to `peer` carried by one of `kinds`.
    pub fn of_peer_by(&self, peer: Rank, kinds: &[Transport]) -> Vec<LaneId> {
        self.of_peer(peer)
            .iter()
            .copied()
            .filter(|&id| self.get(id).is_some_and(|l| kinds.contains(&l.info.transport)))
            .collect()
    }

    pub fn connected(&self, peer: Rank) -> bool {
        !self.of_peer(peer).is_empty()
    }

    /// Peers with at least one lane.
    pub fn peers_connected(&self) -> usize {
        self.by_peer.iter().filter(|l| !l.is_empty()).count()
    }

    pub fn polled(&self) -> &[LaneId] {
        &self.polled
    }

    /// The lanes read when their fd says so (sockets).
    pub fn sockets(&self) -> &[LaneId] {
        &self.sockets
    }

    pub fn iter(&self) -> impl Iterator<Item = &Lane> + '_ {
        self.slots.iter().flatten()
    }

    /// Whether any lane has bytes queued for writing.
    pub fn any_queued(&self) -> bool {
        self.iter().any(|l| l.link.tx_queued() > 0)
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.by_peer.iter_mut().for_each(Vec::clear);
        self.polled.clear();
        self.sockets.clear();
    }
}
