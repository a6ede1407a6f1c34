//! A fabric written in a test, to show what a transport must provide: a loopback one
//! that dials by connecting a socket over 127.0.0.1 and reports the lane on its next
//! pass, and one that never carries lanes and says why. The dial loop and the refusals
//! need nothing else from them.

use std::collections::HashSet;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use net::{CardTable, EndpointCard};
use proto::handshake::Identity;
use proto::{Nanos, Rank};
use transport::tcp::{tcp_caps, tcp_link};
use transport::{AnyLink, Transport};

use super::*;
use crate::boot::config::Config;
use crate::lanes::{LaneSetup, Lanes, Route, Via};
use crate::waiter::Waiter;

/// Dials by connecting to its own listener; the accepted end is the lane.
struct Loopback {
    listener: TcpListener,
    dialled: Vec<Rank>,
    /// The dialling ends of the loops, kept open.
    ends: Vec<TcpStream>,
    asked: usize,
}

impl Loopback {
    fn new() -> Loopback {
        Loopback {
            listener: TcpListener::bind("127.0.0.1:0").expect("loopback"),
            dialled: Vec::new(),
            ends: Vec::new(),
            asked: 0,
        }
    }
}

impl Fabric for Loopback {
    fn refusal_before_dial(&self, peer: Rank, around: &Around<'_>) -> Option<Refusal> {
        (peer == around.id.rank).then(|| Refusal::new(Transport::Tcp, "a rank does not dial itself"))
    }

    fn dial(
        &mut self,
        peer: Rank,
        _: Duration,
        _: &Around<'_>,
        _: &mut Vec<FabricEvent>,
    ) -> Result<(), Refusal> {
        self.asked += 1;
        let addr = self.listener.local_addr().expect("bound");
        let sock = TcpStream::connect(addr).map_err(|e| Refusal::new(Transport::Tcp, e.to_string()))?;
        self.ends.push(sock);
        self.dialled.push(peer);
        Ok(())
    }

    fn progress(&mut self, _: &Around<'_>, _: &mut Waiter, events: &mut Vec<FabricEvent>) -> bool {
        let before = events.len();
        for peer in std::mem::take(&mut self.dialled) {
            let (sock, remote) = self.listener.accept().expect("the dialled connection");
            let local = sock.local_addr().expect("connected");
            let link = tcp_link(sock, tcp_caps()).expect("a link");
            events.push(FabricEvent::LaneUp {
                peer,
                link: Box::new(AnyLink::Tcp(link)),
                setup: LaneSetup {
                    route: Route::Ip {
                        local,
                        remote,
                        class: net::classify(remote.ip()),
                    },
                    initiated: true,
                    via: Via::default(),
                    tag: 0,
                    first: true,
                },
            });
        }
        events.len() > before
    }

    fn dialling_first(&self, peer: Rank) -> bool {
        self.dialled.contains(&peer)
    }

    fn first_lane_up(&mut self, peer: Rank, _: Nanos) {
        self.dialled.retain(|&p| p != peer);
    }
}

/// Never carries lanes, and says why.
struct Closed;

impl Fabric for Closed {
    fn refusal_before_dial(&self, _: Rank, _: &Around<'_>) -> Option<Refusal> {
        Some(Refusal::new(Transport::Eth, "closed for the test").helped_by("open it"))
    }
    fn dial(
        &mut self,
        _: Rank,
        _: Duration,
        _: &Around<'_>,
        _: &mut Vec<FabricEvent>,
    ) -> Result<(), Refusal> {
        unreachable!("refused before dialling")
    }
    fn progress(&mut self, _: &Around<'_>, _: &mut Waiter, _: &mut Vec<FabricEvent>) -> bool {
        false
    }
    fn dialling_first(&self, _: Rank) -> bool {
        false
    }
    fn first_lane_up(&mut self, _: Rank, _: Nanos) {}
}

/// Two ranks on two nodes; this is rank 0.
fn job() -> (Identity, CardTable) {
    let card = |node| EndpointCard {
        node,
        site: None,
        seen_from: None,
        control_rtt_us: None,
        port4: 0,
        port6: 0,
        ifaces: Vec::new(),
        relays: Vec::new(),
    };
    let id = Identity {
        job_id: [1; 16],
        secret: [2; 32],
        rank: 0,
        size: 2,
    };
    let cards = CardTable::from_encoded(vec![card(1).encode(), card(2).encode()]).expect("cards");
    (id, cards)
}

fn around<'a>(
    id: &'a Identity,
    cards: &'a CardTable,
    cfg: &'a Config,
    lanes: &'a Lanes,
    refusals: &'a Refusals,
) -> Around<'a> {
    Around {
        id,
        cards,
        cfg,
        lanes,
        refusals,
        ready: HashSet::new(),
        now: 0,
        handshaking: Vec::new(),
        finalizing: false,
    }
}

#[test]
fn a_new_fabric_dials_after_one_that_refuses_and_reports_its_lane() {
    let (id, cards) = job();
    let mut cfg = Config::from_lookup(&|_| None).expect("defaults");
    cfg.transports = vec![Transport::Eth, Transport::Tcp];
    let (lanes, refusals) = (Lanes::new(2), Refusals::default());
    let around = around(&id, &cards, &cfg, &lanes, &refusals);
    let mut loopback = Loopback::new();
    let mut closed = Closed;
    let mut events = Vec::new();
    let (took, refused) = dial_first(
        &mut [(Transport::Eth, &mut closed), (Transport::Tcp, &mut loopback)],
        1,
        Duration::from_secs(1),
        &around,
        &mut events,
    );
    assert_eq!(took, Some(Transport::Tcp));
    assert_eq!(
        refused.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["raw Ethernet: closed for the test (open it)"]
    );
    assert!(loopback.dialling_first(1) && events.is_empty());

    let mut waiter = Waiter::new().expect("epoll");
    assert!(loopback.progress(&around, &mut waiter, &mut events));
    let [FabricEvent::LaneUp { peer, link, setup }] = events.as_slice() else {
        panic!("one lane up");
    };
    assert_eq!((*peer, link.transport(), setup.first), (1, Transport::Tcp, true));
    loopback.first_lane_up(1, 0);
    assert!(!loopback.dialling_first(1));
}

#[test]
fn a_fabric_not_allowed_or_facing_itself_is_never_asked_to_dial() {
    let (id, cards) = job();
    let mut cfg = Config::from_lookup(&|_| None).expect("defaults");
    let (lanes, refusals) = (Lanes::new(2), Refusals::default());
    let mut loopback = Loopback::new();
    let mut events = Vec::new();

    cfg.transports = vec![Transport::Shm];
    let around_it = around(&id, &cards, &cfg, &lanes, &refusals);
    let (took, refused) = dial_first(
        &mut [(Transport::Tcp, &mut loopback)],
        1,
        Duration::from_secs(1),
        &around_it,
        &mut events,
    );
    assert_eq!(took, None);
    assert_eq!(refused[0].why, "not in PONTOON_TRANSPORTS=shm");

    cfg.transports = vec![Transport::Tcp];
    let around_it = around(&id, &cards, &cfg, &lanes, &refusals);
    let (took, refused) = dial_first(
        &mut [(Transport::Tcp, &mut loopback)],
        0,
        Duration::from_secs(1),
        &around_it,
        &mut events,
    );
    assert_eq!(
        (took, refused[0].why.as_str()),
        (None, "a rank does not dial itself")
    );
    assert_eq!(loopback.asked, 0);
}
