//! The raw-Ethernet lane: pontoon's datagrams (`proto::wire::eth`, EtherType 0x88B5)
//! straight on a NIC that shares an L2 segment with the peer, beside the kernel's IP
//! traffic on the same NIC (as Open-MX does, unlike GAMMA's dedicated NIC).
//!
//! - One [`EthPort`] per interface: an `AF_PACKET` socket that takes only this
//!   EtherType, shared by every eth lane of the rank on that interface. Whichever lane
//!   reads the socket sorts what arrives by the datagram's lane field: its own datagrams
//!   it handles, others wait in their lane's inbox, handshakes in the port's.
//! - One [`EthPipe`] per lane: `proto::reliable::Channel` makes the datagrams an
//!   ordered, reliable byte stream, under the same framing as every stream lane
//!   (`stream.rs`). The pipe keeps a copy of every byte written until the peer
//!   acknowledges it, and sends again what the channel says was lost.
//! - Frames are sent in batches (`sendmmsg`) and read in batches (`recvmmsg`); the lane
//!   is polled on every progress pass like shared memory (a datagram for one lane may
//!   be read by another), and its fd (a duplicate of the port's socket) wakes a
//!   sleeping rank.
//! - Every datagram carries a keyed tag (see `wire::eth` for why not only the FCS);
//!   one whose tag, source MAC or lane does not match is dropped, like a lost one.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use proto::reliable::{Channel, ChannelConfig, ChannelError, Received};
use proto::wire::eth::{
    at, ethernet, seal, EthFrame, EthKind, EthRepr, FrameKey, ETHERTYPE, ETH_HEADER_LEN, MAX_HEADER_LEN,
};

use crate::packet::{PacketSocket, RxMeta, MAX_BATCH};
use crate::packet_ring::frame_ready;
use crate::stream::{Pipe, StreamLink};
use crate::{Caps, LinkError, PathFigures};

pub type Mac = [u8; 6];

/// `aa:bb:cc:dd:ee:ff`.
pub fn mac_text(mac: &Mac) -> String {
    let parts: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

/// Largest frame read: a 9000-byte jumbo MTU and the Ethernet header, with room.
const RX_FRAME: usize = 9216;
/// Receive staging of the stream framing (many small frames per read).
const RX_STAGING: usize = 64 << 10;

/// Starting capabilities of an eth lane until measured: reliable and ordered as the
/// engine sees it (the channel makes it so); `datagram` from [`EthPipe::one_datagram`].
pub fn eth_caps(datagram: u32) -> Caps {
    Caps {
        latency_ns: 5_000,
        raw: true,
        datagram,
        single_copy: false,
        ..crate::tcp::tcp_caps()
    }
}

pub type EthLink<T> = StreamLink<EthPipe, T>;

pub fn eth_link<T>(pipe: EthPipe, caps: Caps) -> EthLink<T> {
    StreamLink::new(pipe, caps, RX_STAGING)
}

/// A datagram that arrived, with the MAC it came from.
pub struct Arrival {
    pub from: Mac,
    pub bytes: Vec<u8>,
}

struct Port {
    sock: PacketSocket,
    mac: Mac,
    mtu: usize,
    /// Datagrams read by another lane, by the local lane tag they are for.
    inboxes: HashMap<u32, VecDeque<Arrival>>,
    /// Handshake datagrams, for the wire-up.
    handshakes: VecDeque<Arrival>,
    rx: Vec<Vec<u8>>,
    meta: Vec<RxMeta>,
    /// This rank's tags are `tag_base | n` for n in 1..2^TAG_BITS.
    tag_base: u32,
    next_tag: u32,
    /// The last look found frames: read the next batch with one recvmmsg().
    streaming: bool,
    /// Datagrams in all inboxes (a lane looks in its own only when some wait).
    waiting: usize,
    /// Datagrams dropped: for an unknown lane, malformed, or over a full inbox.
    dropped: u64,
    /// What a look may see without this lock: published whenever the ring moves on or
    /// the inboxes change.
    idle: Arc<IdleHint>,
}

/// What a lane may look at without its port's lock ([`EthPipe::service`]): the receive
/// ring's next status word and the datagrams waiting in the inboxes, as the last holder
/// of the lock left them. A lock and an unlock on every look of a busy-polling rank
/// were three quarters of an idle look (16 % of a rank's time in an 8 B ping-pong).
#[derive(Default)]
struct IdleHint {
    next_status: AtomicPtr<AtomicU32>,
    waiting: AtomicUsize,
}

impl IdleHint {
    /// Nothing for any lane of the port: no datagram in an inbox, none in the ring. A
    /// socket without a ring is looked at with recv(): never quiet.
    fn quiet(&self) -> bool {
        if self.waiting.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let status = self.next_status.load(Ordering::Relaxed);
        // SAFETY: a non-null pointer was published by the port holding the ring
        // (`Port::publish_idle`), and every holder of this hint holds that port too
        // (`EthPort`), so the ring's mapping lives.
        !status.is_null() && !unsafe { frame_ready(status) }
    }
}

/// One interface's raw socket, shared by the rank's eth lanes on it (clones share it).
#[derive(Clone)]
pub struct EthPort {
    port: Arc<Mutex<Port>>,
    /// The port's own hint (`Port::idle`), read without the lock.
    idle: Arc<IdleHint>,
}

/// Slots of a port's receive ring: two peers' windows (`ChannelConfig::window`) of
/// full datagrams; 0.8 MiB at MTU 1500, 4.6 MiB at 9000.
const RING_FRAMES: usize = 512;

/// Datagrams of one lane waiting in its inbox at most; more are dropped (and sent again
/// by the peer): a lane that is never read cannot grow the port's memory.
const INBOX_MAX: usize = 1024;

/// Bits of a lane tag below the rank's (see [`EthPort::open`]).
const TAG_BITS: u32 = 12;

/// A classic BPF program that keeps the datagrams whose lane field names one of
/// `rank`'s tags, and opening handshakes (lane 0), and drops the rest in the kernel:
/// every rank of a host has a socket on the NIC, and each would otherwise get, wake up
/// for and copy every frame meant for the others.
fn rank_filter(rank: u32) -> [libc::sock_filter; 6] {
    // The lane field is little-endian at byte 4 of the datagram (18 of the frame); BPF
    // loads words big-endian, so the mask and value are byte-swapped to match.
    let mask = (u32::MAX << TAG_BITS).swap_bytes();
    let want = (rank << TAG_BITS).swap_bytes();
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const AND_K: u16 = 0x54;
    const RET_K: u16 = 0x06;
    [
        op(LD_W_ABS, 0, 0, (ETH_HEADER_LEN + at::LANE) as u32),
        op(JEQ_K, 2, 0, 0), // lane 0: an opening handshake, for whichever rank it names
        op(AND_K, 0, 0, mask),
        op(JEQ_K, 0, 1, want),
        op(RET_K, 0, 0, u32::MAX), // keep the whole frame
        op(RET_K, 0, 0, 0),        // not this rank's
    ]
}

impl EthPort {
    /// Opens the port of rank `rank` on `ifname`. Needs `CAP_NET_RAW`. Its lane tags
    /// carry the rank in their high bits, so that the kernel hands each rank of a host
    /// only its own datagrams ([`rank_filter`]).
    pub fn open(ifname: &str, rank: u32) -> io::Result<EthPort> {
        if rank >= 1 << (32 - TAG_BITS) {
            return Err(io::Error::other(format!(
                "raw Ethernet lanes name at most {} ranks",
                1u32 << (32 - TAG_BITS)
            )));
        }
        let sock = PacketSocket::bind_protocol(ifname, ETHERTYPE, &rank_filter(rank), RING_FRAMES)?;
        let mac = sock.mac()?;
        let mtu = sock.mtu()?;
        let _ = sock.set_buffer_sizes(4 << 20, 4 << 20);
        // Receive buffers only for a socket without a ring.
        let batch = if sock.has_ring() { 0 } else { MAX_BATCH };
        let idle = Arc::new(IdleHint::default());
        let port = Port {
            sock,
            mac,
            mtu,
            inboxes: HashMap::new(),
            handshakes: VecDeque::new(),
            rx: (0..batch).map(|_| vec![0u8; RX_FRAME]).collect(),
            meta: vec![RxMeta::default(); batch],
            tag_base: rank << TAG_BITS,
            next_tag: 1,
            streaming: false,
            waiting: 0,
            dropped: 0,
            idle: idle.clone(),
        };
        port.publish_idle();
        Ok(EthPort {
            port: Arc::new(Mutex::new(port)),
            idle,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Port> {
        // A panic elsewhere while holding the lock leaves plain data behind: go on.
        self.port.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn mac(&self) -> Mac {
        self.lock().mac
    }

    pub fn mtu(&self) -> usize {
        self.lock().mtu
    }

    /// Datagrams this port read and dropped (for no lane of its own, or malformed).
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    pub fn ifname(&self) -> String {
        self.lock().sock.ifname().to_owned()
    }

    /// A fresh lane tag on this port (never 0, which handshakes use), with its inbox;
    /// `None` when all of the rank's tags on this port are in use.
    pub fn new_tag(&self) -> Option<u32> {
        let mut p = self.lock();
        for _ in 1..1u32 << TAG_BITS {
            let tag = p.tag_base | p.next_tag;
            p.next_tag = (p.next_tag + 1) % (1 << TAG_BITS);
            p.next_tag = p.next_tag.max(1);
            if let std::collections::hash_map::Entry::Vacant(e) = p.inboxes.entry(tag) {
                e.insert(VecDeque::new());
                return Some(tag);
            }
        }
        None
    }

    /// The lane `tag` is gone: datagrams for it are dropped from now on.
    pub fn release_tag(&self, tag: u32) {
        let mut p = self.lock();
        let dropped = p.inboxes.remove(&tag).map_or(0, |q| q.len());
        p.waiting -= dropped;
        p.publish_idle();
    }

    /// Whether a datagram waits for lane `tag` from `from` that `key` verifies (the
    /// socket is read first).
    pub fn inbox_verifies(&self, tag: u32, from: Mac, key: &FrameKey) -> bool {
        let mut p = self.lock();
        p.drain_socket();
        p.inboxes.get(&tag).is_some_and(|q| {
            q.iter()
                .any(|a| a.from == from && EthFrame::new_checked(&a.bytes[..]).is_ok_and(|f| f.verify(key)))
        })
    }

    /// Handshake datagrams that arrived (reading the socket first).
    pub fn take_handshakes(&self) -> Vec<Arrival> {
        let mut p = self.lock();
        p.drain_socket();
        p.handshakes.drain(..).collect()
    }

    /// Sends one datagram (`header` then `payload`, sealed with `key` unless it is a
    /// handshake) to `to`. A full device queue drops it: the sender tries again.
    pub fn send_one(
        &self,
        to: Mac,
        header: &EthRepr,
        payload: &[u8],
        key: Option<&FrameKey>,
    ) -> io::Result<()> {
        let p = self.lock();
        let mut frame = vec![0u8; ETH_HEADER_LEN + header.header_len() + payload.len()];
        p.ethernet_header(&mut frame, to);
        let at = ETH_HEADER_LEN + header.emit(&mut frame[ETH_HEADER_LEN..]);
        frame[at..].copy_from_slice(payload);
        if let Some(key) = key {
            seal(&mut frame[ETH_HEADER_LEN..], key);
        }
        p.sock.send(&frame)
    }

    /// A duplicate of the socket's fd, for waking a sleeping rank (each lane watches its
    /// own: epoll takes a file once per fd number).
    pub fn wake_fd(&self) -> io::Result<OwnedFd> {
        self.lock().sock.as_fd().try_clone_to_owned()
    }
}

impl Port {
    fn ethernet_header(&self, frame: &mut [u8], to: Mac) {
        frame[ethernet::DESTINATION..ethernet::SOURCE].copy_from_slice(&to);
        frame[ethernet::SOURCE..ethernet::ETHERTYPE].copy_from_slice(&self.mac);
        frame[ethernet::ETHERTYPE..ETH_HEADER_LEN].copy_from_slice(&ETHERTYPE.to_be_bytes());
    }

    /// Reads what waits on the socket: datagrams for lane `mine` go to `handle` (source
    /// MAC, and the datagram without its Ethernet header), handshakes and other lanes'
    /// to their queues (copied). Returns whether anything was read.
    fn pump(&mut self, mine: u32, handle: &mut dyn FnMut(Mac, &[u8])) -> bool {
        let pumped = self.pump_frames(mine, handle);
        self.publish_idle();
        pumped
    }

    /// Tells lanes looking without the lock where the ring's next frame will be and
    /// whether datagrams wait in the inboxes.
    fn publish_idle(&self) {
        let status = self.sock.ring_next_status().unwrap_or(std::ptr::null());
        self.idle.next_status.store(status.cast_mut(), Ordering::Relaxed);
        self.idle.waiting.store(self.waiting, Ordering::Relaxed);
    }

    fn pump_frames(&mut self, mine: u32, handle: &mut dyn FnMut(Mac, &[u8])) -> bool {
        let Port {
            sock,
            rx,
            meta,
            inboxes,
            handshakes,
            waiting,
            dropped,
            streaming,
            ..
        } = self;
        let mut sorter = Sorter {
            mine,
            inboxes,
            handshakes,
            waiting,
            dropped,
        };
        if sock.has_ring() {
            // Frames where the kernel put them: an empty look is a load, not a recv().
            let mut n = 0;
            while n < MAX_BATCH {
                let Some(frame) = sock.ring_frame() else {
                    break;
                };
                // A frame the slot cut fails its tag like a corrupted one.
                sorter.sort(frame.bytes().0, handle);
                n += 1;
            }
            return n > 0;
        }
        // One system call per look. While frames stream in, a batch (recvmmsg); on an
        // idle or latency-bound lane one recv(), which costs less than preparing a
        // batch, and is not followed by a second call that would only find nothing.
        let n = if *streaming {
            sock.recv_batch(rx, meta).unwrap_or(0)
        } else {
            match sock.recv(&mut rx[0]) {
                Ok(len) => {
                    meta[0].len = len;
                    1
                }
                Err(_) => 0, // WouldBlock, or nothing useful to do about it
            }
        };
        *streaming = n > 1 || (n == 1 && !*streaming);
        for i in 0..n {
            let len = meta[i].len.min(RX_FRAME);
            sorter.sort(&rx[i][..len], handle);
        }
        n > 0
    }

    /// Reads everything waiting into the queues (bounded: a flood cannot hold the
    /// caller here).
    fn drain_socket(&mut self) {
        for _ in 0..64 {
            if !self.pump(0, &mut |_, _| {}) {
                return;
            }
        }
    }
}

/// Where [`Port::pump`] puts each frame it reads.
struct Sorter<'a> {
    mine: u32,
    inboxes: &'a mut HashMap<u32, VecDeque<Arrival>>,
    handshakes: &'a mut VecDeque<Arrival>,
    waiting: &'a mut usize,
    dropped: &'a mut u64,
}

impl Sorter<'_> {
    /// Hands `frame` to `handle` if it is for lane `mine`, or to the queue it is for.
    fn sort(&mut self, frame: &[u8], handle: &mut dyn FnMut(Mac, &[u8])) {
        if frame.len() < ETH_HEADER_LEN + at::LANE + 4 {
            *self.dropped += 1;
            return;
        }
        let from: Mac = frame[ethernet::SOURCE..ethernet::ETHERTYPE]
            .try_into()
            .expect("6 bytes");
        let datagram = &frame[ETH_HEADER_LEN..];
        // Sorted by kind and lane before any check: the receiver checks all.
        let kind = datagram[at::KIND];
        let lane = u32::from_le_bytes(datagram[at::LANE..at::LANE + 4].try_into().expect("4 bytes"));
        let arrival = || Arrival {
            from,
            bytes: datagram.to_vec(),
        };
        if kind == EthKind::Handshake as u8 {
            if self.handshakes.len() < INBOX_MAX {
                self.handshakes.push_back(arrival());
            }
        } else if lane == self.mine {
            handle(from, datagram);
        } else if let Some(q) = self.inboxes.get_mut(&lane).filter(|q| q.len() < INBOX_MAX) {
            q.push_back(arrival());
            *self.waiting += 1;
        } else {
            *self.dropped += 1;
        }
    }
}

/// The far end of an eth lane, and what both ends agreed in the handshake.
#[derive(Debug, Clone, Copy)]
pub struct EthPeer {
    pub mac: Mac,
    /// The peer's tag of the lane (written into every datagram we send).
    pub tag: u32,
    /// The key of the lane's datagram tags (from the lane's key: the job secret and both
    /// handshake nonces).
    pub key: FrameKey,
}

/// An eth lane's byte stream: see the module documentation.
pub struct EthPipe {
    port: EthPort,
    tag: u32,
    peer: EthPeer,
    rx_side: RxSide,
    epoch: Instant,
    /// Stream bytes from `tx_base` on, kept until acknowledged.
    tx: VecDeque<u8>,
    tx_base: u64,
    tx_cap: usize,
    wake: OwnedFd,
    frames: Vec<Vec<u8>>,
    /// When the delivery rate was last measured, and the bytes acknowledged then.
    rate_since: Cell<(Instant, u64)>,
    /// Stream bytes per datagram.
    max_payload: u16,
    /// Looks at the lane so far (see `service`).
    looks: u32,
    /// When the last PING went out (lane clock), and how many did.
    pinged: u64,
    pings: u32,
}

/// Retransmission timer expiries without any acknowledgement before a lane stalled for
/// `PONTOON_LANE_TIMEOUT_MS` counts as dead (as a TCP lane's retransmissions do): one
/// loss after an idle spell must not.
const STALL_EXPIRIES: u32 = 3;

/// How often the lane's round trip is measured again.
const PING_EVERY: u64 = 1_000_000_000;

/// Looks at an idle lane between two readings of the clock for its timers.
const TIMER_PASSES: u32 = 32;

/// The channel and what arrived through it.
struct RxSide {
    channel: Channel,
    /// Stream bytes received in order, not read yet.
    bytes: VecDeque<u8>,
}

impl RxSide {
    /// One datagram for this lane from `from`: checked, then given to the channel.
    fn handle(&mut self, peer: &EthPeer, now: u64, from: Mac, bytes: &[u8]) -> Result<(), LinkError> {
        if from != peer.mac {
            return Ok(()); // another station using this lane's number: not our peer
        }
        let Ok(frame) = EthFrame::new_checked(bytes) else {
            return Ok(());
        };
        if !frame.verify(&peer.key) {
            return Ok(()); // corrupted or forged: as good as lost
        }
        let repr = EthRepr::parse(&frame);
        match self.channel.handle_datagram(now, &repr, frame.payload()) {
            Ok(Received::InOrder) => {
                self.bytes.extend(frame.payload());
                while let Some(p) = self.channel.take_ready() {
                    self.bytes.extend(&p);
                }
            }
            Ok(_) => {}
            Err(e) => return Err(LinkError::Protocol(format!("raw Ethernet lane: {e}"))),
        }
        Ok(())
    }
}

impl EthPipe {
    /// The lane `tag` of `port` (from [`EthPort::new_tag`]) to `peer`.
    pub fn new(port: EthPort, tag: u32, peer: EthPeer, mut cfg: ChannelConfig) -> io::Result<EthPipe> {
        let mtu = port.mtu();
        cfg.max_payload = mtu
            .saturating_sub(MAX_HEADER_LEN)
            .clamp(64, RX_FRAME - ETH_HEADER_LEN - MAX_HEADER_LEN) as u16;
        let wake = port.wake_fd()?;
        let now = Instant::now();
        let mut channel = Channel::new(cfg, peer.tag, 0);
        // The lane's latency before any data flows: the engine plans with it.
        channel.ping();
        Ok(EthPipe {
            tx_cap: cfg.window as usize * usize::from(cfg.max_payload),
            rx_side: RxSide {
                channel,
                bytes: VecDeque::new(),
            },
            port,
            tag,
            peer,
            epoch: now,
            tx: VecDeque::new(),
            tx_base: 0,
            wake,
            frames: Vec::new(),
            rate_since: Cell::new((now, 0)),
            max_payload: cfg.max_payload,
            looks: 0,
            pinged: 0,
            pings: 0,
        })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// The largest eager message that fits one datagram with its frame header: what
    /// the lane carries eagerly (seed 003's "below 1488 bytes"); larger ones go by TCP.
    pub fn one_datagram(&self) -> u32 {
        u32::from(self.max_payload).saturating_sub(proto::wire::data::MAX_HEADER_LEN as u32)
    }

    /// The MAC of this end's interface.
    pub fn local_mac(&self) -> Mac {
        self.port.mac()
    }

    pub fn stats(&self) -> proto::reliable::ChannelStats {
        self.rx_side.channel.stats()
    }

    /// Reads and handles what arrived for this lane, fires due timers, lets go of
    /// acknowledged bytes and sends what the channel wants sent.
    fn service(&mut self) -> Result<(), LinkError> {
        // Nothing arrived for any lane of the port and no timer pass is due: done without
        // taking the port's lock.
        let look = self.looks.wrapping_add(1);
        if !look.is_multiple_of(TIMER_PASSES) && self.port.idle.quiet() {
            self.looks = look;
            return Ok(());
        }
        // The clock is read when a datagram arrives (for round trips) and otherwise on
        // every TIMER_PASSES-th look: on a busy-polling rank, reading it on every look
        // was a tenth of the idle loop, and the timers (50 µs and up) do not need it.
        let mut now = None;
        let arrived = {
            let EthPipe {
                port,
                tag,
                peer,
                rx_side,
                epoch,
                ..
            } = self;
            let mut p = port.lock();
            let waiting = if p.waiting > 0 {
                let q = p.inboxes.get_mut(tag).map(std::mem::take).unwrap_or_default();
                p.waiting -= q.len();
                p.publish_idle();
                q
            } else {
                VecDeque::new()
            };
            let mut failed = None;
            let mut on = |from: Mac, bytes: &[u8]| {
                let t = *now.get_or_insert_with(|| epoch.elapsed().as_nanos() as u64);
                if failed.is_none() {
                    failed = rx_side.handle(peer, t, from, bytes).err();
                }
            };
            for a in &waiting {
                on(a.from, &a.bytes);
            }
            let pumped = p.pump(*tag, &mut on);
            if let Some(e) = failed {
                return Err(e);
            }
            pumped || !waiting.is_empty()
        };
        self.looks = self.looks.wrapping_add(1);
        if !arrived && !self.looks.is_multiple_of(TIMER_PASSES) {
            return Ok(());
        }
        let now = now.unwrap_or_else(|| self.now());
        let channel = &mut self.rx_side.channel;
        // A round trip needs the peer looking at its lanes: the smallest of several
        // tries, a few at first, then one now and then.
        let every = if self.pings < 8 {
            PING_EVERY / 100
        } else {
            PING_EVERY
        };
        if now.saturating_sub(self.pinged) >= every {
            self.pinged = now;
            self.pings += 1;
            channel.ping();
        }
        if channel.poll_timeout().is_some_and(|t| t <= now) {
            channel.handle_timeout(now).map_err(|e| stalled(&e))?;
        }
        let acked = channel.acked_offset();
        if acked > self.tx_base {
            self.tx.drain(..(acked - self.tx_base) as usize);
            self.tx_base = acked;
        }
        self.transmit(now)
    }

    /// Sends every datagram the channel has ready, in batches.
    fn transmit(&mut self, now: u64) -> Result<(), LinkError> {
        let Some(first) = self.rx_side.channel.poll_transmit(now) else {
            return Ok(());
        };
        let p = self.port.lock();
        let mut n = 0;
        let mut next = Some(first);
        while let Some(t) = next.take().or_else(|| self.rx_side.channel.poll_transmit(now)) {
            if self.frames.len() <= n {
                self.frames
                    .push(Vec::with_capacity(ETH_HEADER_LEN + MAX_HEADER_LEN + 1500));
            }
            let f = &mut self.frames[n];
            let len = usize::from(t.header.payload_len);
            f.resize(ETH_HEADER_LEN + t.header.header_len() + len, 0);
            p.ethernet_header(f, self.peer.mac);
            let at = ETH_HEADER_LEN + t.header.emit(&mut f[ETH_HEADER_LEN..]);
            if len > 0 {
                copy_out(&self.tx, (t.offset - self.tx_base) as usize, &mut f[at..]);
            }
            seal(&mut f[ETH_HEADER_LEN..], &self.peer.key);
            n += 1;
            if n == MAX_BATCH {
                send_all(&p.sock, &self.frames[..n]);
                n = 0;
            }
        }
        send_all(&p.sock, &self.frames[..n]);
        Ok(())
    }
}

/// Sends `frames`; what the device does not take is lost, and the channel's timers
/// send it again (the usual cause, a full transmit queue, is congestion anyway).
fn send_all(sock: &PacketSocket, frames: &[Vec<u8>]) {
    if let [one] = frames {
        // send() costs the kernel less than a batch of one.
        let _ = sock.send(one);
        return;
    }
    let mut at = 0;
    while at < frames.len() {
        match sock.send_batch(&frames[at..]) {
            Ok(n) => at += n.max(1),
            Err(_) => at += 1,
        }
    }
}

/// Copies `dst.len()` bytes of `q` from `from` on into `dst`.
fn copy_out(q: &VecDeque<u8>, from: usize, dst: &mut [u8]) {
    let (a, b) = q.as_slices();
    let mut done = 0;
    if from < a.len() {
        let n = (a.len() - from).min(dst.len());
        dst[..n].copy_from_slice(&a[from..from + n]);
        done = n;
    }
    if done < dst.len() {
        let (at, n) = ((from + done) - a.len(), dst.len() - done);
        dst[done..].copy_from_slice(&b[at..at + n]);
    }
}

fn stalled(e: &ChannelError) -> LinkError {
    LinkError::Stalled(format!("raw Ethernet lane: {e}"))
}

impl Drop for EthPipe {
    fn drop(&mut self) {
        self.port.release_tag(self.tag);
    }
}

impl Pipe for EthPipe {
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        let room = self.tx_cap.saturating_sub(self.tx.len());
        let mut taken = 0;
        for s in iov {
            let n = s.len().min(room - taken);
            self.tx.extend(&s[..n]);
            taken += n;
            if taken == room {
                break;
            }
        }
        if taken > 0 {
            self.rx_side.channel.queue(taken as u64);
            self.transmit(self.now())?;
        } else {
            self.service()?;
        }
        Ok(taken)
    }

    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        if self.rx_side.bytes.is_empty() {
            self.service()?;
        }
        let bytes = &mut self.rx_side.bytes;
        if bytes.is_empty() {
            return Ok(None);
        }
        let n = dst.len().min(bytes.len());
        copy_out(bytes, 0, &mut dst[..n]);
        bytes.drain(..n);
        Ok(Some(n))
    }

    fn queued(&self) -> u64 {
        self.rx_side.channel.unacked()
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wake.as_fd())
    }

    fn polled(&self) -> bool {
        true
    }

    fn watch_while_sleeping(&self) -> bool {
        true
    }

    fn wake_within(&self) -> Option<std::time::Duration> {
        let due = self.rx_side.channel.poll_timeout()?;
        Some(std::time::Duration::from_nanos(due.saturating_sub(self.now())))
    }

    /// No sleep while bytes wait (timers bound the sleep instead: `wake_within`).
    fn arm_wakeup(&mut self) -> bool {
        self.rx_side.bytes.is_empty()
            && self
                .port
                .lock()
                .inboxes
                .get(&self.tag)
                .is_none_or(VecDeque::is_empty)
    }

    fn check_path(&self, stall_ms: u32) -> Result<Option<PathFigures>, LinkError> {
        // Held to the same limit as a TCP lane: nothing acknowledged for the stall time
        // although the data went out again and again (a NIC taken down, a cable pulled).
        let channel = &self.rx_side.channel;
        if let Some((waited, expiries)) = channel.stalled(self.now()) {
            let ms = waited / 1_000_000;
            if ms >= u64::from(stall_ms) && expiries >= STALL_EXPIRIES {
                return Err(LinkError::Stalled(format!(
                    "no acknowledgement for {ms} ms; {} datagram(s) unacknowledged, the retransmission \
                     timer expired {expiries} times (a NIC or the segment is gone; PONTOON_LANE_TIMEOUT_MS \
                     sets how long a lane may stall)",
                    channel.in_flight()
                )));
            }
        }
        // The rate over the time since the last look, once enough has flowed for it
        // to mean something (else 0: not measured).
        let (since, base) = self.rate_since.get();
        let acked = channel.acked_offset();
        let mut delivery_rate = 0;
        if acked - base >= 1 << 20 {
            let secs = since.elapsed().as_secs_f64().max(1e-6);
            delivery_rate = ((acked - base) as f64 / secs) as u64;
            self.rate_since.set((Instant::now(), acked));
        }
        Ok(Some(PathFigures {
            min_rtt_ns: self.rx_side.channel.min_rtt().unwrap_or(0),
            delivery_rate,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_without_the_lock_is_quiet_only_with_nothing_anywhere() {
        let hint = IdleHint::default();
        assert!(!hint.quiet(), "no ring: always looked at");
        let status = AtomicU32::new(0);
        hint.next_status
            .store(std::ptr::from_ref(&status).cast_mut(), Ordering::Relaxed);
        assert!(hint.quiet());
        status.store(1, Ordering::Relaxed); // TP_STATUS_USER: a frame in the ring
        assert!(!hint.quiet());
        status.store(0, Ordering::Relaxed);
        hint.waiting.store(1, Ordering::Relaxed); // a datagram in some lane's inbox
        assert!(!hint.quiet());
    }
}
