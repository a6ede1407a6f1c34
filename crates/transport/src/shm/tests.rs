//! Unit tests of the node segment: the layout, boxes and rings, wake-ups and gone ranks.

use super::pipe::box_slot;
use super::unix::job_hex;
use super::*;
use crate::stream::Pipe;
use crate::{Buffer, Link, LinkError, Placement, Sink};
use proto::wire::data::{DataRepr, HeaderBytes};
use std::io::IoSlice;
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicU8;

/// A job id of its own for each node made here (bells are named after it).
fn job_id() -> [u8; 16] {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&std::process::id().to_le_bytes());
    id[4] = NEXT.fetch_add(1, Ordering::Relaxed);
    id[5..9].copy_from_slice(b"test");
    id
}

fn me() -> u32 {
    std::process::id()
}

/// Two members of one node (both in this process), registered by the leader.
fn node_of_two(ring: usize) -> (ShmNode, ShmNode) {
    let job = job_id();
    let layout = Layout::new(2, ring).unwrap();
    let bell = |r| Bell::bind(&bell_name(&job, r)).unwrap();
    let (leader, fd) = ShmNode::create(layout, 0, job, bell(10)).unwrap();
    let other = ShmNode::join(fd, layout, 1, job, bell(11)).unwrap();
    leader.admit(0, me());
    leader.admit(1, me());
    assert!(!leader.enter(10));
    assert!(other.enter(11), "the last to enter completes the node");
    // Entering last rang everyone (see `ShmNode::enter`): taken, as a rank would.
    assert!(readable(leader.bell().fd(), 1000));
    leader.bell().drain();
    (leader, other)
}

/// Three ranks mapping one segment, none entered yet.
fn node_of_three() -> [ShmNode; 3] {
    let job = job_id();
    let layout = Layout::new(3, MIN_RING).unwrap();
    let bell = |r| Bell::bind(&bell_name(&job, r)).unwrap();
    let (a, fd) = ShmNode::create(layout, 0, job, bell(0)).unwrap();
    let dup = || rustix::io::fcntl_dupfd_cloexec(&fd, 0).unwrap();
    let b = ShmNode::join(dup(), layout, 1, job, bell(1)).unwrap();
    let c = ShmNode::join(dup(), layout, 2, job, bell(2)).unwrap();
    [a, b, c]
}

fn pair(ring: usize) -> (ShmPipe, ShmPipe) {
    let (a, b) = node_of_two(ring);
    (a.pipe(1).unwrap(), b.pipe(0).unwrap())
}

fn readable(fd: BorrowedFd<'_>, wait_ms: i64) -> bool {
    let mut fds = [rustix::event::PollFd::new(&fd, rustix::event::PollFlags::IN)];
    let ts = rustix::time::Timespec {
        tv_sec: wait_ms / 1000,
        tv_nsec: (wait_ms % 1000) * 1_000_000,
    };
    rustix::event::poll(&mut fds, Some(&ts)).unwrap() == 1
}

/// Collects every frame's header and payload.
#[derive(Default)]
struct Collect(Vec<(DataRepr, Vec<u8>)>);
impl Sink for Collect {
    type Token = DataRepr;
    fn on_header(&mut self, repr: &DataRepr) -> Result<(Placement, DataRepr), String> {
        Ok((Placement::Engine(vec![0; repr.payload_len() as usize]), *repr))
    }
    fn on_payload(&mut self, token: DataRepr, buf: Option<Vec<u8>>) -> Result<(), String> {
        self.0.push((token, buf.unwrap_or_default()));
        Ok(())
    }
}

#[test]
fn every_pair_has_its_own_area_inside_the_segment() {
    for ranks in [2, 3, 7, 64, 65, 130] {
        let l = Layout::new(ranks, MIN_RING).unwrap();
        let mut areas = Vec::new();
        let mut boxes = Vec::new();
        for a in 0..ranks {
            assert!(l.announce_word(a, l.words() - 1) + 8 <= l.slot(a) + l.slot_size());
            for b in a + 1..ranks {
                assert_eq!(l.pair(a, b), l.pair(b, a));
                let (up, down) = (l.way_at(a, b), l.way_at(b, a));
                assert!(up.head + 8 <= down.head && down.head + 8 <= up.data);
                assert!(up.data + MIN_RING <= down.data);
                assert!(down.data + MIN_RING <= l.pair(a, b) + l.pair_size());
                areas.push(l.pair(a, b));
                boxes.extend([up.boxed, down.boxed]);
            }
        }
        boxes.sort();
        assert!(boxes[0] >= l.slot(ranks - 1) + l.slot_size(), "after the slots");
        assert!(boxes.windows(2).all(|w| w[1] - w[0] >= BOX), "disjoint boxes");
        assert!(boxes.iter().all(|b| b % LINE == 0), "a box is a line of its own");
        areas.sort();
        assert!(areas[0] >= boxes.last().unwrap() + BOX, "after the boxes");
        assert!(areas.windows(2).all(|w| w[1] - w[0] == l.pair_size()), "disjoint");
        assert_eq!(areas.last().unwrap() + l.pair_size(), l.bytes());
    }
    assert!(Layout::new(1, MIN_RING).is_err());
    assert!(Layout::new(4, MIN_RING + 1).is_err());
}

#[test]
fn bytes_wrap_around_the_ring_in_order() {
    let (mut a, mut b) = pair(MIN_RING);
    let mut next = 0u8;
    let mut expect = 0u8;
    let mut out = vec![0u8; 5000];
    for round in 0..200 {
        let chunk: Vec<u8> = (0..(round * 37 % 9000 + 1))
            .map(|_| {
                next = next.wrapping_add(1);
                next
            })
            .collect();
        let mut sent = 0;
        while sent < chunk.len() {
            sent += a.write(&[IoSlice::new(&chunk[sent..])]).unwrap();
            while let Some(n) = b.read(&mut out).unwrap() {
                for &byte in &out[..n] {
                    expect = expect.wrapping_add(1);
                    assert_eq!(byte, expect);
                }
            }
        }
    }
    assert_eq!(expect, next);
}

#[test]
fn small_writes_fill_the_boxes_in_turn_and_the_consumer_never_writes_one() {
    let (mut a, mut b) = pair(MIN_RING);
    let frame = |i: u8| [i; 8];
    for i in 0..BOX_SLOTS as u8 {
        assert_eq!(a.write(&[IoSlice::new(&frame(i))]).unwrap(), 8);
    }
    assert_eq!(a.tx.pos, 0, "every box taken before the ring");
    assert_eq!(a.write(&[IoSlice::new(&frame(9))]).unwrap(), 8);
    assert_eq!(a.tx.pos, 8, "boxes full: the ring");
    let mut out = [0u8; 8];
    for i in 0..BOX_SLOTS as u8 {
        assert_eq!(b.read(&mut out).unwrap(), Some(8));
        assert_eq!(out, frame(i));
    }
    assert_eq!(b.read(&mut out).unwrap(), Some(8));
    assert_eq!(out, frame(9));
    assert_eq!(b.read(&mut out).unwrap(), None);
    // The consumer counted its boxes on its line; the boxes themselves are as the
    // producer left them (stamped 1..=BOX_SLOTS), so the producer's lines stay its own.
    for n in 0..BOX_SLOTS as u32 {
        let slot = box_slot(a.tx.at.boxed, n);
        assert_eq!(a.seg.u32_at(slot + BOX_SEQ).load(Ordering::Relaxed), n + 1);
    }
    // The producer reads that count only once it has filled every box since its last look.
    for i in 0..BOX_SLOTS as u8 - 1 {
        assert_eq!(a.write(&[IoSlice::new(&frame(i))]).unwrap(), 8);
        assert_eq!(
            a.tx.boxes_seen, BOX_SLOTS as u32,
            "read once, when the boxes were full"
        );
    }
    assert_eq!(a.tx.pos, 8, "in boxes again");
}

#[test]
fn a_box_is_read_in_place_only_when_no_ring_bytes_come_before_it() {
    let (mut a, mut b) = pair(MIN_RING);
    assert!(b.quiet() && b.peek_in_place().is_none(), "nothing sent");
    a.write(&[IoSlice::new(b"head"), IoSlice::new(b"er+8")]).unwrap();
    assert!(!b.quiet());
    let (at, len) = b.peek_in_place().expect("a box");
    assert_eq!(
        b.in_place(at, len),
        b"header+8",
        "the box's bytes, where they lie"
    );
    b.take_in_place();
    let told = |b: &ShmPipe| b.seg.u32_at(b.rx.at.boxed + CTL_EMPTIED).load(Ordering::Relaxed);
    assert_eq!(
        told(&b),
        0,
        "told at the next look, not between arrival and reply"
    );
    assert!(b.quiet() && b.peek_in_place().is_none(), "taken");
    assert_eq!(told(&b), 1, "the next look told the producer");
    // Bytes in the ring, then a box: the box waits for them.
    let long = [7u8; BOX_PAYLOAD + 1];
    a.write(&[IoSlice::new(&long)]).unwrap();
    a.write(&[IoSlice::new(b"after")]).unwrap();
    assert!(!b.quiet());
    assert_eq!(b.peek_in_place(), None, "ring bytes come first");
    let mut out = [0u8; BOX_PAYLOAD + 1];
    assert_eq!(b.read(&mut out).unwrap(), Some(long.len()));
    let (at, len) = b.peek_in_place().expect("the box after the ring bytes");
    assert_eq!(b.in_place(at, len), b"after");
    b.take_in_place();
    assert!(b.quiet());
}

#[test]
fn a_small_frame_is_taken_from_its_box_and_the_stream_stays_in_order() {
    let (a, b) = pair(MIN_RING);
    let mut tx: ShmLink<DataRepr> = shm_link(a, shm_caps());
    let mut rx: ShmLink<DataRepr> = shm_link(b, shm_caps());
    let matching = |seq, len| {
        HeaderBytes::new(&DataRepr::Match {
            env: proto::wire::data::Envelope {
                ctx: 1,
                src: 0,
                tag: 5,
                seq,
                msg_len: len,
            },
        })
    };
    let big = vec![3u8; 2 * BOX_PAYLOAD];
    tx.send_copy(&matching(0, 8), b"12345678").unwrap();
    tx.send_copy(&matching(1, big.len() as u64), &big).unwrap();
    tx.send_copy(&matching(2, 3), b"xyz").unwrap();
    let Ok(crate::Peeked::Frame { repr, payload, total }) = rx.peek_small() else {
        panic!("the first frame, whole");
    };
    assert_eq!((payload, total), (&b"12345678"[..], 40));
    assert!(matches!(repr, DataRepr::Match { env } if env.seq == 0));
    assert!(!rx.take_peeked(total), "nothing staged with it");
    let Ok(crate::Peeked::Frame { payload, total, .. }) = rx.peek_small() else {
        panic!("the second frame, from the ring");
    };
    assert_eq!(payload, &big[..]);
    assert!(rx.take_peeked(total), "the third frame was read with it");
    let mut sink = Collect::default();
    rx.recv(&mut sink).unwrap();
    assert_eq!(sink.0.len(), 1);
    assert_eq!(sink.0[0].1, b"xyz");
    assert!(rx.quiet());
}

#[test]
fn box_and_ring_keep_the_stream_in_order_whatever_the_sizes() {
    let (mut a, mut b) = pair(MIN_RING);
    // A fixed pseudo-random mix: writes small enough for the box and too big for it,
    // reads of a few bytes (a box read in parts) and of many.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |max: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % max as u64) as usize + 1
    };
    let (mut sent, mut got) = (0u64, 0u64);
    let mut boxed = 0;
    for _ in 0..20_000 {
        if next(2) == 1 {
            let len = if next(8) == 1 {
                next(3000)
            } else {
                next(BOX_PAYLOAD + 20)
            };
            let chunk: Vec<u8> = (0..len as u64).map(|i| (sent + i) as u8).collect();
            let (half1, half2) = chunk.split_at(len / 2);
            let ring_before = a.tx.pos;
            let n = a.write(&[IoSlice::new(half1), IoSlice::new(half2)]).unwrap();
            boxed += usize::from(n > 0 && a.tx.pos == ring_before);
            sent += n as u64;
        } else {
            let mut out = vec![0u8; next(1000)];
            if let Some(n) = b.read(&mut out).unwrap() {
                for &byte in &out[..n] {
                    assert_eq!(byte, got as u8, "byte {got} of the stream");
                    got += 1;
                }
            }
        }
    }
    let mut out = [0u8; 4096];
    while let Some(n) = b.read(&mut out).unwrap() {
        got += n as u64;
    }
    assert_eq!(got, sent);
    assert!(
        boxed > 10 && a.tx.pos > 0,
        "both the box ({boxed} writes) and the ring ({} bytes) were used",
        a.tx.pos
    );
}

#[test]
fn a_producer_and_a_consumer_running_at_once_keep_the_stream_in_order() {
    let (mut a, mut b) = pair(MIN_RING);
    const TOTAL: u64 = 8 << 20;
    let producer = std::thread::spawn(move || {
        let (mut sent, mut size) = (0u64, 1u64);
        while sent < TOTAL {
            // Sizes cycle through the box's and the ring's.
            size = ((size * 7 + 3) % 700 + 1).min(TOTAL - sent);
            let chunk: Vec<u8> = (sent..sent + size).map(|i| (i % 251) as u8).collect();
            let mut done = 0;
            while done < chunk.len() {
                done += a.write(&[IoSlice::new(&chunk[done..])]).unwrap();
            }
            sent += size;
        }
    });
    let (mut got, mut size) = (0u64, 1usize);
    let mut out = [0u8; 333];
    while got < TOTAL {
        size = size % 333 + 1;
        let finished = producer.is_finished();
        match b.read(&mut out[..size]).unwrap() {
            Some(n) => {
                for &byte in &out[..n] {
                    assert_eq!(byte, (got % 251) as u8, "byte {got} of the stream");
                    got += 1;
                }
            }
            None if finished => break, // the producer is done (or failed) and all is read
            None => std::hint::spin_loop(),
        }
    }
    producer.join().unwrap();
    assert_eq!(got, TOTAL);
}

#[test]
fn a_producer_blocked_on_a_full_box_and_ring_is_rung_when_room_is_made() {
    let (na, nb) = node_of_two(MIN_RING);
    let (mut a, mut b) = (na.pipe(1).unwrap(), nb.pipe(0).unwrap());
    assert_eq!(a.write(&[IoSlice::new(b"small")]).unwrap(), 5, "into a box");
    for _ in 1..BOX_SLOTS {
        assert_eq!(a.write(&[IoSlice::new(b"-")]).unwrap(), 1, "into the next box");
    }
    let big = vec![1u8; MIN_RING];
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), MIN_RING, "into the ring");
    assert_eq!(
        a.write(&[IoSlice::new(b"x")]).unwrap(),
        0,
        "boxes and ring are full"
    );
    assert!(na.arm() && a.arm_wakeup(), "no room yet: the producer may sleep");
    let mut out = [0u8; 3];
    assert_eq!(b.read(&mut out).unwrap(), Some(3), "the first box first, in part");
    assert_eq!(&out, b"sma");
    assert!(!readable(na.bell().fd(), 0), "the box is not empty yet");
    assert_eq!(b.read(&mut out[..2]).unwrap(), Some(2));
    assert!(
        readable(na.bell().fd(), 1000),
        "emptying the box rang the producer"
    );
    na.bell().drain();
    for _ in 1..BOX_SLOTS {
        assert_eq!(b.read(&mut out).unwrap(), Some(1));
        assert_eq!(out[0], b'-');
    }
    for _ in 0..BOX_SLOTS {
        assert_eq!(a.write(&[IoSlice::new(b"x")]).unwrap(), 1, "into the boxes again");
    }
    assert_eq!(a.write(&[IoSlice::new(b"y")]).unwrap(), 0);
    assert!(na.arm() && a.arm_wakeup());
    let mut out = [0u8; 100];
    assert_eq!(b.read(&mut out).unwrap(), Some(100), "the ring, before the box");
    assert_eq!(out, [1u8; 100]);
    assert!(
        readable(na.bell().fd(), 1000),
        "moving the head rang the producer"
    );
    na.bell().drain();
    // Room made before the producer arms: it does not sleep.
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), 100);
    assert_eq!(a.write(&[IoSlice::new(b"y")]).unwrap(), 0);
    assert_eq!(b.read(&mut out).unwrap(), Some(100));
    assert!(na.arm());
    assert!(!a.arm_wakeup(), "room waits: no sleep");
    na.disarm();
}

/// A box taken in place is told to the producer at the consumer's next look at the
/// lane, or before it sleeps: a producer waiting for room is rung then.
#[test]
fn a_producer_waiting_on_a_box_taken_in_place_is_rung_at_the_next_look_or_sleep() {
    let (na, nb) = node_of_two(MIN_RING);
    let (mut a, mut b) = (na.pipe(1).unwrap(), nb.pipe(0).unwrap());
    for _ in 0..BOX_SLOTS {
        assert_eq!(a.write(&[IoSlice::new(b"-")]).unwrap(), 1, "into a box");
    }
    let big = vec![1u8; MIN_RING];
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), MIN_RING, "into the ring");
    // Each look tells the box taken before it: all but the last are told.
    for _ in 0..BOX_SLOTS {
        b.peek_in_place().expect("a box, before the ring's bytes");
        b.take_in_place();
    }
    for _ in 1..BOX_SLOTS {
        assert_eq!(
            a.write(&[IoSlice::new(b"x")]).unwrap(),
            1,
            "into a box told empty"
        );
    }
    assert_eq!(
        a.write(&[IoSlice::new(b"x")]).unwrap(),
        0,
        "the last box taken is not told yet, and the ring is full"
    );
    assert!(na.arm() && a.arm_wakeup(), "no room yet: the producer may sleep");
    assert!(
        nb.arm() && !b.arm_wakeup(),
        "the ring's bytes wait: the consumer stays up"
    );
    nb.disarm();
    assert!(
        readable(na.bell().fd(), 1000),
        "the consumer's look told the boxes and rang the producer"
    );
    na.disarm();
    assert_eq!(
        a.write(&[IoSlice::new(b"x")]).unwrap(),
        1,
        "into a box told empty"
    );
}

/// The members in slots 0, 1 and 17 of a node of [`SIGNAL_FROM`] + 2 ranks, whose
/// producers say which lanes they wrote.
fn signalled_node() -> [ShmNode; 3] {
    let job = job_id();
    let layout = Layout::new(SIGNAL_FROM + 2, MIN_RING).unwrap();
    assert!(layout.signalled() && !Layout::new(SIGNAL_FROM - 1, MIN_RING).unwrap().signalled());
    let bell = |r| Bell::bind(&bell_name(&job, r)).unwrap();
    let (leader, fd) = ShmNode::create(layout, 0, job, bell(20)).unwrap();
    let join = |slot: usize| {
        let fd = rustix::io::dup(&fd).unwrap();
        ShmNode::join(fd, layout, slot, job, bell(20 + slot as u32)).unwrap()
    };
    let nodes = [leader, join(1), join(17)];
    for (node, slot) in nodes.iter().zip([0, 1, 17]) {
        nodes[0].admit(slot, me());
        node.enter(20 + slot as u32);
    }
    nodes
}

fn written(node: &ShmNode) -> Vec<usize> {
    let mut out = Vec::new();
    node.take_written(&mut out);
    out
}

#[test]
fn on_a_signalled_node_a_write_sets_the_writers_bit_and_keeps_a_sleeper_awake() {
    let [n0, n1, n17] = signalled_node();
    let (mut to0_from1, mut to0_from17) = (n1.pipe(0).unwrap(), n17.pipe(0).unwrap());
    let mut from1 = n0.pipe(1).unwrap();
    assert!(to0_from1.signalled() && from1.signalled());
    assert!(written(&n0).is_empty(), "nobody wrote yet");
    assert!(n0.arm(), "nothing waits");
    to0_from17.write(&[IoSlice::new(b"late")]).unwrap();
    assert!(readable(n0.bell().fd(), 1000), "a write rings the sleeper");
    n0.bell().drain();
    to0_from1.write(&[IoSlice::new(b"early")]).unwrap();
    assert!(!n0.arm(), "a written bit waits: no sleep");
    assert_eq!(written(&n0), [1, 17], "each writer once, in slot order");
    assert!(written(&n0).is_empty(), "taken once");
    assert!(
        written(&n1).is_empty() && written(&n17).is_empty(),
        "only the consumer's bits"
    );
    let mut out = [0u8; 8];
    assert_eq!(from1.read(&mut out).unwrap(), Some(5));
    assert!(n0.arm(), "read and taken: the rank may sleep");
    n0.disarm();
}

#[test]
fn on_a_signalled_node_bytes_left_queued_bring_the_producer_back_to_its_lane() {
    let [n0, n1, _n17] = signalled_node();
    let (mut a, mut b) = (n1.pipe(0).unwrap(), n0.pipe(1).unwrap());
    let big = vec![5u8; MIN_RING + 100];
    assert_eq!(
        a.write(&[IoSlice::new(&big)]).unwrap(),
        MIN_RING,
        "the ring takes what fits"
    );
    assert_eq!(written(&n1), [0], "the rest waits: the producer looks again");
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), 0, "full");
    assert!(
        written(&n1).is_empty(),
        "nothing went: the consumer will say when room is made"
    );
    let mut out = vec![0u8; 100];
    assert_eq!(b.read(&mut out).unwrap(), Some(100));
    assert_eq!(written(&n1), [0], "room made for a waiting producer sets its bit");
    assert_eq!(written(&n0), [1]);
}

#[test]
fn the_two_directions_of_a_pair_do_not_mix() {
    let (mut a, mut b) = pair(MIN_RING);
    a.write(&[IoSlice::new(b"from a")]).unwrap();
    b.write(&[IoSlice::new(b"from b")]).unwrap();
    let mut out = [0u8; 16];
    let n = b.read(&mut out).unwrap().unwrap();
    assert_eq!(&out[..n], b"from a");
    let n = a.read(&mut out).unwrap().unwrap();
    assert_eq!(&out[..n], b"from b");
}

#[test]
fn a_full_ring_takes_what_fits_and_nothing_more() {
    let (mut a, mut b) = pair(MIN_RING);
    let big = vec![3u8; MIN_RING + 100];
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), MIN_RING);
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), 0);
    let mut out = vec![0u8; 100];
    assert_eq!(b.read(&mut out).unwrap(), Some(100));
    assert_eq!(a.write(&[IoSlice::new(&big)]).unwrap(), 100);
}

#[test]
fn a_sleeping_rank_is_woken_by_a_frame_or_an_announcement() {
    let (na, nb) = node_of_two(MIN_RING);
    let (mut a, mut b) = (na.pipe(1).unwrap(), nb.pipe(0).unwrap());
    assert!(nb.arm() && b.arm_wakeup(), "nothing waits yet");
    a.write(&[IoSlice::new(b"x")]).unwrap();
    assert!(readable(nb.bell().fd(), 1000), "the bell rang");
    nb.bell().drain();
    assert!(!readable(nb.bell().fd(), 0), "drained");
    // Armed with data already there: no sleep.
    assert!(!b.arm_wakeup());
    // Not armed: a write rings nothing.
    a.write(&[IoSlice::new(b"y")]).unwrap();
    assert!(!readable(nb.bell().fd(), 0));
    // An announcement rings a sleeping rank, and one waiting keeps it awake.
    let mut out = [0u8; 8];
    while b.read(&mut out).unwrap().is_some() {}
    assert!(nb.arm());
    na.announce(1).unwrap();
    assert!(readable(nb.bell().fd(), 1000));
    assert!(!nb.arm(), "an announcement waits");
    assert_eq!(nb.take_announced(), [0]);
    assert!(nb.take_announced().is_empty(), "taken once");
    assert!(na.take_announced().is_empty());
    nb.disarm();
    na.announce(1).unwrap();
    nb.bell().drain();
    assert_eq!(nb.take_announced(), [0]);
}

#[test]
fn a_rank_marked_gone_is_seen_once_by_every_member_and_wakes_a_sleeping_one() {
    let [a, b, c] = node_of_three();
    for (i, n) in [&a, &b, &c].into_iter().enumerate() {
        a.admit(i, me());
        n.enter(i as u32);
    }
    assert!(c.pipe(1).is_ok());
    assert!(a.take_gone().is_empty() && c.take_gone().is_empty());
    assert!(c.arm(), "nothing gone yet: c may sleep");
    assert!(a.mark_gone(1), "the leader saw slot 1's join socket close");
    assert!(!a.mark_gone(1), "marked once");
    assert!(readable(c.bell().fd(), 1000), "the sleeping member was rung");
    c.bell().drain();
    assert!(!c.arm(), "a death not yet taken keeps a rank awake");
    c.disarm();
    assert_eq!(c.take_gone(), [1]);
    assert!(c.take_gone().is_empty(), "taken once");
    assert!(c.arm(), "taken: it may sleep");
    c.disarm();
    assert_eq!(a.take_gone(), [1], "the marker sees it as well");
    assert!(c.pipe(1).is_err(), "no lane to a gone rank");
    // A member marks the leader when its own join socket closes.
    assert!(c.mark_gone(0));
    assert_eq!(c.take_gone(), [0, 1]);
    assert!(!a.mark_gone(7), "no such slot");
}

#[test]
fn an_empty_slot_has_no_lane() {
    let job = job_id();
    let layout = Layout::new(3, MIN_RING).unwrap();
    let (node, _fd) = ShmNode::create(layout, 0, job, Bell::bind(&bell_name(&job, 0)).unwrap()).unwrap();
    node.admit(0, me());
    node.enter(0);
    node.admit(2, me());
    assert!(node.member(2).is_none(), "admitted, but not entered yet");
    assert!(node.pipe(2).is_err());
    assert!(node.announce(2).is_err());
    assert!(node.pipe(0).is_err(), "no lane to itself");
}

#[test]
fn a_corrupted_counter_is_a_protocol_error_not_a_wild_read() {
    let (a, mut b) = pair(MIN_RING);
    // The peer claims more bytes than the ring holds.
    a.seg
        .u64_at(a.tx.at.boxed + CTL_TAIL)
        .store(u64::MAX / 2, Ordering::Release);
    let mut out = [0u8; 64];
    assert!(matches!(b.read(&mut out), Err(LinkError::Protocol(_))));
    // Or a box fuller than a box, or empty, or placed before what was read.
    for (fill, at) in [(BOX_PAYLOAD as u32 + 1, 0), (0, 0), (1, u64::MAX)] {
        let (a, mut b) = pair(MIN_RING);
        let slot = box_slot(a.tx.at.boxed, 0);
        a.seg.u64_at(slot + BOX_AT).store(at, Ordering::Relaxed);
        a.seg.u32_at(slot + BOX_FILL).store(fill, Ordering::Relaxed);
        a.seg.u32_at(slot + BOX_SEQ).store(1, Ordering::Release);
        assert!(matches!(b.read(&mut out), Err(LinkError::Protocol(_))));
    }
}

#[test]
fn a_segment_that_is_not_ours_or_not_as_expected_is_refused() {
    let job = job_id();
    let bell = |r| Bell::bind(&bell_name(&job, r)).unwrap();
    let layout = Layout::new(2, MIN_RING).unwrap();
    let fd = rustix::fs::memfd_create("other", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&fd, 1 << 20).unwrap();
    rustix::fs::fcntl_add_seals(&fd, rustix::fs::SealFlags::SHRINK).unwrap();
    let err = ShmNode::join(fd, layout, 1, job, bell(1)).err().expect("refused");
    assert!(err.to_string().contains("not a pontoon"), "{err}");
    // The leader counted 3 ranks; this rank counts 2.
    let (_, fd) = ShmNode::create(Layout::new(3, MIN_RING).unwrap(), 0, job, bell(2)).unwrap();
    let err = ShmNode::join(fd, layout, 1, job, bell(3)).err().expect("refused");
    assert!(err.to_string().contains("for 3 ranks"), "{err}");
}

#[test]
fn frames_large_and_small_cross_a_shared_memory_lane() {
    let (a, b) = pair(MIN_RING);
    let mut tx: ShmLink<DataRepr> = shm_link(a, shm_caps());
    let mut rx: ShmLink<DataRepr> = shm_link(b, shm_caps());
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7) as u8).collect();
    let big_buf = Buffer::owned(big.clone());
    let h_big = HeaderBytes::new(&DataRepr::Frag {
        recv_id: 1,
        offset: 0,
        len: 1 << 20,
    });
    let h_small = HeaderBytes::new(&DataRepr::Frag {
        recv_id: 2,
        offset: 0,
        len: 3,
    });
    tx.send(&h_big, Some((&big_buf, 0, 1 << 20)), 9).unwrap();
    tx.send_copy(&h_small, b"abc").unwrap();
    let mut sink = Collect::default();
    let mut done = Vec::new();
    while sink.0.len() < 2 {
        tx.flush(&mut done).unwrap();
        rx.recv(&mut sink).unwrap();
    }
    assert_eq!(
        done,
        vec![9, 0],
        "the big frame's token, then the copied one's (0)"
    );
    assert_eq!(sink.0[0].1, big);
    assert_eq!(sink.0[1].1, b"abc");
}

#[test]
fn names_carry_the_job_id_in_hex() {
    let mut id = [0u8; 16];
    id[0] = 0x0f;
    id[1] = 0xa0;
    id[15] = 0xff;
    let hex = format!("0fa0{}ff", "00".repeat(13));
    assert_eq!(job_hex(&id), hex);
    assert_eq!(bell_name(&id, 7), format!("pontoon-{hex}-7-bell").into_bytes());
    assert_eq!(socket_name(&id, 12), format!("pontoon-{hex}-12").into_bytes());
}

#[test]
fn a_rank_that_finalized_says_so_in_its_slot() {
    let (na, nb) = node_of_two(MIN_RING);
    assert!(!nb.finalized(0) && !na.finalized(1));
    na.mark_finalized();
    assert!(nb.finalized(0) && na.finalized(0), "seen by every member");
    assert!(!nb.finalized(1), "only the rank that did");
    assert!(!nb.finalized(2), "no such slot");
}

#[test]
fn each_rank_allocates_the_boxes_to_it_and_the_leader_not_all_of_them() {
    let job = job_id();
    let ranks = 256;
    let layout = Layout::new(ranks, MIN_RING).unwrap();
    let bell = |r| Bell::bind(&bell_name(&job, r)).unwrap();
    let allocated = |fd: &OwnedFd| rustix::fs::fstat(fd).unwrap().st_blocks as usize * 512;
    let own_boxes = ranks * BOX;
    let (_leader, fd) = ShmNode::create(layout, 0, job, bell(0)).unwrap();
    let by_leader = allocated(&fd);
    assert!(
        by_leader >= own_boxes && by_leader < 4 * own_boxes,
        "the leader allocated {by_leader} bytes, its own boxes are {own_boxes}: \
         the {} bytes of every rank's boxes are each rank's to allocate",
        ranks * own_boxes
    );
    let dup = rustix::io::fcntl_dupfd_cloexec(&fd, 0).unwrap();
    let _member = ShmNode::join(dup, layout, 200, job, bell(200)).unwrap();
    assert_eq!(
        allocated(&fd) - by_leader,
        own_boxes,
        "a joining rank allocates the boxes to it"
    );
}

#[test]
fn the_rank_that_completes_the_node_rings_every_member_asleep_or_not() {
    let [a, b, c] = node_of_three();
    a.admit(0, me());
    assert!(!a.enter(0));
    assert!(a.arm(), "the leader sleeps until the node is complete");
    a.admit(1, me());
    assert!(!b.enter(1), "slot 2 is still empty");
    assert!(
        !readable(a.bell().fd(), 0),
        "nobody is rung before the node is complete"
    );
    // b has not armed yet: it looked at the slots and is about to sleep.
    a.admit(2, me());
    assert!(c.enter(2));
    assert!(readable(a.bell().fd(), 1000), "the sleeping leader was rung");
    assert!(readable(b.bell().fd(), 1000), "and the member about to sleep");
    assert!(!readable(c.bell().fd(), 0), "not the ringer itself");
    a.disarm();
}

#[test]
fn the_collective_area_lies_between_the_boxes_and_the_pairs() {
    for ranks in [2, 3, 64, 257] {
        let l = Layout::new(ranks, MIN_RING).unwrap();
        let (_, boxes_end) = l.boxes_to(ranks - 1);
        assert!(l.coll_at() >= boxes_end, "{ranks} ranks");
        assert_eq!(l.coll_at() % PAGE, 0);
        let last = l.coll_buf(ranks - 1, COLL_PHASES - 1) + PAGE;
        assert_eq!(last, l.pairs_at(), "{ranks} ranks");
        assert!(l.coll_slot(ranks - 1, COLL_PHASES - 1) + 32 <= l.coll_buf(0, 0));
        assert_eq!(
            l.coll_slot(1, 0) - l.coll_slot(0, 0),
            256,
            "a member's slots side by side"
        );
        assert!(l.coll_arrivals_at(COLL_PHASES - 1) + 8 <= l.coll_at() + PAGE);
        assert_eq!(l.coll_buf(0, COLL_PHASES), l.coll_buf(0, 0), "phases wrap");
    }
}

#[test]
fn the_collective_verdict_is_settled_once_and_alike() {
    let (a, b) = node_of_two(MIN_RING);
    assert_eq!(
        a.collectives_verdict(),
        Some(true),
        "the last to enter completed the node"
    );
    assert!(
        b.decide_collectives(false),
        "too late: the node serves its collectives"
    );
    let [x, y, z] = node_of_three();
    assert_eq!(x.collectives_verdict(), None);
    assert!(!y.decide_collectives(false));
    for (i, n) in [&x, &y, &z].into_iter().enumerate() {
        n.admit(i, me());
        n.enter(100 + i as u32);
    }
    assert_eq!(
        z.collectives_verdict(),
        Some(false),
        "a refusal holds once settled"
    );
}

#[test]
fn posts_are_read_once_stamped_and_reads_stay_in_bounds() {
    let (a, b) = node_of_two(MIN_RING);
    assert_eq!(b.coll_stamp(0, 1), 0);
    a.coll_post(1, 3, b"head-tail").unwrap();
    assert_eq!(b.coll_stamp(0, 1), 3);
    assert_eq!(b.coll_stamp(0, 2), 0, "another phase's slot is apart");
    let mut got = [0u8; 5];
    b.coll_read(0, 1, 9, 4, &mut got).unwrap();
    assert_eq!(&got, b"-tail");
    assert!(b.coll_read(0, 1, 9, 5, &mut got).is_err(), "past the post");
    assert!(b.coll_read(0, 1, COLL_DATA + 1, 0, &mut got).is_err());
    assert!(b.coll_read(0, 1, 9, usize::MAX, &mut got).is_err());
    assert!(b.coll_read(2, 1, 9, 0, &mut got).is_err(), "no member 2");
    assert_eq!(b.coll_stamp(7, 0), 0);
    assert!(a.coll_post(0, 4, &vec![0u8; COLL_DATA + 1]).is_err());
    // Small posts lie in the slot, larger ones in the phase's buffer.
    for len in [COLL_SMALL, COLL_SMALL + 1, COLL_DATA] {
        a.coll_post(0, 4, &vec![len as u8; len]).unwrap();
        let mut last = [0u8; 1];
        b.coll_read(0, 0, len, len - 1, &mut last).unwrap();
        assert_eq!(last, [len as u8], "{len} bytes");
    }
}

#[test]
fn arrivals_and_done_stamps_count_and_departure_waiters_are_taken_once() {
    let (a, b) = node_of_two(MIN_RING);
    assert_eq!(a.coll_arrive(0), 1);
    assert_eq!(b.coll_arrive(0), 2);
    assert_eq!(a.coll_arrivals(1), 0, "per phase");
    assert_eq!(a.coll_arrivals(COLL_PHASES), 2, "phases wrap");
    assert!(!a.coll_done(5), "nobody waits");
    assert_eq!(b.coll_done_of(0), 5);
    assert_eq!(b.coll_done_of(1), 0);
    assert_eq!(b.coll_done_of(9), 0, "no member 9");
    b.coll_want_departures();
    assert!(a.coll_done(6), "b waits");
    assert!(!a.coll_done(7), "taken once");
    assert_eq!(a.gone_count(), 0);
    assert!(!a.failed(1));
    b.mark_finalized();
    a.mark_gone(1);
    assert_eq!(a.gone_count(), 1);
    assert!(!a.failed(1), "a finalized member's end is no failure");
}

#[test]
fn a_member_reads_a_peer_in_one_copy_only_where_it_finds_the_peers_token() {
    // Both members live in this process: the read works, and finds slot 1's token.
    let (leader, _other) = node_of_two(MIN_RING);
    assert!(leader.reads_from(1));
    // A slot pointing at memory that does not hold its token: no one-copy reads.
    let (leader, other) = node_of_two(MIN_RING);
    let elsewhere = [0u8; 64];
    let slot = other.layout.slot(1);
    other
        .seg
        .u64_at(slot + SLOT_PROBE)
        .store(elsewhere.as_ptr() as u64, Ordering::Relaxed);
    assert!(!leader.reads_from(1));
}
