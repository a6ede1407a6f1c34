//! The TCP link: non-blocking, `TCP_NODELAY`, vectored writes straight from user
//! buffers, payload reads straight into receive buffers, partial reads and writes
//! carried over between calls, and no allocation per message on the hot path.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};

use proto::wire::data::{DataHeader, DataRepr, HeaderBytes, Kind, MAX_HEADER_LEN, PREFIX_LEN};
use rustix::net::{RecvFlags, SendAncillaryBuffer, SendFlags};

use crate::{Buffer, Caps, Link, LinkError, Placement, Sink};

/// Size of the receive staging buffer: many small frames per read() call.
const RX_BUF: usize = 256 << 10;
/// Payload bytes still to come above which a read goes straight into user memory.
const DIRECT_READ: u64 = 16 << 10;
/// Frames up to this size are copied into one buffer and sent with one send().
const SMALL_FRAME: usize = 256;
/// Frames gathered into one sendmsg() call.
const MAX_IOV_FRAMES: usize = 32;

struct TxFrame {
    header: HeaderBytes,
    payload: Option<(Buffer, u64, u64)>,
    /// Bytes of header + payload already written.
    written: usize,
    token: u64,
}

impl TxFrame {
    fn total(&self) -> usize {
        self.header.as_slice().len() + self.payload.as_ref().map_or(0, |p| p.2 as usize)
    }
    /// Puts the unwritten parts of the frame into `out` (room for two); returns how many.
    fn pending<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        let h = self.header.as_slice();
        if self.written < h.len() {
            out[n] = IoSlice::new(&h[self.written..]);
            n += 1;
        }
        if let Some((buf, off, len)) = &self.payload {
            let done = self.written.saturating_sub(h.len()) as u64;
            if done < *len {
                out[n] = IoSlice::new(buf.slice(off + done, len - done));
                n += 1;
            }
        }
        n
    }
}

enum RxState<T> {
    Header,
    Payload {
        placement: Placement,
        token: T,
        placed: u64,
        total: u64,
    },
}

pub struct TcpLink<T> {
    sock: TcpStream,
    caps: Caps,
    tx: VecDeque<TxFrame>,
    /// Unwritten bytes of the frames in `tx`.
    tx_bytes: u64,
    rx_buf: Box<[u8]>,
    rx_start: usize,
    rx_end: usize,
    rx: RxState<T>,
    /// The last read of this receive pass came back short.
    drained: bool,
}

/// TCP capabilities; `max_eager` comes from the configuration.
pub fn tcp_caps(max_eager: u32) -> Caps {
    Caps {
        latency_ns: 10_000,
        bandwidth: 1_250_000_000,
        max_frame: 1 << 30,
        max_eager,
        reliable: true,
        ordered: true,
        node_local: false,
    }
}

impl<T> TcpLink<T> {
    /// Wraps an authenticated, connected socket (buffer sizes were set before connect).
    pub fn new(sock: TcpStream, caps: Caps) -> io::Result<TcpLink<T>> {
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        Ok(TcpLink {
            sock,
            caps,
            tx: VecDeque::new(),
            tx_bytes: 0,
            rx_buf: vec![0u8; RX_BUF].into_boxed_slice(),
            rx_start: 0,
            rx_end: 0,
            rx: RxState::Header,
            drained: false,
        })
    }

    /// Bytes that arrived before the link took over the socket (read with the handshake).
    pub fn preload(&mut self, bytes: &[u8]) {
        let n = bytes.len().min(self.rx_buf.len());
        self.rx_buf[..n].copy_from_slice(&bytes[..n]);
        self.rx_start = 0;
        self.rx_end = n;
    }

    /// Writes queued frames until the socket is full; calls `done` with the token of
    /// every frame completely written. No allocation: the iovec lives on the stack.
    fn write_some(&mut self, mut done: impl FnMut(u64)) -> Result<(), LinkError> {
        while !self.tx.is_empty() {
            let mut iov = [IoSlice::new(&[]); 2 * MAX_IOV_FRAMES];
            let mut used = 0;
            for f in self.tx.iter().take(MAX_IOV_FRAMES) {
                used += f.pending(&mut iov[used..]);
            }
            let mut ctl = SendAncillaryBuffer::default();
            let n = match rustix::net::sendmsg(&self.sock, &iov[..used], &mut ctl, SendFlags::NOSIGNAL) {
                Ok(n) => n,
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(LinkError::Io(e.into())),
            };
            self.tx_bytes -= n as u64;
            let mut n = n;
            while n > 0 {
                let f = self
                    .tx
                    .front_mut()
                    .expect("bytes written belong to queued frames");
                let left = f.total() - f.written;
                if n >= left {
                    n -= left;
                    done(f.token);
                    self.tx.pop_front();
                } else {
                    f.written += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }

    /// A small frame with nothing queued before it (the latency-critical case) goes out
    /// with one send() of one contiguous copy: cheaper in the kernel than a two-segment
    /// sendmsg(), and nothing is queued or reference-counted. Returns the bytes written
    /// (0 when the socket is full), or `None` when the frame is too large for this path.
    fn send_small_now(&self, header: &[u8], payload: &[u8]) -> Result<Option<usize>, LinkError> {
        let total = header.len() + payload.len();
        if total > SMALL_FRAME {
            return Ok(None);
        }
        let mut buf = [0u8; SMALL_FRAME];
        buf[..header.len()].copy_from_slice(header);
        buf[header.len()..total].copy_from_slice(payload);
        loop {
            return match rustix::net::send(&self.sock, &buf[..total], SendFlags::NOSIGNAL) {
                Ok(n) => Ok(Some(n)),
                Err(rustix::io::Errno::AGAIN) => Ok(Some(0)),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => Err(LinkError::Io(e.into())),
            };
        }
    }

    /// Writes a small frame at once when nothing is queued before it; otherwise, or for
    /// what the socket did not take, queues it with the payload `keep` makes. Returns
    /// whether the frame is completely written.
    fn write_or_queue(
        &mut self,
        header: &HeaderBytes,
        bytes: &[u8],
        keep: impl FnOnce() -> Option<(Buffer, u64, u64)>,
        token: u64,
    ) -> Result<bool, LinkError> {
        let mut written = 0;
        if self.tx.is_empty() {
            if let Some(n) = self.send_small_now(header.as_slice(), bytes)? {
                if n == header.as_slice().len() + bytes.len() {
                    return Ok(true);
                }
                written = n;
            }
        }
        self.queue(TxFrame {
            header: *header,
            payload: keep(),
            written,
            token,
        })
    }

    /// Queues a frame of which `written` bytes are already on the socket, then writes
    /// on if it is the only one. Returns whether it is now completely written.
    fn queue(&mut self, frame: TxFrame) -> Result<bool, LinkError> {
        self.tx_bytes += (frame.total() - frame.written) as u64;
        self.tx.push_back(frame);
        if self.tx.len() > 1 {
            return Ok(false); // keep frame order: the earlier frames go first
        }
        let mut completed = false;
        self.write_some(|_| completed = true)?;
        Ok(completed)
    }

    /// Moves payload bytes from the staging buffer (or the socket) to their place.
    /// Returns `Ok(false)` when the socket has no more bytes for now.
    fn fill_payload<S: Sink<Token = T>>(&mut self, sink: &mut S) -> Result<bool, LinkError> {
        let RxState::Payload {
            placement,
            placed,
            total,
            ..
        } = &mut self.rx
        else {
            return Ok(true);
        };
        // Staged bytes first.
        let avail = (self.rx_end - self.rx_start) as u64;
        let take = avail.min(*total - *placed);
        if take > 0 {
            let src = &self.rx_buf[self.rx_start..self.rx_start + take as usize];
            place(placement, *placed, src);
            *placed += take;
            self.rx_start += take as usize;
        }
        // Large remainder into user memory directly: no staging copy.
        while *total - *placed >= DIRECT_READ {
            let Placement::User { buf, offset, len, .. } = placement else {
                break;
            };
            if *placed >= *len {
                break;
            }
            let want = (*len - *placed).min(*total - *placed);
            let dst = buf.slice_mut(*offset + *placed, want);
            if dst.is_empty() {
                break;
            }
            match read_some(&self.sock, dst)? {
                Some(n) => *placed += n as u64,
                None => return Ok(false),
            }
        }
        if *placed < *total {
            return Ok(true); // more to stage
        }
        let RxState::Payload { placement, token, .. } = std::mem::replace(&mut self.rx, RxState::Header)
        else {
            unreachable!("state checked above")
        };
        let engine_buf = match placement {
            Placement::Engine(v) => Some(v),
            _ => None,
        };
        sink.on_payload(token, engine_buf);
        Ok(true)
    }

    /// Refills the staging buffer from the socket. `Ok(false)`: nothing available.
    /// Sets `self.drained` when the read came back short: the socket is empty for now,
    /// so the next refill in this pass would only cost a system call returning EAGAIN.
    fn stage(&mut self) -> Result<bool, LinkError> {
        if self.drained {
            return Ok(false);
        }
        if self.rx_start == self.rx_end {
            self.rx_start = 0;
            self.rx_end = 0;
        } else if self.rx_start > 0 && self.rx_buf.len() - self.rx_end < MAX_HEADER_LEN {
            self.rx_buf.copy_within(self.rx_start..self.rx_end, 0);
            self.rx_end -= self.rx_start;
            self.rx_start = 0;
        }
        // The tail of a large payload: read it and at most the next header, not a
        // staging buffer's worth of the next fragment's payload, which would then be
        // copied instead of read straight into place.
        let want = match self.rx {
            RxState::Payload { placed, total, .. } if total >= DIRECT_READ => {
                (total - placed) as usize + MAX_HEADER_LEN
            }
            _ => usize::MAX,
        };
        let room = &mut self.rx_buf[self.rx_end..];
        let room_len = room.len().min(want);
        match read_some(&self.sock, &mut room[..room_len])? {
            Some(n) => {
                self.drained = n < room_len;
                self.rx_end += n;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// One recv(): `Some(bytes)` (never 0), `None` when the socket has nothing now. A system
/// call without libc's wrapper and without building an `io::Error` for EAGAIN, which is
/// what most calls of a spinning rank return.
fn read_some(sock: &TcpStream, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
    loop {
        return match rustix::net::recv(sock, &mut *dst, RecvFlags::empty()) {
            Ok((_, 0)) => Err(LinkError::Closed),
            Ok((_, n)) => Ok(Some(n)),
            Err(rustix::io::Errno::AGAIN) => Ok(None),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => Err(LinkError::Io(e.into())),
        };
    }
}

fn place(placement: &mut Placement, at: u64, src: &[u8]) {
    match placement {
        Placement::None => {}
        Placement::User { buf, offset, len, .. } => {
            // Bytes past `len` are the truncated tail: dropped.
            if at < *len {
                let n = (*len - at).min(src.len() as u64) as usize;
                buf.write_at(*offset + at, &src[..n]);
            }
        }
        Placement::Engine(v) => v[at as usize..at as usize + src.len()].copy_from_slice(src),
    }
}

impl<T> Link for TcpLink<T> {
    type Token = T;

    fn caps(&self) -> Caps {
        self.caps
    }

    fn send(
        &mut self,
        header: &HeaderBytes,
        payload: Option<(&Buffer, u64, u64)>,
        token: u64,
    ) -> Result<bool, LinkError> {
        let bytes = payload.map_or(&[][..], |(b, off, len)| b.slice(off, len));
        self.write_or_queue(
            header,
            bytes,
            || payload.map(|(b, off, len)| (b.clone(), off, len)),
            token,
        )
    }

    fn send_copy(&mut self, header: &HeaderBytes, payload: &[u8]) -> Result<(), LinkError> {
        let len = payload.len() as u64;
        let keep = || (len > 0).then(|| (Buffer::owned(payload.to_vec()), 0, len));
        self.write_or_queue(header, payload, keep, 0).map(|_| ())
    }

    fn flush(&mut self, done: &mut Vec<u64>) -> Result<(), LinkError> {
        self.write_some(|t| done.push(t))
    }

    fn tx_queued(&self) -> u64 {
        self.tx_bytes
    }

    fn recv<S: Sink<Token = T>>(&mut self, sink: &mut S) -> Result<bool, LinkError> {
        let mut progressed = false;
        self.drained = false;
        loop {
            if let RxState::Payload { .. } = self.rx {
                if !self.fill_payload(sink)? {
                    return Ok(true);
                }
                if let RxState::Payload { .. } = self.rx {
                    // Staging buffer drained, payload incomplete: read more.
                    if !self.stage()? {
                        return Ok(progressed);
                    }
                    progressed = true;
                }
                continue;
            }
            let avail = &self.rx_buf[self.rx_start..self.rx_end];
            let need = if avail.is_empty() {
                PREFIX_LEN
            } else {
                Kind::from_u8(avail[0])
                    .map(|k| k.header_len())
                    .map_err(LinkError::Wire)?
            };
            if avail.len() < need {
                if !self.stage()? {
                    return Ok(progressed);
                }
                progressed = true;
                continue;
            }
            let view = DataHeader::new_checked(&avail[..need])?;
            let repr = DataRepr::parse(&view);
            self.rx_start += need;
            let total = u64::from(repr.payload_len());
            let (placement, token) = sink.on_header(&repr).map_err(LinkError::Protocol)?;
            if total == 0 {
                let engine_buf = match placement {
                    Placement::Engine(v) => Some(v),
                    _ => None,
                };
                sink.on_payload(token, engine_buf);
            } else {
                self.rx = RxState::Payload {
                    placement,
                    token,
                    placed: 0,
                    total,
                };
            }
            progressed = true;
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::wire::data::DataRepr;
    use std::io::Read;
    use std::net::TcpListener;

    #[test]
    fn send_copy_keeps_frame_order_and_owns_what_the_socket_did_not_take() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sender = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut receiver, _) = listener.accept().unwrap();
        let mut link: TcpLink<()> = TcpLink::new(sender, tcp_caps(1024)).unwrap();
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
        let mut link: TcpLink<()> = TcpLink::new(sender, tcp_caps(1024)).unwrap();
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
}
