//! Setting up raw-Ethernet lanes with ranks on the same L2 segment.
//!
//! At start a rank opens an eth port on each of its Ethernet interfaces (it needs
//! `CAP_NET_RAW`; without it, it says so once and TCP carries everything) and marks
//! them on its endpoint card. Towards a peer with marked interfaces on another node, it
//! probes each pair of its ports and the peer's MACs with the job's authenticated
//! handshake carried in HANDSHAKE datagrams: a HELLO that reaches the peer proves the
//! segment is shared, and the ACK and CONFIRM finish the lane as on any transport.
//! The HELLO goes again every `RESEND` until answered (datagrams may be lost); the
//! acceptor answers a repeated HELLO with the same ACK. A lost CONFIRM is made up for by
//! the lane's first datagram: only the initiator can have sealed it with the lane's
//! key, which comes from both handshake nonces and the job secret.

use std::time::Duration;

use net::card::CardIface;
use net::EndpointCard;
use proto::dial::{Resend, ResendStep};
use proto::handshake::{accept_hello, Acceptor, Contention, HandshakeError, Identity, Initiator};
use proto::reliable::ChannelConfig;
use proto::wire::eth::{EthFrame, EthKind, EthRepr, FrameKey, SackBlock, MAX_SACKS};
use proto::wire::handshake::FRAME_LEN;
use proto::wire::HandshakeStatus;
use proto::wire::{HandshakeFrame, HandshakeRepr};
use proto::PathKind;
use proto::{Nanos, Rank};
use transport::eth::{mac_text, EthPeer, EthPipe, EthPort, Mac};

use crate::clock;

/// A HELLO unanswered for this long goes again.
const RESEND: Duration = Duration::from_millis(25);

/// How a raw-Ethernet set-up ended.
pub enum EthProgress {
    Established {
        peer: Rank,
        pipe: Box<EthPipe>,
        initiated: bool,
        /// The handshake's name of the lane (for LANE_ACK and LANE_LOST).
        lane_tag: u64,
        /// The lane's interface (index) and the peer's MAC.
        ifindex: u32,
        remote: Mac,
    },
    /// A probe of ours found no lane: why.
    Failed {
        peer: Rank,
        first_lane: bool,
        why: String,
    },
    /// The peer's simultaneous first lane wins.
    Yielded { peer: Rank },
}

struct Dial {
    peer: Rank,
    port: usize,
    to: Mac,
    tag: u32,
    ini: Initiator,
    hello: [u8; FRAME_LEN],
    first_lane: bool,
    resend: Resend,
}

struct Accept {
    port: usize,
    from: Mac,
    their_tag: u32,
    tag: u32,
    acc: Acceptor,
    /// The lane's datagram key, derived once: the lane's first datagram proves a lost
    /// CONFIRM, checked on every wire-up pass until it comes.
    key: FrameKey,
    ack: [u8; FRAME_LEN],
    started: Nanos,
}

/// The rank's eth ports and the raw-Ethernet handshakes under way.
#[derive(Default)]
pub struct EthWireup {
    ports: Vec<(EthPort, u32)>,
    /// Duplicates of the ports' sockets: a HELLO arriving wakes the rank's wire-up.
    pub wake: Vec<std::os::fd::OwnedFd>,
    /// Why this rank has no raw Ethernet, if it has none (for doctor).
    pub refusal: Option<String>,
    dials: Vec<Dial>,
    accepts: Vec<Accept>,
}

fn handshake(lane: u32, my_tag: u32, len: usize) -> EthRepr {
    EthRepr {
        kind: EthKind::Handshake,
        lane,
        seq: my_tag,
        ack: 0,
        window_end: 0,
        payload_len: len as u16,
        sack_count: 0,
        ack_delay_us: 0,
        sacks: [SackBlock::default(); MAX_SACKS],
    }
}

impl EthWireup {
    /// Opens a port on every Ethernet interface of `ifaces` (not loopback, not a
    /// virtual bridge). A rank without `CAP_NET_RAW` gets none, and the reason.
    pub fn open(ifaces: &[CardIface], rank: Rank) -> EthWireup {
        let mut w = EthWireup::default();
        let mut errors = Vec::new();
        for i in ifaces
            .iter()
            .filter(|i| !i.loopback && !i.bridge && i.mac.is_some())
        {
            match EthPort::open(&i.name, rank).and_then(|p| Ok((p.wake_fd()?, p))) {
                Ok((fd, p)) => {
                    w.ports.push((p, i.index));
                    w.wake.push(fd);
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if w.ports.is_empty() {
            w.refusal = Some(if errors.is_empty() {
                "no Ethernet interface".into()
            } else {
                errors.join("; ")
            });
        }
        w
    }

    /// Marks the interfaces this rank takes raw-Ethernet lanes on.
    pub fn mark_card(&self, card: &mut EndpointCard) {
        for i in &mut card.ifaces {
            i.raw_eth = self.ports.iter().any(|(_, index)| *index == i.index);
        }
    }

    pub fn has_ports(&self) -> bool {
        !self.ports.is_empty()
    }

    /// The interfaces this rank takes raw-Ethernet lanes on.
    pub fn port_names(&self) -> Vec<String> {
        self.ports.iter().map(|(p, _)| p.ifname()).collect()
    }

    /// Whether a handshake is under way (the event loop then looks every pass).
    pub fn busy(&self) -> bool {
        !self.dials.is_empty() || !self.accepts.is_empty()
    }

    /// The peer's own first lane came up: our probes for one are moot.
    pub fn abandon_first(&mut self, peer: Rank) {
        self.drop_dials(|d| d.peer == peer && d.first_lane);
    }

    /// Ends the probes `done` picks, giving their lane tags back.
    fn drop_dials(&mut self, done: impl Fn(&Dial) -> bool) {
        let ports = &self.ports;
        self.dials.retain(|d| {
            if done(d) {
                ports[d.port].0.release_tag(d.tag);
            }
            !done(d)
        });
    }

    /// Whether a first lane to `peer` is being probed by us.
    pub fn dials_first(&self, peer: Rank) -> bool {
        self.dials.iter().any(|d| d.peer == peer && d.first_lane)
    }

    /// Whether `theirs` takes raw-Ethernet lanes somewhere.
    pub fn offers(theirs: &EndpointCard) -> bool {
        theirs.ifaces.iter().any(|i| i.raw_eth && i.mac.is_some())
    }

    /// Probes `peer` from every port to every marked interface of its card. Returns
    /// how many probes went out.
    pub fn start(
        &mut self,
        id: &Identity,
        peer: Rank,
        theirs: &EndpointCard,
        first_lane: bool,
        timeout: Duration,
    ) -> usize {
        let macs: Vec<Mac> = theirs
            .ifaces
            .iter()
            .filter(|i| i.raw_eth)
            .filter_map(|i| i.mac)
            .collect();
        let now = clock::now();
        let mut started = 0;
        for (port, (p, _)) in self.ports.iter().enumerate() {
            for &to in &macs {
                let nonce = crate::fabric::nonce();
                let (ini, hello) = if first_lane {
                    Initiator::new(id.clone(), peer, nonce)
                } else {
                    Initiator::extra_lane(id.clone(), peer, nonce, PathKind::Direct, false)
                };
                let Some(tag) = p.new_tag() else { continue };
                let _ = p.send_one(to, &handshake(0, tag, FRAME_LEN), &hello, None);
                self.dials.push(Dial {
                    peer,
                    port,
                    to,
                    tag,
                    ini,
                    hello,
                    first_lane,
                    resend: Resend::new(clock::nanos(RESEND), clock::nanos(timeout), now),
                });
                started += 1;
            }
        }
        started
    }

    /// Reads the handshakes that arrived and drives ours; `timeout` bounds each
    /// probe. `contention` says what this rank has going with a peer.
    pub(super) fn poll(
        &mut self,
        id: &Identity,
        timeout: Duration,
        contention: impl Fn(Rank) -> Contention,
    ) -> Vec<EthProgress> {
        let mut out = Vec::new();
        for port in 0..self.ports.len() {
            for a in self.ports[port].0.take_handshakes() {
                let Ok(f) = EthFrame::new_checked(&a.bytes[..]) else {
                    continue;
                };
                let repr = EthRepr::parse(&f);
                if repr.kind != EthKind::Handshake {
                    continue;
                }
                if repr.lane == 0 {
                    self.on_hello(id, port, a.from, repr.seq, f.payload(), &contention);
                } else if let Some(i) = self
                    .dials
                    .iter()
                    .position(|d| d.port == port && d.tag == repr.lane && d.to == a.from)
                {
                    out.extend(self.on_ack(i, repr.seq, f.payload()));
                } else if let Some(i) = self
                    .accepts
                    .iter()
                    .position(|c| c.port == port && c.tag == repr.lane && c.from == a.from)
                {
                    let c = self.accepts.swap_remove(i);
                    match c.acc.handle_confirm(f.payload()) {
                        Ok(_) => out.push(self.accepted(c)),
                        Err(e) => tracing::warn!("rank {}: refused raw-Ethernet lane: {e}", id.rank),
                    }
                }
            }
        }
        let now = clock::now();
        let limit = clock::nanos(timeout);
        // A lost CONFIRM: the lane's first datagram, sealed with its key, stands for it.
        let mut i = 0;
        while i < self.accepts.len() {
            let c = &self.accepts[i];
            if self.ports[c.port].0.inbox_verifies(c.tag, c.from, &c.key) {
                let c = self.accepts.swap_remove(i);
                out.push(self.accepted(c));
            } else if now.saturating_sub(c.started) > limit {
                let c = self.accepts.swap_remove(i);
                self.ports[c.port].0.release_tag(c.tag);
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.dials.len() {
            let d = &mut self.dials[i];
            match d.resend.poll(now) {
                ResendStep::Wait => {}
                ResendStep::Send => {
                    let _ =
                        self.ports[d.port]
                            .0
                            .send_one(d.to, &handshake(0, d.tag, FRAME_LEN), &d.hello, None);
                }
                ResendStep::Expired => {
                    let d = self.dials.swap_remove(i);
                    let port = &self.ports[d.port].0;
                    port.release_tag(d.tag);
                    // One probe of several failing says little; the last one says why.
                    if !self.dials.iter().any(|o| o.peer == d.peer) {
                        out.push(EthProgress::Failed {
                            peer: d.peer,
                            first_lane: d.first_lane,
                            why: format!(
                                "no answer to raw-Ethernet probes within {} ms (last from {} to {}): not \
                                 on one L2 segment, or frames of EtherType 0x88B5 are filtered",
                                timeout.as_millis(),
                                port.ifname(),
                                mac_text(&d.to)
                            ),
                        });
                    }
                    continue;
                }
            }
            i += 1;
        }
        out
    }

    fn on_hello(
        &mut self,
        id: &Identity,
        port: usize,
        from: Mac,
        their_tag: u32,
        hello: &[u8],
        contention: &impl Fn(Rank) -> Contention,
    ) {
        let p = &self.ports[port].0;
        // Every rank of a host sees the HELLOs sent to its NIC: the one named answers.
        let named = HandshakeFrame::new_checked(hello).map(|f| HandshakeRepr::parse(&f).dst);
        if named.is_ok_and(|dst| dst != id.rank) {
            return;
        }
        if let Some(c) = self
            .accepts
            .iter()
            .find(|c| c.port == port && c.from == from && c.their_tag == their_tag)
        {
            // Our ACK was lost: the same again.
            let _ = p.send_one(from, &handshake(their_tag, c.tag, FRAME_LEN), &c.ack, None);
            return;
        }
        let verdict = accept_hello(id, hello, crate::fabric::nonce(), contention);
        match verdict.result {
            Ok(acc) => {
                let Some(tag) = p.new_tag() else { return };
                let _ = p.send_one(from, &handshake(their_tag, tag, FRAME_LEN), &verdict.ack, None);
                self.accepts.push(Accept {
                    port,
                    from,
                    their_tag,
                    tag,
                    key: FrameKey::new(&acc.lane_key()),
                    acc,
                    ack: verdict.ack,
                    started: clock::now(),
                });
            }
            Err(e) => {
                let _ = p.send_one(from, &handshake(their_tag, 0, FRAME_LEN), &verdict.ack, None);
                if e != HandshakeError::Refused(HandshakeStatus::Simultaneous) {
                    tracing::warn!(
                        "rank {}: refused a raw-Ethernet probe from {}: {e}",
                        id.rank,
                        mac_text(&from)
                    );
                }
            }
        }
    }

    fn on_ack(&mut self, i: usize, their_tag: u32, ack: &[u8]) -> Option<EthProgress> {
        let d = &self.dials[i];
        let port = self.ports[d.port].0.clone();
        let outcome = d.ini.handle_ack(ack);
        let key = d.ini.lane_key(ack);
        let d = self.dials.swap_remove(i);
        let (confirm, key) = match (outcome, key) {
            (Ok(c), Some(k)) => (c, k),
            (Err(HandshakeError::Refused(HandshakeStatus::Simultaneous)), _) if d.first_lane => {
                port.release_tag(d.tag);
                return Some(EthProgress::Yielded { peer: d.peer });
            }
            (Err(e), _) => {
                port.release_tag(d.tag);
                tracing::debug!(peer = d.peer, "raw-Ethernet probe refused: {e}");
                return None;
            }
            (Ok(_), None) => return None,
        };
        let _ = port.send_one(d.to, &handshake(their_tag, d.tag, FRAME_LEN), &confirm, None);
        // One lane per peer: the other probes to it are done.
        self.drop_dials(|o| o.peer == d.peer);
        let ifindex = self.ports[d.port].1;
        let peer = EthPeer {
            mac: d.to,
            tag: their_tag,
            key: FrameKey::new(&key),
        };
        match EthPipe::new(port, d.tag, peer, ChannelConfig::default()) {
            Ok(pipe) => Some(EthProgress::Established {
                peer: d.peer,
                pipe: Box::new(pipe),
                initiated: true,
                lane_tag: d.ini.lane_tag(),
                ifindex,
                remote: d.to,
            }),
            Err(e) => Some(EthProgress::Failed {
                peer: d.peer,
                first_lane: d.first_lane,
                why: format!("raw-Ethernet lane: {e}"),
            }),
        }
    }

    fn accepted(&self, c: Accept) -> EthProgress {
        let (port, ifindex) = &self.ports[c.port];
        let peer = c.acc.peer();
        let eth_peer = EthPeer {
            mac: c.from,
            tag: c.their_tag,
            key: c.key,
        };
        match EthPipe::new(port.clone(), c.tag, eth_peer, ChannelConfig::default()) {
            Ok(pipe) => EthProgress::Established {
                peer,
                pipe: Box::new(pipe),
                initiated: false,
                lane_tag: c.acc.lane_tag(),
                ifindex: *ifindex,
                remote: c.from,
            },
            Err(e) => EthProgress::Failed {
                peer,
                first_lane: false,
                why: format!("raw-Ethernet lane: {e}"),
            },
        }
    }
}
