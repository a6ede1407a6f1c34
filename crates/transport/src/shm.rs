//! The shared-memory lane between two ranks of one node: two single-producer,
//! single-consumer byte rings (one per direction) in one `memfd` segment, under the
//! stream framing of `stream.rs`, so a frame is a header and its payload as on TCP.
//!
//! Set-up (the runtime's `shm_wireup.rs`): the ranks meet on a Unix socket in the
//! abstract namespace named after the job and the accepting rank, run the job's
//! authenticated handshake over it, and the connecting rank sends the segment's fd with
//! its CONFIRM (`SCM_RIGHTS`). The socket stays open as the lane's doorbell and as its
//! death notice: a rank that sleeps arms a flag in its receive ring, the peer's next
//! write clears the flag and sends one byte; a process that dies closes the socket.
//!
//! A memfd lives in the kernel's internal shm mount, not in `/dev/shm`, so a container's
//! small `/dev/shm` (64 MiB by default) does not limit it; its pages are charged to the
//! memory cgroup like any other memory of the rank.
//!
//! The peer shares the ring counters, so everything read from the segment is checked:
//! indices are masked, and a fill level beyond the ring's size is a protocol error.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use rustix::mm::{MapFlags, ProtFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::stream::{Pipe, StreamLink};
use crate::{Caps, LinkError};

/// Identifies a pontoon segment (and its layout version).
const MAGIC: u64 = u64::from_le_bytes(*b"PNTNSHM1");
/// Counters each on a line of their own: the producer's and the consumer's writes must
/// not invalidate each other's lines (128: adjacent-line prefetch pairs 64-byte lines).
const LINE: usize = 128;
/// Where ring data starts; the header and both rings' counters fit before it.
const DATA_OFFSET: usize = 4096;
/// Smallest and largest ring the runtime may ask for (bytes, each a power of two).
pub const MIN_RING: usize = 16 << 10;
pub const MAX_RING: usize = 64 << 20;
/// Staging buffer of a shared-memory lane: small frames are copied out in one piece;
/// payloads of 16 KiB and more go from the ring straight into receive buffers. A quarter
/// of the ring, within these bounds: a node of many ranks has a lane to each other rank,
/// and a rank of 255 node-local peers would otherwise hold 16 MiB of staging alone.
const RX_STAGING: std::ops::RangeInclusive<usize> = (4 << 10)..=(64 << 10);

pub type ShmLink<T> = StreamLink<ShmPipe, T>;

/// Starting capabilities of a shared-memory lane, until it is measured.
pub fn shm_caps(max_eager: u32) -> Caps {
    Caps {
        latency_ns: 300,
        bandwidth: 8_000_000_000,
        max_frame: 1 << 30,
        max_eager,
        reliable: true,
        ordered: true,
        node_local: true,
        relayed: false,
        raw: false,
        datagram: 0,
    }
}

/// A lane over an established pipe.
pub fn shm_link<T>(pipe: ShmPipe, caps: Caps) -> ShmLink<T> {
    let staging = (pipe.ring_size() / 4).clamp(*RX_STAGING.start(), *RX_STAGING.end());
    StreamLink::new(pipe, caps, staging)
}

/// The abstract socket name where `rank` of the job `job_id` accepts shared-memory
/// lanes. Abstract names live in the network namespace: ranks in different namespaces
/// (containers, testbed hosts) never meet here and use TCP.
pub fn socket_name(job_id: &[u8; 16], rank: u32) -> Vec<u8> {
    let hex: String = job_id.iter().map(|b| format!("{b:02x}")).collect();
    format!("pontoon-{hex}-{rank}").into_bytes()
}

/// A non-blocking Unix stream socket and the abstract address `name`.
fn unix_socket(name: &[u8]) -> io::Result<(OwnedFd, SocketAddrUnix)> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    Ok((fd, SocketAddrUnix::new_abstract_name(name)?))
}

/// Listens for shared-memory lanes under [`socket_name`] (non-blocking).
pub fn listen(name: &[u8]) -> io::Result<UnixListener> {
    let (fd, addr) = unix_socket(name)?;
    rustix::net::bind(&fd, &addr)?;
    // Every other rank of the node may connect at once (an alltoall's first call): the
    // kernel caps this at `net.core.somaxconn`.
    rustix::net::listen(&fd, 4096)?;
    Ok(UnixListener::from(fd))
}

/// Connects to a rank's shared-memory socket (non-blocking; a Unix connect completes at
/// once or fails at once: nobody listens there, or its backlog is full).
pub fn connect(name: &[u8]) -> io::Result<UnixStream> {
    let (fd, addr) = unix_socket(name)?;
    rustix::net::connect(&fd, &addr)?;
    Ok(UnixStream::from(fd))
}

/// Writes `bytes` and, with the first of them, `fd` (`SCM_RIGHTS`). Returns the bytes
/// written (a fresh socket takes a handshake frame whole).
pub fn send_with_fd(sock: &UnixStream, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    Ok(rustix::net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?)
}

/// Reads into `buf`, taking a file descriptor passed along (the first one, if several).
/// `Ok((0, _))` is the end of the stream; `WouldBlock` when nothing is there.
pub fn recv_with_fd(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for f in fds {
                fd.get_or_insert(f); // any further fds are closed as they drop
            }
        }
    }
    Ok((msg.bytes, fd))
}

/// A mapped segment: header, the counters of both rings, then the two rings' data.
struct Segment {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is owned by the segment and unmapped once, in Drop; the raw
// pointer is only dereferenced through the ring accessors below.
unsafe impl Send for Segment {}

impl Segment {
    fn map(fd: &OwnedFd, len: usize) -> io::Result<Segment> {
        // Not populated: a page of the ring costs memory (and the time to clear it) only
        // once a frame reaches it. Every pair of a node's ranks has a segment, and most
        // of a ring stays untouched while messages are small; prefaulting them all made
        // the first alltoall of 256 ranks on one host spend seconds clearing pages.
        // SAFETY: a fresh shared mapping of a memfd of at least `len` bytes (checked by
        // the callers); nothing else in this process refers to the address range.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )?
        };
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Segment { base, len })
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= DATA_OFFSET && offset.is_multiple_of(8));
        // SAFETY: in bounds and aligned (the offsets are the constants of `ring_at`,
        // checked in debug builds; the mapping is page-aligned), and
        // this memory is only ever accessed atomically by both processes.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= DATA_OFFSET && offset.is_multiple_of(4));
        // SAFETY: as in `u64_at`.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no reference into it
        // outlives the segment (the rings borrow it through the pipe that owns it).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Offsets of one ring's counters: the producer's `tail`, the consumer's `head`, and the
/// consumer's "asleep, ring the doorbell" flag.
#[derive(Clone, Copy)]
struct RingAt {
    tail: usize,
    head: usize,
    asleep: usize,
    data: usize,
}

fn ring_at(index: usize, ring: usize) -> RingAt {
    let base = 2 * LINE + index * 3 * LINE;
    RingAt {
        tail: base,
        head: base + LINE,
        asleep: base + 2 * LINE,
        data: DATA_OFFSET + index * ring,
    }
}

/// One direction's state kept locally (never re-read from the shared segment).
struct Side {
    at: RingAt,
    /// Our own counter (the producer's tail, or the consumer's head).
    pos: u64,
    /// The last value seen of the other side's counter.
    seen: u64,
}

/// The two rings of one lane and its doorbell socket, as a [`Pipe`].
pub struct ShmPipe {
    seg: Segment,
    ring: usize,
    tx: Side,
    rx: Side,
    sock: UnixStream,
}

impl ShmPipe {
    /// Makes a segment with two rings of `ring` bytes (a power of two within
    /// [`MIN_RING`, `MAX_RING`]); the connecting side. Returns the pipe and the segment's fd
    /// to pass to the peer.
    pub fn create(sock: UnixStream, ring: usize) -> io::Result<(ShmPipe, OwnedFd)> {
        if !ring.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&ring) {
            return Err(io::Error::other(format!(
                "ring size {ring} is not a power of two in range"
            )));
        }
        let fd = rustix::fs::memfd_create(
            "pontoon-shm",
            rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
        )?;
        let len = DATA_OFFSET + 2 * ring;
        rustix::fs::ftruncate(&fd, len as u64)?;
        // The size is final: a peer that maps it cannot be surprised by a shrink (SIGBUS).
        let _ = rustix::fs::fcntl_add_seals(
            &fd,
            rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW | rustix::fs::SealFlags::SEAL,
        );
        let seg = Segment::map(&fd, len)?;
        seg.u64_at(0).store(MAGIC, Ordering::Relaxed);
        seg.u64_at(8).store(ring as u64, Ordering::Release);
        Ok((ShmPipe::new(seg, ring, sock, 0), fd))
    }

    /// Maps a segment received from the connecting side, after checking it.
    pub fn open(sock: UnixStream, fd: OwnedFd) -> io::Result<ShmPipe> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        let size = rustix::fs::fstat(&fd)?.st_size as u64;
        if size < DATA_OFFSET as u64 {
            return Err(bad(format!("shared-memory segment of {size} bytes is too small")));
        }
        let seals = rustix::fs::fcntl_get_seals(&fd)?;
        if !seals.contains(rustix::fs::SealFlags::SHRINK) {
            return Err(bad("shared-memory segment is not sealed against shrinking".into()));
        }
        let seg = Segment::map(&fd, DATA_OFFSET)?;
        let (magic, ring) = (
            seg.u64_at(0).load(Ordering::Acquire),
            seg.u64_at(8).load(Ordering::Acquire),
        );
        drop(seg);
        let ring = usize::try_from(ring).unwrap_or(0);
        if magic != MAGIC || !ring.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&ring) {
            return Err(bad(format!(
                "not a pontoon shared-memory segment (magic {magic:#x}, ring {ring})"
            )));
        }
        let len = DATA_OFFSET + 2 * ring;
        if size < len as u64 {
            return Err(bad(format!(
                "shared-memory segment of {size} bytes, {len} expected"
            )));
        }
        Ok(ShmPipe::new(Segment::map(&fd, len)?, ring, sock, 1))
    }

    /// `me`: 0 for the side that created the segment (it sends on ring 0), 1 for the other.
    fn new(seg: Segment, ring: usize, sock: UnixStream, me: usize) -> ShmPipe {
        let side = |index| Side {
            at: ring_at(index, ring),
            pos: 0,
            seen: 0,
        };
        ShmPipe {
            seg,
            ring,
            tx: side(me),
            rx: side(1 - me),
            sock,
        }
    }

    /// Bytes of each ring.
    pub fn ring_size(&self) -> usize {
        self.ring
    }

    /// Reads what woke us from the doorbell socket. `Err(Closed)` once the peer is gone
    /// (its process ended, so its end of the socket closed).
    fn drain_doorbell(&mut self) -> Result<(), LinkError> {
        let mut buf = [0u8; 64];
        loop {
            match rustix::net::recv(&self.sock, &mut buf[..], RecvFlags::DONTWAIT) {
                Ok((_, 0)) => return Err(LinkError::Closed),
                Ok(_) => continue,
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(LinkError::Io(e.into())),
            }
        }
    }

    /// Copies `src` into the ring at stream position `pos` (wrapping).
    fn put(&self, data: usize, pos: u64, src: &[u8]) {
        let at = (pos as usize) & (self.ring - 1);
        let first = src.len().min(self.ring - at);
        // SAFETY: both ranges lie inside this ring's data area of the mapping (`at` is
        // masked and `first + rest` is at most the free space, itself at most `ring`);
        // the consumer does not read these bytes before the tail moves past them.
        unsafe {
            let base = self.seg.base.as_ptr().add(data);
            std::ptr::copy_nonoverlapping(src.as_ptr(), base.add(at), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), base, src.len() - first);
        }
    }

    /// Copies `dst.len()` bytes out of the ring from stream position `pos` (wrapping).
    fn get(&self, data: usize, pos: u64, dst: &mut [u8]) {
        let at = (pos as usize) & (self.ring - 1);
        let first = dst.len().min(self.ring - at);
        // SAFETY: both ranges lie inside this ring's data area (masked start, length at
        // most the fill level, itself checked to be at most `ring`); the producer does
        // not write them again before our head moves past them.
        unsafe {
            let base = self.seg.base.as_ptr().add(data);
            std::ptr::copy_nonoverlapping(base.add(at), dst.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(base, dst.as_mut_ptr().add(first), dst.len() - first);
        }
    }

    fn corrupt(&self, what: &str, fill: u64) -> LinkError {
        LinkError::Protocol(format!(
            "shared-memory ring {what}: {fill} bytes in a ring of {} (the peer corrupted the segment)",
            self.ring
        ))
    }
}

impl Pipe for ShmPipe {
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        let cap = self.ring as u64;
        let want: u64 = iov.iter().map(|s| s.len() as u64).sum();
        let mut free = cap - (self.tx.pos - self.tx.seen);
        if free < want {
            self.tx.seen = self.seg.u64_at(self.tx.at.head).load(Ordering::Acquire);
            let fill = self.tx.pos.wrapping_sub(self.tx.seen);
            if fill > cap {
                return Err(self.corrupt("head", fill));
            }
            free = cap - fill;
        }
        let mut written = 0u64;
        for s in iov {
            let n = (s.len() as u64).min(free - written);
            self.put(self.tx.at.data, self.tx.pos + written, &s[..n as usize]);
            written += n;
            if written == free {
                break;
            }
        }
        if written == 0 {
            return Ok(0);
        }
        self.tx.pos += written;
        self.seg
            .u64_at(self.tx.at.tail)
            .store(self.tx.pos, Ordering::Release);
        // The consumer sets its flag, then looks at the tail; we set the tail, then look
        // at the flag: with a full fence on both sides one of us sees the other.
        fence(Ordering::SeqCst);
        let asleep = self.seg.u32_at(self.tx.at.asleep);
        if asleep.load(Ordering::Relaxed) != 0 && asleep.swap(0, Ordering::AcqRel) != 0 {
            // A full socket buffer already holds a wake-up: nothing is lost by EAGAIN.
            let _ = rustix::net::send(&self.sock, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
        }
        Ok(written as usize)
    }

    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        let cap = self.ring as u64;
        let mut fill = self.rx.seen - self.rx.pos;
        if fill == 0 {
            self.rx.seen = self.seg.u64_at(self.rx.at.tail).load(Ordering::Acquire);
            fill = self.rx.seen.wrapping_sub(self.rx.pos);
            if fill > cap {
                return Err(self.corrupt("tail", fill));
            }
            if fill == 0 {
                return Ok(None);
            }
        }
        let n = fill.min(dst.len() as u64) as usize;
        self.get(self.rx.at.data, self.rx.pos, &mut dst[..n]);
        self.rx.pos += n as u64;
        self.seg
            .u64_at(self.rx.at.head)
            .store(self.rx.pos, Ordering::Release);
        Ok(Some(n))
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }

    fn polled(&self) -> bool {
        true
    }

    fn service_wakeup(&mut self) -> Result<(), LinkError> {
        self.drain_doorbell()
    }

    fn arm_wakeup(&mut self) -> bool {
        let asleep = self.seg.u32_at(self.rx.at.asleep);
        asleep.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let tail = self.seg.u64_at(self.rx.at.tail).load(Ordering::SeqCst);
        if tail != self.rx.pos {
            asleep.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, Link, Placement, Sink};
    use proto::wire::data::{DataRepr, HeaderBytes};

    fn pair(ring: usize) -> (ShmPipe, ShmPipe) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        let (left, fd) = ShmPipe::create(a, ring).unwrap();
        let right = ShmPipe::open(b, fd).unwrap();
        (left, right)
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
    fn a_sleeping_reader_is_woken_and_a_dead_peer_is_seen() {
        let (mut a, mut b) = pair(MIN_RING);
        assert!(b.arm_wakeup(), "nothing waits yet");
        a.write(&[IoSlice::new(b"x")]).unwrap();
        // The doorbell rang: the socket is readable.
        let mut fds = [rustix::event::PollFd::new(&b.sock, rustix::event::PollFlags::IN)];
        let ts = rustix::time::Timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&ts)).unwrap(), 1);
        b.drain_doorbell().unwrap();
        // Armed with data already there: no sleep.
        assert!(!b.arm_wakeup());
        // Not armed: a write rings nothing.
        a.write(&[IoSlice::new(b"y")]).unwrap();
        let mut fds = [rustix::event::PollFd::new(&b.sock, rustix::event::PollFlags::IN)];
        let zero = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        assert_eq!(rustix::event::poll(&mut fds, Some(&zero)).unwrap(), 0);
        drop(a);
        assert!(matches!(b.drain_doorbell(), Err(LinkError::Closed)));
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
    fn a_segment_that_is_not_ours_is_refused() {
        let (_, b) = UnixStream::pair().unwrap();
        let fd = rustix::fs::memfd_create("other", rustix::fs::MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 1 << 20).unwrap();
        rustix::fs::fcntl_add_seals(&fd, rustix::fs::SealFlags::SHRINK).unwrap();
        let err = ShmPipe::open(b, fd).err().expect("refused");
        assert!(err.to_string().contains("not a pontoon"), "{err}");
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
}
