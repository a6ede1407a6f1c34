//! Unit tests of `shm.rs`: the layout, rings, wake-ups and a peer's end.

use super::*;
use crate::{Buffer, Link, Placement, Sink};
use proto::wire::data::{DataRepr, HeaderBytes};
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
    leader.enter(10);
    other.enter(11);
    (leader, other)
}

/// Slot `index` taken by `rank`, as that rank's own process would.
fn enter_as(node: &ShmNode, index: usize, rank: u32) {
    let slot = node.layout.slot(index);
    node.seg
        .u64_at(slot + SLOT_RANK)
        .store(u64::from(rank) + 1, Ordering::Release);
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
    fn on_payload(&mut self, token: DataRepr, buf: Option<Vec<u8>>) {
        self.0.push((token, buf.unwrap_or_default()));
    }
}

#[test]
fn every_pair_has_its_own_area_inside_the_segment() {
    for ranks in [2, 3, 7, 64, 65, 130] {
        let l = Layout::new(ranks, MIN_RING).unwrap();
        let mut areas = Vec::new();
        for a in 0..ranks {
            assert!(l.announce_word(a, l.words() - 1) + 8 <= l.slot(a) + l.slot_size());
            for b in a + 1..ranks {
                assert_eq!(l.pair(a, b), l.pair(b, a));
                let (up, down) = (l.ring_at(a, b), l.ring_at(b, a));
                assert!(up.data + MIN_RING <= down.data);
                assert!(down.data + MIN_RING <= l.pair(a, b) + l.pair_size());
                areas.push(l.pair(a, b));
            }
        }
        areas.sort();
        assert!(areas[0] >= l.slot(ranks - 1) + l.slot_size(), "after the slots");
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
fn the_end_of_the_peers_process_is_seen() {
    let job = job_id();
    let layout = Layout::new(2, MIN_RING).unwrap();
    let (node, _fd) = ShmNode::create(layout, 0, job, Bell::bind(&bell_name(&job, 0)).unwrap()).unwrap();
    let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    node.admit(0, me());
    node.enter(0);
    node.admit(1, child.id());
    enter_as(&node, 1, 1);
    let mut pipe = node.pipe(1).unwrap();
    assert!(pipe.fd().is_some(), "a pidfd watches the peer");
    pipe.service_wakeup().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(readable(pipe.fd().unwrap(), 1000));
    assert!(matches!(pipe.service_wakeup(), Err(LinkError::Closed)));
}

#[test]
fn pids_from_another_pid_namespace_are_not_watched() {
    let job = job_id();
    let layout = Layout::new(2, MIN_RING).unwrap();
    let (node, _fd) = ShmNode::create(layout, 0, job, Bell::bind(&bell_name(&job, 0)).unwrap()).unwrap();
    // The leader saw this process under another pid: the slots' pids mean other
    // processes here.
    node.admit(0, me() + 1);
    node.enter(0);
    node.admit(1, me());
    enter_as(&node, 1, 1);
    assert!(node.pipe(1).unwrap().fd().is_none());
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
    a.seg.u64_at(a.tx.at.tail).store(u64::MAX / 2, Ordering::Release);
    let mut out = [0u8; 64];
    assert!(matches!(b.read(&mut out), Err(LinkError::Protocol(_))));
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
    let mut tx: ShmLink<DataRepr> = shm_link(a, shm_caps(1024));
    let mut rx: ShmLink<DataRepr> = shm_link(b, shm_caps(1024));
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
