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
                transport::eth::mac_text(local),
                transport::eth::mac_text(remote)
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

/// How a lane was set up, as its handshake or wire-up left it.
pub(crate) struct LaneSetup {
    pub route: Route,
    /// This rank set the lane up (rather than accepted it).
    pub initiated: bool,
    pub via: Via,
    /// The lane's name at both ends ([`Lane::tag`]).
    pub tag: u64,
    /// Set up as the pair's first lane ([`Lane::first`]).
    pub first: bool,
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
    /// Set up as the pair's first lane, not as a further one on top of it (another NIC
    /// pair, a WAN stream, raw Ethernet): a second first connection is a duplicate.
    pub first: bool,
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

    /// Whether `peer` has a lane set up as the pair's first. A further lane the peer
    /// opened on top of its first may come up here before that first lane does (its
    /// handshake overtook the first's last frame, which TCP is sending again): that
    /// first lane is then no duplicate, and the peer counts on it.
    pub fn has_first_lane(&self, peer: Rank) -> bool {
        self.of_peer(peer)
            .iter()
            .any(|&id| self.get(id).is_some_and(|l| l.first))
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use transport::tcp::{tcp_caps, tcp_link};

    /// A lane to `peer` over a loopback connection, set up as the pair's first or not.
    fn lane(id: u32, peer: Rank, first: bool) -> (Lane, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (other, remote) = listener.accept().unwrap();
        let local = sock.local_addr().unwrap();
        let link = tcp_link(sock, tcp_caps()).unwrap();
        let info = PathInfo {
            lane: LaneId(id),
            transport: Transport::Tcp,
            route: Route::Ip {
                local,
                remote,
                class: net::classify(remote.ip()),
            },
            initiated: true,
            via: Via::default(),
            sealed: false,
        };
        let lane = Lane {
            peer,
            link: AnyLink::Tcp(link),
            info,
            tag: u64::from(id),
            acked: 0,
            rest: 0,
            first,
        };
        (lane, other)
    }

    #[test]
    fn a_further_lane_that_came_up_first_leaves_room_for_the_first_lane() {
        let mut lanes = Lanes::new(2);
        // A WAN stream the peer opened on top of its first lane overtook that lane's last
        // handshake frame (which TCP was sending again after a loss).
        let (stream, _a) = lane(0, 1, false);
        lanes.insert(stream);
        assert!(lanes.connected(1));
        assert!(
            !lanes.has_first_lane(1),
            "the first lane would be dropped as a duplicate"
        );
        let (first, _b) = lane(1, 1, true);
        lanes.insert(first);
        assert!(lanes.has_first_lane(1));
        assert!(!lanes.has_first_lane(0));
        lanes.remove(LaneId(1));
        assert!(!lanes.has_first_lane(1));
    }
}
