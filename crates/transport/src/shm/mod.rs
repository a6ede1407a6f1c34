//! Shared memory between the ranks of one node: one segment per node (a `memfd`), made
//! by the node's lowest rank (its leader) and handed to every other rank of the node,
//! holding two single-producer, single-consumer byte rings (one per direction) for every
//! pair of its ranks, under the stream framing of `stream.rs`, so a frame is a header and
//! its payload as on TCP.
//!
//! Why one segment per node: with a segment, a socket and a handshake per pair, the
//! first alltoall of 256 ranks on one host set up 32,640 of each, and its time grew with
//! the square of the ranks. Now a rank joins once (the runtime's `fabric/shm/join.rs`: the
//! job's authenticated handshake with the leader, over a Unix socket in the abstract
//! namespace; the leader sends the segment's fd, `SCM_RIGHTS`, after checking the
//! CONFIRM), and a lane between two members costs no handshake: the opener announces it
//! in the peer's slot.
//!
//! Layout ([`Layout`]): a header page (magic, ranks, ring size); a slot per rank (its
//! "asleep" flag, pid and rank, a bitmap of the peers that opened a lane to it and one of
//! the peers that wrote to it since it last looked); a box per ordered pair, the boxes
//! to a rank side by side; the collective area (`coll.rs`: counters, and a "done"
//! line, slots and buffers per rank); then an area per pair of ranks: the rings' heads
//! and the two rings.
//!
//! Boxes: a write of up to [`BOX_PAYLOAD`] bytes goes into the next box of its direction
//! when that is free, otherwise into the ring. A direction has a few boxes used in turn,
//! each a line; the producer fills one and stamps it with its number, the consumer
//! expects the next number and counts the boxes it emptied on a line of its own, which
//! the producer reads only when it has filled them all. So a small message moves one
//! line, once: a single box that the consumer emptied by a write had the producer fetch
//! the line back before filling it, twice the traffic. A box read in place (a small
//! message taken by a blocking receive) is told emptied at the consumer's next look at
//! the lane, not at once: the store and full fence would sit between the message's
//! arrival and the reply. A receiver polls the next box and
//! the control line (the ring's tail) per peer, all on a few pages of its own. Each rank allocates the pages of the boxes to it when it maps the segment: with
//! 256 ranks, each opening a lane to every other, the rings' sparse pages cost four page
//! faults and two fresh pages per pair, most of the time of a first alltoall; boxes on
//! pages already there are mapped sixteen at a time. (The leader allocated all of them
//! once, a serial n² that held up every join: 3.5 ms at 256 ranks.) A full box says
//! where it sits in the stream (the ring's tail when it was filled): the consumer reads
//! the ring up to there, then the box. It reads the tail before it looks at the next box,
//! so a box it does not see yet lies beyond the tail it read.
//!
//! Written bits: on a node of [`SIGNAL_FROM`] ranks or more, a producer also sets its bit
//! in the consumer's bitmap of writers after each write, and the consumer reads only the
//! lanes whose bits it took ([`ShmNode::take_written`]) instead of every peer's box on
//! every pass: with 255 peers, a pass looked at 255 lines and a rank woken by each
//! peer's message of an alltoall looked at them 255 times. On smaller nodes the bit
//! would only add a shared line to a small message's way, so nobody sets it.
//!
//! Wake-ups: a rank about to sleep sets its flag; a peer that writes to it (or announces
//! a lane) and finds the flag set clears it and sends a datagram to the rank's bell, a
//! Unix datagram socket named after the job and rank in the abstract namespace, which is
//! in the rank's epoll set. A producer blocked on a full box or ring says so in the box;
//! the consumer that makes room rings its bell.
//!
//! A member's end: the leader keeps the Unix socket each member joined through, and each
//! member keeps its own; a socket closes with its process. Whoever sees its other end
//! close marks that rank gone in its slot, counts it in the header and rings every bell;
//! each rank looks at the count on every pass and closes its lane to a gone rank, after
//! reading what it left. A rank that finalized says so in its slot first, so its end is
//! no failure: no goodbye frame crosses the node. (A
//! pidfd per lane, watched with epoll, cost a first alltoall of 256 ranks a fifth of its
//! time; and a pidfd names the wrong process in another pid namespace.)
//!
//! A memfd lives in the kernel's internal shm mount, not in `/dev/shm`, so a container's
//! small `/dev/shm` (64 MiB by default) does not limit it; only the pages touched are
//! allocated (a ring's pages as frames reach them), charged to the memory cgroup like
//! any other memory of the rank.
//!
//! Peers share the counters, so everything read from the segment is checked: indices
//! are masked, a fill level beyond the ring's size is a protocol error, and the header
//! must match the layout the joining rank computed itself.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::stream::StreamLink;
use crate::Caps;

/// Identifies a pontoon node segment (and its layout version).
const MAGIC: u64 = u64::from_le_bytes(*b"PNTNSHM8");
/// Counters each on a line of their own: the producer's and the consumer's writes must
/// not invalidate each other's lines (128: adjacent-line prefetch pairs 64-byte lines).
const LINE: usize = 128;
const PAGE: usize = 4096;
/// A pair's ring counters: each ring's head (the consumer's) on a line of its own; the
/// tails are in the boxes.
const PAIR_COUNTERS: usize = 2 * LINE;
/// Boxes of one direction: a control line, then [`BOX_SLOTS`] boxes of a line each.
/// The control line holds the ring's tail (u64, the producer's), how many boxes the
/// consumer has emptied (u32) and "the producer waits for room" (u32). A box holds its
/// number in the direction's sequence plus one (u32; the consumer expects the next
/// number, so it never writes a box), its fill (u32), the ring position its bytes come
/// before (u64), then the bytes of one small frame (a MATCH header and up to 80 bytes of
/// message).
const BOX_SLOTS: usize = 4;
const BOX: usize = (1 + BOX_SLOTS) * LINE;
const CTL_TAIL: usize = 0;
const CTL_EMPTIED: usize = 8;
const CTL_WAITS: usize = 12;
const BOX_SEQ: usize = 0;
const BOX_FILL: usize = 4;
const BOX_AT: usize = 8;
const BOX_DATA: usize = 16;
pub const BOX_PAYLOAD: usize = LINE - BOX_DATA;
/// Smallest and largest ring the runtime may ask for (bytes, each a power of two).
pub const MIN_RING: usize = 16 << 10;
pub const MAX_RING: usize = 64 << 20;
/// Most ranks one node segment serves.
pub const MAX_RANKS: usize = 4096;
/// Nodes of this many ranks or more say which lanes were written (see the module's comment).
pub const SIGNAL_FROM: usize = 16;
/// Most staging of a shared-memory lane (it grows to this as reads fill it): small
/// frames are copied out in one piece; payloads of 16 KiB and more go from the ring
/// straight into receive buffers. A sixteenth of the ring, within these bounds.
const RX_STAGING: std::ops::RangeInclusive<usize> = (1 << 10)..=(64 << 10);

/// In a rank's slot: the "asleep, ring my bell" flag, its pid and its rank + 1 (0: the
/// slot is empty), each written by one process; the bitmap follows on lines of its own.
const SLOT_ASLEEP: usize = 0;
const SLOT_PID: usize = 8;
const SLOT_RANK: usize = 16;
/// In a rank's slot: its process has ended (u32; set once, by the leader or a member).
const SLOT_GONE: usize = 24;
/// In a rank's slot: it finalized (u32, set by itself): its end is no failure.
const SLOT_FINALIZED: usize = 28;
/// In a rank's slot: where its probe token lies in its memory (u64, set before its rank),
/// for the others' one-copy test ([`ShmNode::reads_from`]).
const SLOT_PROBE: usize = 32;
/// In the header: how many ranks of the node were marked gone (u64).
const HEADER_GONE: usize = 24;
/// In the header: whether the node's collective area serves the node's collectives
/// (u32; see `coll.rs`).
const HEADER_VERDICT: usize = 32;

pub type ShmLink<T> = StreamLink<ShmPipe, T>;

/// Starting capabilities of a shared-memory lane, until it is measured.
pub fn shm_caps() -> Caps {
    Caps {
        latency_ns: 300,
        bandwidth: 8_000_000_000,
        max_frame: 1 << 30,
        reliable: true,
        ordered: true,
        node_local: true,
        relayed: false,
        raw: false,
        datagram: 0,
        single_copy: false,
    }
}

/// A lane over a pipe.
pub fn shm_link<T>(pipe: ShmPipe, caps: Caps) -> ShmLink<T> {
    let staging = (pipe.ring_size() / 16).clamp(*RX_STAGING.start(), *RX_STAGING.end());
    StreamLink::new(pipe, caps, staging)
}

/// Where everything of a node segment lies, for `ranks` ranks and rings of `ring` bytes.
/// The leader computes it, and each joining rank computes it again and checks the header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    ranks: usize,
    ring: usize,
    /// Where the collective area's parts lie (`coll.rs`), computed once.
    coll: coll::CollPlaces,
}

impl Layout {
    /// `ring`: a power of two within [`MIN_RING`, `MAX_RING`]; `ranks`: 2 to [`MAX_RANKS`].
    pub fn new(ranks: usize, ring: usize) -> io::Result<Layout> {
        if !ring.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&ring) {
            return Err(io::Error::other(format!(
                "ring size {ring} is not a power of two in range"
            )));
        }
        if !(2..=MAX_RANKS).contains(&ranks) {
            return Err(io::Error::other(format!(
                "{ranks} ranks on one node: a segment serves 2 to {MAX_RANKS}"
            )));
        }
        let mut layout = Layout {
            ranks,
            ring,
            coll: coll::CollPlaces::default(),
        };
        layout.coll = coll::CollPlaces::of(&layout);
        Ok(layout)
    }

    pub fn ranks(&self) -> usize {
        self.ranks
    }

    pub fn ring(&self) -> usize {
        self.ring
    }

    fn words(&self) -> usize {
        self.ranks.div_ceil(64)
    }

    /// Whether producers set their bit in the consumer's bitmap of writers.
    pub fn signalled(&self) -> bool {
        self.ranks >= SIGNAL_FROM
    }

    fn bitmap_size(&self) -> usize {
        (self.words() * 8).next_multiple_of(LINE)
    }

    fn slot_size(&self) -> usize {
        LINE + 2 * self.bitmap_size()
    }

    fn slot(&self, index: usize) -> usize {
        PAGE + index * self.slot_size()
    }

    /// Where word `w` of rank `index`'s bitmap of announced peers lies.
    fn announce_word(&self, index: usize, w: usize) -> usize {
        self.slot(index) + LINE + 8 * w
    }

    /// Where word `w` of rank `index`'s bitmap of peers that wrote to it lies.
    fn written_word(&self, index: usize, w: usize) -> usize {
        self.slot(index) + LINE + self.bitmap_size() + 8 * w
    }

    fn boxes_at(&self) -> usize {
        (PAGE + self.ranks * self.slot_size()).next_multiple_of(PAGE)
    }

    fn boxes_bytes(&self) -> usize {
        (self.ranks * self.ranks * BOX).next_multiple_of(PAGE)
    }

    /// The boxes (and their control line) carrying `from`'s small frames to `to`: the
    /// boxes to one rank lie side by side, so a receiver polls a few pages of its own.
    fn box_at(&self, from: usize, to: usize) -> usize {
        self.boxes_at() + (to * self.ranks + from) * BOX
    }

    /// The pages holding the boxes to `to` (shared with neighbours' boxes on a small
    /// node), as a byte range.
    fn boxes_to(&self, to: usize) -> (usize, usize) {
        let from = self.box_at(0, to) / PAGE * PAGE;
        (
            from,
            (self.box_at(self.ranks - 1, to) + BOX).next_multiple_of(PAGE),
        )
    }

    fn pairs_at(&self) -> usize {
        self.coll_at() + self.coll_bytes()
    }

    /// A pair's counters, then its two rings (the first starts in the counters' page).
    fn pair_size(&self) -> usize {
        PAIR_COUNTERS + 2 * self.ring
    }

    /// The area of ranks `a` and `b` (either order, `a != b`): pairs are numbered in
    /// the order (0,1), (0,2), …, (1,2), …
    fn pair(&self, a: usize, b: usize) -> usize {
        let (lo, hi) = (a.min(b), a.max(b));
        let index = lo * (2 * self.ranks - lo - 1) / 2 + (hi - lo - 1);
        self.pairs_at() + index * self.pair_size()
    }

    /// Bytes of the whole segment (sparse: most of it is never touched).
    pub fn bytes(&self) -> usize {
        self.pairs_at() + self.ranks * (self.ranks - 1) / 2 * self.pair_size()
    }

    /// Offsets of the box and ring carrying `from`'s bytes to `to`: the lower rank of a
    /// pair sends on ring 0.
    fn way_at(&self, from: usize, to: usize) -> WayAt {
        let area = self.pair(from, to);
        let index = usize::from(from > to);
        WayAt {
            boxed: self.box_at(from, to),
            head: area + index * LINE,
            data: area + PAIR_COUNTERS + index * self.ring,
        }
    }
}

/// This rank's membership of its node's segment.
pub struct ShmNode {
    seg: Arc<Segment>,
    layout: Layout,
    /// This rank's index in the node (ranks of the node in ascending order).
    me: usize,
    job_id: [u8; 16],
    bell: Bell,
    /// An unbound datagram socket for ringing the peers' bells.
    ringer: Arc<OwnedFd>,
    /// The header's count of gone ranks when this rank last looked.
    gone_seen: AtomicU64,
    /// What a peer reading this rank's memory must find at the address in its slot.
    probe: Box<[u8; PROBE_LEN]>,
    /// Whether a read of a peer's memory worked (found its token), once tried.
    reads: std::sync::OnceLock<bool>,
}

const PROBE_LEN: usize = 32;

/// The probe token of the member in slot `index` of job `job_id`'s node: a read of the
/// wrong process (another pid namespace) or of nothing finds something else.
fn probe_token(job_id: &[u8; 16], index: usize) -> [u8; PROBE_LEN] {
    let mut t = [0u8; PROBE_LEN];
    t[..16].copy_from_slice(job_id);
    t[16..20].copy_from_slice(&(index as u32).to_le_bytes());
    t[20..].copy_from_slice(b"pontoon-cma\0");
    t
}

impl ShmNode {
    /// The leader makes the segment; it returns the fd to hand to the ranks that join.
    pub fn create(layout: Layout, me: usize, job_id: [u8; 16], bell: Bell) -> io::Result<(ShmNode, OwnedFd)> {
        let fd = rustix::fs::memfd_create(
            "pontoon-node",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        rustix::fs::ftruncate(&fd, layout.bytes() as u64)?;
        // The size is final: a rank that maps it cannot be surprised by a shrink (SIGBUS).
        let _ = rustix::fs::fcntl_add_seals(
            &fd,
            rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW | rustix::fs::SealFlags::SEAL,
        );
        let seg = Segment::map(&fd, layout.bytes())?;
        seg.u64_at(8).store(layout.ranks as u64, Ordering::Relaxed);
        seg.u64_at(16).store(layout.ring as u64, Ordering::Relaxed);
        seg.u64_at(0).store(MAGIC, Ordering::Release);
        let node = ShmNode::new(seg, layout, me, job_id, bell)?;
        node.allocate_own_boxes(&fd);
        Ok((node, fd))
    }

    /// A rank joins with the segment its leader sent, after checking that it is one
    /// and that its layout is the one this rank expects.
    pub fn join(fd: OwnedFd, layout: Layout, me: usize, job_id: [u8; 16], bell: Bell) -> io::Result<ShmNode> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        let size = rustix::fs::fstat(&fd)?.st_size as u64;
        if size < layout.bytes() as u64 {
            return Err(bad(format!(
                "shared-memory segment of {size} bytes, {} expected",
                layout.bytes()
            )));
        }
        let seals = rustix::fs::fcntl_get_seals(&fd)?;
        if !seals.contains(rustix::fs::SealFlags::SHRINK) {
            return Err(bad("shared-memory segment is not sealed against shrinking".into()));
        }
        let seg = Segment::map(&fd, layout.bytes())?;
        let (magic, ranks, ring) = (
            seg.u64_at(0).load(Ordering::Acquire),
            seg.u64_at(8).load(Ordering::Relaxed),
            seg.u64_at(16).load(Ordering::Relaxed),
        );
        if magic != MAGIC {
            return Err(bad(format!("not a pontoon node segment (magic {magic:#x})")));
        }
        if (ranks, ring) != (layout.ranks as u64, layout.ring as u64) {
            return Err(bad(format!(
                "the leader's segment is for {ranks} ranks with rings of {ring} bytes; this \
                 rank counts {} ranks on the node and rings of {} bytes",
                layout.ranks, layout.ring
            )));
        }
        let node = ShmNode::new(seg, layout, me, job_id, bell)?;
        node.allocate_own_boxes(&fd);
        Ok(node)
    }

    /// Allocates the pages of the boxes to this rank (see the module's comment); a
    /// failure only costs time later, when the writers touch them.
    fn allocate_own_boxes(&self, fd: &OwnedFd) {
        let (from, to) = self.layout.boxes_to(self.me);
        let _ = rustix::fs::fallocate(
            fd,
            rustix::fs::FallocateFlags::empty(),
            from as u64,
            (to - from) as u64,
        );
    }

    fn new(seg: Segment, layout: Layout, me: usize, job_id: [u8; 16], bell: Bell) -> io::Result<ShmNode> {
        let ringer = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::DGRAM,
            SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            None,
        )?;
        Ok(ShmNode {
            seg: Arc::new(seg),
            layout,
            me,
            job_id,
            bell,
            ringer: Arc::new(ringer),
            gone_seen: AtomicU64::new(0),
            probe: Box::new(probe_token(&job_id, me)),
            reads: std::sync::OnceLock::new(),
        })
    }

    pub fn layout(&self) -> Layout {
        self.layout
    }

    pub fn bell(&self) -> &Bell {
        &self.bell
    }

    /// The leader records the pid (as it sees it) of the rank in slot `index`, before
    /// it hands that rank the segment.
    pub fn admit(&self, index: usize, pid: u32) {
        let slot = self.layout.slot(index);
        self.seg
            .u64_at(slot + SLOT_PID)
            .store(u64::from(pid), Ordering::Release);
    }

    /// This rank, holding the segment, takes its slot: from now on the others may open
    /// lanes to it (and it may announce lanes to them). The rank that fills the last slot
    /// rings every member's bell, asleep or about to be: the leader waits at start-up
    /// until all have joined, members may wait for a peer's join, and nobody learns of a
    /// join otherwise (the leader looking each millisecond noticed the last 90 ms late
    /// at 256 ranks on a busy host). Of two ranks entering at once, at least one sees
    /// the other (the fence), so the ring comes. Returns whether the node is complete.
    pub fn enter(&self, rank: u32) -> bool {
        let slot = self.layout.slot(self.me);
        self.seg
            .u64_at(slot + SLOT_PROBE)
            .store(self.probe.as_ptr() as u64, Ordering::Relaxed);
        self.seg
            .u64_at(slot + SLOT_RANK)
            .store(u64::from(rank) + 1, Ordering::Release);
        fence(Ordering::SeqCst);
        let complete = (0..self.layout.ranks).all(|i| self.member(i).is_some());
        if complete {
            self.decide_collectives(true);
            let others = (0..self.layout.ranks).filter(|&i| i != self.me);
            for rank in others.filter_map(|i| self.member(i).map(|(rank, _)| rank)) {
                // Unasked: one about to sleep has not set its flag yet. A bell rung
                // needlessly costs its rank one early wake-up.
                if let Ok(bell) = self.bell_of(rank) {
                    ring(&self.ringer, &bell);
                }
            }
        }
        complete
    }

    /// The rank and pid in slot `index`, once its rank has joined.
    pub fn member(&self, index: usize) -> Option<(u32, u32)> {
        let slot = self.layout.slot(index);
        let rank = self.seg.u64_at(slot + SLOT_RANK).load(Ordering::Acquire);
        let pid = self.seg.u64_at(slot + SLOT_PID).load(Ordering::Relaxed);
        let rank = u32::try_from(rank.checked_sub(1)?).ok()?;
        Some((rank, u32::try_from(pid).ok()?))
    }

    /// Whether this rank can read the memory of the member in slot `peer` in one copy
    /// (`cma.rs`): its probe token, read at the address in its slot, is the token of its
    /// rank. Tried once, with the first peer asked about; a later read that fails
    /// falls back to the ring all the same.
    pub fn reads_from(&self, peer: usize) -> bool {
        *self.reads.get_or_init(|| {
            let Some((_, pid)) = self.member(peer) else {
                return false;
            };
            let at = self
                .seg
                .u64_at(self.layout.slot(peer) + SLOT_PROBE)
                .load(Ordering::Relaxed);
            let mut got = [0u8; PROBE_LEN];
            at != 0 && cma::read(pid, at, &mut got).is_ok() && got == probe_token(&self.job_id, peer)
        })
    }

    /// The lane to the member in slot `peer`: its boxes, rings and bell (`Err` once the
    /// peer is gone).
    pub fn pipe(&self, peer: usize) -> io::Result<ShmPipe> {
        if self.gone(peer) {
            return Err(io::Error::other(format!(
                "the process in slot {peer} of the node segment has ended"
            )));
        }
        let (rank, _) = self
            .member(peer)
            .ok_or_else(|| io::Error::other(format!("slot {peer} of the node segment is empty")))?;
        if peer == self.me || peer >= self.layout.ranks {
            return Err(io::Error::other(format!(
                "no lane from slot {} to slot {peer}",
                self.me
            )));
        }
        let side = |at: WayAt| Side {
            lines: pipe::Boxes::new(&self.seg, at.boxed),
            at,
            pos: 0,
            seen: 0,
            boxes: 0,
            boxes_seen: 0,
            boxed: 0,
            waiting: None,
        };
        let bit_of = |consumer: usize, producer: usize| {
            self.layout.signalled().then(|| {
                (
                    self.layout.written_word(consumer, producer / 64),
                    1u64 << (producer % 64),
                )
            })
        };
        Ok(ShmPipe {
            seg: self.seg.clone(),
            ring: self.layout.ring,
            tx: side(self.layout.way_at(self.me, peer)),
            rx: side(self.layout.way_at(peer, self.me)),
            emptied_untold: std::cell::Cell::new(false),
            peer_asleep: self.layout.slot(peer) + SLOT_ASLEEP,
            written: bit_of(peer, self.me),
            own_written: bit_of(self.me, peer),
            ringer: self.ringer.clone(),
            peer_bell: self.bell_of(rank)?,
        })
    }

    /// The address of `rank`'s bell. Named when needed, not kept by slot (28 KiB at
    /// 256 ranks): each lane keeps its peer's.
    fn bell_of(&self, rank: u32) -> io::Result<SocketAddrUnix> {
        Ok(SocketAddrUnix::new_abstract_name(&bell_name(&self.job_id, rank))?)
    }

    fn gone(&self, index: usize) -> bool {
        self.seg
            .u32_at(self.layout.slot(index) + SLOT_GONE)
            .load(Ordering::Acquire)
            != 0
    }

    /// This rank finalized: its end, when the others see it, is no failure (in place of
    /// a goodbye frame on every lane).
    pub fn mark_finalized(&self) {
        self.seg
            .u32_at(self.layout.slot(self.me) + SLOT_FINALIZED)
            .store(1, Ordering::Release);
    }

    /// Whether the member in slot `index` finalized.
    pub fn finalized(&self, index: usize) -> bool {
        index < self.layout.ranks
            && self
                .seg
                .u32_at(self.layout.slot(index) + SLOT_FINALIZED)
                .load(Ordering::Acquire)
                != 0
    }

    /// The process in slot `index` has ended (its join socket closed): marks it gone
    /// and rings every member, once. Returns whether this call marked it.
    pub fn mark_gone(&self, index: usize) -> bool {
        if index >= self.layout.ranks {
            return false;
        }
        let flag = self.seg.u32_at(self.layout.slot(index) + SLOT_GONE);
        if flag.swap(1, Ordering::AcqRel) != 0 {
            return false;
        }
        self.seg.u64_at(HEADER_GONE).fetch_add(1, Ordering::AcqRel);
        self.wake_all();
        true
    }

    /// The slots of the ranks gone since the count was last looked at (every gone
    /// slot then; the caller keeps what it has handled). One load when none are.
    pub fn take_gone(&self) -> Vec<usize> {
        let count = self.seg.u64_at(HEADER_GONE).load(Ordering::Acquire);
        // A load, not a swap: this runs on every progress pass, and a swap is a locked
        // instruction (a full fence on x86).
        if self.gone_seen.load(Ordering::Relaxed) == count {
            return Vec::new();
        }
        self.gone_seen.store(count, Ordering::Relaxed);
        (0..self.layout.ranks)
            .filter(|&i| i != self.me && self.gone(i))
            .collect()
    }

    /// Tells the member in slot `peer` that this rank opened a lane to it.
    pub fn announce(&self, peer: usize) -> io::Result<()> {
        let (rank, _) = self
            .member(peer)
            .ok_or_else(|| io::Error::other(format!("slot {peer} of the node segment is empty")))?;
        let word = self.layout.announce_word(peer, self.me / 64);
        self.seg
            .u64_at(word)
            .fetch_or(1 << (self.me % 64), Ordering::AcqRel);
        let bell = self.bell_of(rank)?;
        wake(
            &self.seg,
            self.layout.slot(peer) + SLOT_ASLEEP,
            &self.ringer,
            &bell,
        );
        Ok(())
    }

    /// The slots of the members that opened a lane to this rank since the last call
    /// (one load per 64 ranks when there are none).
    pub fn take_announced(&self) -> Vec<usize> {
        let mut out = Vec::new();
        self.take_bits(|w| self.layout.announce_word(self.me, w), &mut out);
        out
    }

    /// Appends to `out` the slots of the members that wrote to this rank since the last
    /// call (on a node whose layout is [`Layout::signalled`]; one load per 64 ranks when
    /// none did). A slot without a lane yet is one announced meanwhile: the lane, once
    /// opened, must be read once without waiting for a bit.
    pub fn take_written(&self, out: &mut Vec<usize>) {
        self.take_bits(|w| self.layout.written_word(self.me, w), out);
    }

    /// Takes (clears) the bits of one of this rank's bitmaps, word by word.
    fn take_bits(&self, word_at: impl Fn(usize) -> usize, out: &mut Vec<usize>) {
        for w in 0..self.layout.words() {
            let word = self.seg.u64_at(word_at(w));
            if word.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = word.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if w * 64 + bit < self.layout.ranks {
                    out.push(w * 64 + bit);
                }
            }
        }
    }

    /// Rings the bell of every member that sleeps.
    pub fn wake_all(&self) {
        fence(Ordering::SeqCst);
        self.wake_sleepers();
    }

    /// [`ShmNode::wake_all`] without the fence: a rank about to sleep may be missed if it
    /// says so just as this rank's last write is on its way (the collective area's
    /// waiters allow for that, see `coll.rs`). Looks at the flags first: naming a
    /// bell costs more than looking at every member's flag of a small node, and this
    /// runs after every post to the collective area.
    pub fn wake_sleepers(&self) {
        for index in (0..self.layout.ranks).filter(|&i| i != self.me) {
            if !take_sleeper(&self.seg, self.layout.slot(index) + SLOT_ASLEEP) {
                continue;
            }
            if let Some(bell) = self.member(index).and_then(|(rank, _)| self.bell_of(rank).ok()) {
                ring(&self.ringer, &bell);
            }
        }
    }

    /// Before this rank sleeps: announcements, frames and gone ranks from now on ring its
    /// bell. `false` when one waits already (do not sleep): an announcement, a gone rank,
    /// or on a signalled node a write. (On other nodes each lane then looks for a waiting
    /// frame: [`ShmPipe`]'s `arm_wakeup`.)
    pub fn arm(&self) -> bool {
        let flag = self.seg.u32_at(self.layout.slot(self.me) + SLOT_ASLEEP);
        flag.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let set = |at: usize| self.seg.u64_at(at).load(Ordering::SeqCst) != 0;
        let written = |w| self.layout.signalled() && set(self.layout.written_word(self.me, w));
        let announced = (0..self.layout.words())
            .any(|w| set(self.layout.announce_word(self.me, w)) || written(w))
            || self.seg.u64_at(HEADER_GONE).load(Ordering::SeqCst) != self.gone_seen.load(Ordering::Relaxed);
        if announced {
            flag.store(0, Ordering::Relaxed);
        }
        !announced
    }

    /// This rank is awake: peers need not ring its bell.
    pub fn disarm(&self) {
        self.seg
            .u32_at(self.layout.slot(self.me) + SLOT_ASLEEP)
            .store(0, Ordering::Relaxed);
    }
}

pub mod cma;
mod coll;
pub use coll::{COLL_COUNT_FROM, COLL_DATA, COLL_PHASES, COLL_SMALL};
mod segment;
use segment::{ring, take_sleeper, wake, Segment};
mod unix;
pub use unix::{bell_name, connect, listen, peer_pid, recv_with_fd, send_with_fd, socket_name, Bell};

mod pipe;
pub use pipe::ShmPipe;
use pipe::{Side, WayAt};

#[cfg(test)]
mod tests;
