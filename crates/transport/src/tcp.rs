//! The TCP lane: a non-blocking socket with `TCP_NODELAY` under the stream framing of
//! `stream.rs` (vectored writes straight from user buffers, payload reads straight into
//! receive buffers).

use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};

use rustix::net::{RecvFlags, SendAncillaryBuffer, SendFlags};

use crate::sealed::{LaneKeys, Sealed};
use crate::stream::{Pipe, StreamLink};
use crate::{Caps, LinkError, PathFigures};

/// Size of the receive staging buffer: many small frames per read() call.
const RX_BUF: usize = 256 << 10;

/// A connected TCP socket as the pipe of a stream lane.
pub struct TcpPipe(TcpStream);

pub type TcpLink<T> = StreamLink<TcpPipe, T>;
/// A TCP lane whose bytes travel encrypted.
pub type SealedTcpLink<T> = StreamLink<Sealed<TcpPipe>, T>;

/// Starting capabilities of a TCP lane, until it is measured.
pub fn tcp_caps() -> Caps {
    Caps {
        latency_ns: 10_000,
        bandwidth: 1_250_000_000,
        max_frame: 1 << 30,
        reliable: true,
        ordered: true,
        node_local: false,
        relayed: false,
        raw: false,
        datagram: 0,
        single_copy: false,
    }
}

/// Wraps an authenticated, connected socket (buffer sizes were set before connect).
pub fn tcp_link<T>(sock: TcpStream, caps: Caps) -> io::Result<TcpLink<T>> {
    Ok(StreamLink::new(tcp_pipe(sock)?, caps, RX_BUF))
}

/// [`tcp_link`], its bytes sealed with `keys`.
pub fn sealed_tcp_link<T>(sock: TcpStream, caps: Caps, keys: &LaneKeys) -> io::Result<SealedTcpLink<T>> {
    Ok(StreamLink::new(Sealed::new(tcp_pipe(sock)?, keys), caps, RX_BUF))
}

fn tcp_pipe(sock: TcpStream) -> io::Result<TcpPipe> {
    sock.set_nodelay(true)?;
    sock.set_nonblocking(true)?;
    Ok(TcpPipe(sock))
}

/// The round trip the kernel measured on a socket so far (its smoothed RTT: after a
/// connect, the SYN's), `None` where it cannot say.
pub fn round_trip(sock: &TcpStream) -> Option<std::time::Duration> {
    let info = tcp_info(sock).ok()?;
    (info.tcpi_rtt > 0).then(|| std::time::Duration::from_micros(u64::from(info.tcpi_rtt)))
}

/// The least round trip the kernel measured on a socket: its distance, the least
/// disturbed by a busy host (samples are taken in the kernel, the SYN's the first).
pub fn min_round_trip(sock: &TcpStream) -> Option<std::time::Duration> {
    let info = tcp_info(sock).ok()?;
    (info.tcpi_min_rtt > 0 && info.tcpi_min_rtt != u32::MAX)
        .then(|| std::time::Duration::from_micros(u64::from(info.tcpi_min_rtt)))
}

impl TcpPipe {
    pub fn socket(&self) -> &TcpStream {
        &self.0
    }

    /// Keeps at most `bytes` of data not yet sent in the kernel (`TCP_NOTSENT_LOWAT`):
    /// the rest waits in the link's own queue, where it counts as the lane's backlog.
    pub fn limit_unsent(&self, bytes: u32) -> io::Result<()> {
        socket2::SockRef::from(&self.0).set_tcp_notsent_lowat(bytes)
    }
}

impl Pipe for TcpPipe {
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        loop {
            // One buffer: send(), cheaper in the kernel than sendmsg().
            let sent = if let [one] = iov {
                rustix::net::send(&self.0, one, SendFlags::NOSIGNAL)
            } else {
                let mut ctl = SendAncillaryBuffer::default();
                rustix::net::sendmsg(&self.0, iov, &mut ctl, SendFlags::NOSIGNAL)
            };
            return match sent {
                Ok(n) => Ok(n),
                Err(rustix::io::Errno::AGAIN) => Ok(0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => Err(LinkError::Io(e.into())),
            };
        }
    }

    /// One recv() without libc's wrapper and without building an `io::Error` for
    /// EAGAIN, which is what most calls of a spinning rank return.
    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        loop {
            return match rustix::net::recv(&self.0, &mut *dst, RecvFlags::empty()) {
                Ok((_, 0)) => Err(LinkError::Closed),
                Ok((_, n)) => Ok(Some(n)),
                Err(rustix::io::Errno::AGAIN) => Ok(None),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => Err(LinkError::Io(e.into())),
            };
        }
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.0.as_fd())
    }

    fn polled(&self) -> bool {
        false
    }

    fn arm_wakeup(&mut self) -> bool {
        true // the socket becomes readable by itself
    }

    fn check_path(&self, stall_ms: u32) -> Result<Option<PathFigures>, LinkError> {
        let info = tcp_info(&self.0).map_err(LinkError::Io)?;
        if let Some(why) = stalled(&info, stall_ms) {
            return Err(LinkError::Stalled(why));
        }
        Ok(Some(PathFigures {
            min_rtt_ns: u64::from(info.tcpi_min_rtt) * 1000,
            delivery_rate: info.tcpi_delivery_rate,
        }))
    }
}

/// Consecutive retransmissions (or unanswered window probes) of one segment before a
/// path that has acknowledged nothing for the stall time counts as dead: one lost
/// segment after an idle spell must not.
const DEAD_AFTER_RETRIES: u8 = 3;

/// Why the path of a connection is dead, if it is: the peer's kernel has acknowledged
/// nothing for `stall_ms` although data or window probes went out again and again. A
/// peer that is merely busy still acknowledges (its kernel answers window probes).
fn stalled(info: &libc::tcp_info, stall_ms: u32) -> Option<String> {
    let retries = info.tcpi_retransmits.max(info.tcpi_probes);
    (info.tcpi_last_ack_recv >= stall_ms && retries >= DEAD_AFTER_RETRIES).then(|| {
        format!(
            "no acknowledgement for {} ms; {} segment(s) unacknowledged, sent {} times over (a NIC or route \
             on the way is gone; PONTOON_LANE_TIMEOUT_MS sets how long a lane may stall)",
            info.tcpi_last_ack_recv, info.tcpi_unacked, retries
        )
    })
}

/// The kernel's view of a TCP connection.
fn tcp_info(sock: &TcpStream) -> io::Result<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain old data (integers only), so all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is a writable tcp_info of `len` bytes that outlives the call; the
    // kernel writes at most `len` bytes and reports how many in `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(last_ack_recv: u32, retransmits: u8, probes: u8) -> libc::tcp_info {
        // SAFETY: tcp_info is plain old data (integers only).
        let mut i: libc::tcp_info = unsafe { std::mem::zeroed() };
        i.tcpi_last_ack_recv = last_ack_recv;
        i.tcpi_retransmits = retransmits;
        i.tcpi_probes = probes;
        i
    }

    #[test]
    fn a_path_is_dead_only_after_repeated_unanswered_sends_for_the_stall_time() {
        assert!(
            stalled(&info(1500, 3, 0), 1000).is_some(),
            "a NIC gone: retransmissions unanswered"
        );
        assert!(
            stalled(&info(1500, 0, 3), 1000).is_some(),
            "window probes unanswered"
        );
        assert!(
            stalled(&info(900, 5, 0), 1000).is_none(),
            "not for the stall time yet"
        );
        // An idle lane that sends again and loses one segment: the last ACK is old, but
        // one retransmission is no proof of a dead path.
        assert!(stalled(&info(60_000, 1, 0), 1000).is_none());
        // A busy peer whose kernel answers window probes: the answers reset the count.
        assert!(stalled(&info(60_000, 0, 0), 1000).is_none());
    }

    #[test]
    fn a_live_connection_is_measured_not_stalled() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_b, _) = listener.accept().unwrap();
        let figures = TcpPipe(a).check_path(1).unwrap().expect("TCP measures");
        assert!(
            figures.min_rtt_ns > 0,
            "the handshake gave a round trip: {figures:?}"
        );
    }
    use crate::{Buffer, Link};
    use proto::wire::data::DataRepr;
    use proto::wire::data::HeaderBytes;
    use std::io::Read;
    use std::net::TcpListener;

    #[test]
    fn send_copy_keeps_frame_order_and_owns_what_the_socket_did_not_take() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let mut link: TcpLink<()> = tcp_link(sender, tcp_caps()).unwrap();
        // A frame larger than the socket buffers: part of it stays queued.
        let big = Buffer::owned(vec![1u8; 16 << 20]);
        let big_header = HeaderBytes::new(&DataRepr::Frag {
            recv_id: 1,
            offset: 0,
            len: 16 << 20,
        });
        assert!(!link.send(&big_header, Some((&big, 0, 16 << 20)), 7).unwrap());
        // A small frame behind it, from memory the caller reuses at once.
        let small_header = HeaderBytes::new(&DataRepr::Frag {
            recv_id: 2,
            offset: 0,
            len: 4,
        });
        let mut reused = *b"abcd";
        link.send_copy(&small_header, &reused).unwrap();
        reused.copy_from_slice(b"XXXX");
        assert_eq!(&reused, b"XXXX");
        let total = big_header.as_slice().len() + (16 << 20) + small_header.as_slice().len() + 4;
        let mut got = Vec::with_capacity(total);
        let mut buf = vec![0u8; 1 << 20];
        while got.len() < total {
            let n = receiver.read(&mut buf).unwrap();
            got.extend_from_slice(&buf[..n]);
            link.flush(&mut Vec::new()).unwrap();
        }
        assert_eq!(link.tx_queued(), 0);
        let tail = &got[total - small_header.as_slice().len() - 4..];
        assert_eq!(&tail[..small_header.as_slice().len()], small_header.as_slice());
        assert_eq!(&tail[small_header.as_slice().len()..], b"abcd");
        assert!(got[big_header.as_slice().len()..total - tail.len()]
            .iter()
            .all(|b| *b == 1));
    }

    #[test]
    fn tx_queued_falls_to_zero_exactly_when_everything_is_written() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let mut link: TcpLink<()> = tcp_link(sender, tcp_caps()).unwrap();
        // Far more than the socket buffers take, as small and large frames.
        let payload = Buffer::owned(vec![7u8; 1 << 20]);
        let mut total = 0u64;
        for i in 0..64u64 {
            let len = if i % 2 == 0 { 8 } else { 1 << 20 };
            let header = HeaderBytes::new(&DataRepr::Frag {
                recv_id: i,
                offset: 0,
                len: len as u32,
            });
            total += header.as_slice().len() as u64 + len;
            link.send(&header, Some((&payload, 0, len)), 0).unwrap();
        }
        assert!(link.tx_queued() > 0, "the socket cannot take 32 MiB at once");
        // What the peer read was written, so it is no longer queued; an accounting slip
        // either underflows (debug builds panic) or leaves bytes queued at the end.
        let mut read = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        while read < total {
            assert!(read <= total - link.tx_queued());
            read += receiver.read(&mut buf).unwrap() as u64;
            link.flush(&mut Vec::new()).unwrap();
        }
        assert_eq!(read, total);
        assert_eq!(link.tx_queued(), 0);
    }

    /// Places every payload into memory of its own, as a receive posted by the
    /// application does, and counts the frames that arrived whole.
    #[derive(Default)]
    struct IntoUserMemory {
        whole: usize,
    }

    impl crate::Sink for IntoUserMemory {
        type Token = ();
        fn on_header(&mut self, repr: &DataRepr) -> Result<(crate::Placement, ()), String> {
            let len = u64::from(repr.payload_len());
            let buf = Buffer::owned(vec![0u8; len as usize]);
            Ok((
                crate::Placement::User {
                    buf,
                    offset: 0,
                    len,
                    skip: 0,
                },
                (),
            ))
        }
        fn on_payload(&mut self, _: (), _: Option<Vec<u8>>) -> Result<(), String> {
            self.whole += 1;
            Ok(())
        }
    }

    /// Calls `recv` until it says nothing happened; how many calls that took, if it did
    /// within a bound.
    fn recv_until_idle(link: &mut TcpLink<()>, sink: &mut IntoUserMemory) -> Option<usize> {
        (0..1000).position(|_| !link.recv(sink).unwrap())
    }

    /// A rank decides by what its lanes report whether to sleep; a lane that claims
    /// progress it did not make keeps it polling at full speed. On a WAN a large frame
    /// trickles in for milliseconds and a socket stays full until acknowledgements come
    /// back: both held two ranks at 100 % CPU and starved the host's network of it.
    #[test]
    fn a_half_arrived_frame_and_a_full_socket_are_no_progress() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (receiver, _) = listener.accept().unwrap();
        let mut rx: TcpLink<()> = tcp_link(receiver, tcp_caps()).unwrap();
        let mut raw = sender.try_clone().unwrap();
        let mut tx: TcpLink<()> = tcp_link(sender, tcp_caps()).unwrap();
        // The header and the first 200 KiB of a 1 MiB frame: read into user memory.
        let len = 1u32 << 20;
        let header = HeaderBytes::new(&DataRepr::Frag {
            recv_id: 1,
            offset: 0,
            len,
        });
        use std::io::Write;
        raw.write_all(header.as_slice()).unwrap();
        raw.write_all(&vec![3u8; 200 << 10]).unwrap();
        let mut sink = IntoUserMemory::default();
        assert!(rx.recv(&mut sink).unwrap(), "the part that came is progress");
        let calls = recv_until_idle(&mut rx, &mut sink);
        assert!(
            calls.is_some(),
            "a frame waiting for its rest must not claim progress"
        );
        // The rest comes: the frame is whole.
        raw.write_all(&vec![3u8; (len as usize) - (200 << 10)]).unwrap();
        while sink.whole == 0 {
            assert!(recv_until_idle(&mut rx, &mut sink).is_some());
        }
        // A sender whose socket is full (the receiver reads nothing) makes no progress
        // by flushing, and makes some once the peer reads.
        let big = Buffer::owned(vec![5u8; 32 << 20]);
        let header = HeaderBytes::new(&DataRepr::Frag {
            recv_id: 2,
            offset: 0,
            len: 32 << 20,
        });
        assert!(!tx.send(&header, Some((&big, 0, 32 << 20)), 9).unwrap());
        let mut done = Vec::new();
        while tx.flush(&mut done).unwrap() {}
        assert!(tx.tx_queued() > 0);
        assert!(!tx.flush(&mut done).unwrap(), "a full socket took nothing");
        let went = (0..10_000).any(|_| {
            rx.recv(&mut sink).unwrap();
            tx.flush(&mut done).unwrap()
        });
        assert!(went, "room again: bytes went");
    }
}
