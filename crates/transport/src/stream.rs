//! Framing of byte-stream lanes, whatever carries the bytes (a TCP socket, a ring in
//! shared memory): frames (data header, then payload) written straight from user
//! buffers, payloads read straight into receive buffers, partial reads and writes carried
//! over between calls, and no allocation per message on the hot path. A transport gives
//! a [`Pipe`]; [`StreamLink`] does the rest.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::fd::BorrowedFd;

use proto::wire::data::{
    DataHeader, DataRepr, HeaderBytes, Kind, MATCH_HEADER_LEN, MAX_HEADER_LEN, PREFIX_LEN,
};

use crate::{Buffer, Caps, Ledger, Link, LinkError, PathFigures, Peeked, Placement, Sink};

/// Payload bytes still to come above which a read goes straight into user memory.
const DIRECT_READ: u64 = 16 << 10;
/// Frames up to this size (a message of the immediate paths and its header) are
/// written at once when nothing is queued before them, copied into one buffer for one
/// send(), and shown whole by `peek_small`.
const SMALL_FRAME: usize = proto::limits::IMMEDIATE_MAX + MAX_HEADER_LEN;
/// Small frames up to this size are copied on the stack; larger ones into the link's
/// own buffer (no 4 KiB zeroed per message).
const STACK_FRAME: usize = 256;
/// Staging a lane starts with.
const FIRST_STAGING: usize = 1 << 10;
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

/// What carries a stream lane's bytes: a connected socket, a ring in shared memory.
pub trait Pipe {
    /// Writes as much of `iov` as the pipe takes now; `Ok(0)` when it is full.
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError>;
    /// Writes one frame, `header` then `payload`, as [`Pipe::write`] of the two would:
    /// a pipe may do it faster knowing it is one small frame.
    #[inline]
    fn write_frame(&mut self, header: &[u8], payload: &[u8]) -> Result<usize, LinkError> {
        self.write(&[IoSlice::new(header), IoSlice::new(payload)])
    }
    /// A write of several slices costs it no more than one of their total (memory, not
    /// a system call): a small frame's header and payload are not copied together first.
    fn gathers(&self) -> bool {
        false
    }
    /// Reads up to `dst.len()` bytes: `Some(n)` (never 0), `None` when nothing is there
    /// now, `Err(LinkError::Closed)` once the other end is gone.
    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError>;
    /// Writes out what the pipe took in earlier writes but holds still (a sealed pipe's
    /// records, when the socket was full).
    fn flush(&mut self) -> Result<(), LinkError> {
        Ok(())
    }
    /// Bytes written to the pipe that it still holds (a datagram lane keeps them until
    /// the peer acknowledges them, a sealed one records the socket did not take yet);
    /// counted in [`Link::tx_queued`].
    fn queued(&self) -> u64 {
        0
    }
    /// Bytes the pipe wrote on that the peer has not read yet, as far as this end can
    /// tell now (a shared-memory ring's fill, the consumer's position read afresh).
    fn unread(&mut self) -> u64 {
        0
    }
    /// See [`Link::fd`].
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// See [`Link::polled`].
    fn polled(&self) -> bool;
    /// See [`Link::quiet`].
    fn quiet(&self) -> bool {
        false
    }
    /// A whole write waiting where the pipe keeps it (a shared-memory box), with nothing
    /// before it: where it lies and its length, for [`Pipe::in_place`]. A blocking
    /// receive reads its frame there, without staging it first.
    fn peek_in_place(&self) -> Option<(usize, usize)> {
        None
    }
    /// The bytes [`Pipe::peek_in_place`] found (empty for anything else).
    fn in_place(&self, _at: usize, _len: usize) -> &[u8] {
        &[]
    }
    /// Takes what [`Pipe::peek_in_place`] showed.
    fn take_in_place(&mut self) {}
    /// See [`Link::signalled`].
    fn signalled(&self) -> bool {
        false
    }
    /// See [`Link::watch_while_sleeping`].
    fn watch_while_sleeping(&self) -> bool {
        false
    }
    /// See [`Link::wake_within`].
    fn wake_within(&self) -> Option<std::time::Duration> {
        None
    }
    /// See [`Link::arm_wakeup`].
    fn arm_wakeup(&mut self) -> bool;
    /// See [`Link::service_wakeup`].
    fn service_wakeup(&mut self) -> Result<(), LinkError> {
        Ok(())
    }
    /// See [`Link::check_path`].
    fn check_path(&self, _stall_ms: u32) -> Result<Option<PathFigures>, LinkError> {
        Ok(None)
    }
}

/// A lane over a byte stream: frames are a data header followed by its payload.
pub struct StreamLink<P, T> {
    pipe: P,
    caps: Caps,
    tx: VecDeque<TxFrame>,
    /// Unwritten bytes of the frames in `tx`.
    tx_bytes: u64,
    /// Staging: starts small and doubles, up to `rx_max`, while reads fill it (a rank
    /// of a big node has a lane to every other rank, most carrying only a few frames).
    rx_buf: Vec<u8>,
    rx_max: usize,
    rx_start: usize,
    rx_end: usize,
    rx: RxState<T>,
    /// The last read of this receive pass came back short.
    drained: bool,
    ledger: Ledger,
    /// Where a small frame above [`STACK_FRAME`] is put together for one send().
    small_tx: Vec<u8>,
    /// The frame [`Link::peek_small`] returned lies in the pipe, not in staging.
    peeked_in_place: bool,
}

impl<P: Pipe, T> StreamLink<P, T> {
    /// A lane over `pipe` that stages up to `staging` bytes per read (many small frames
    /// per read; at least a header's worth).
    pub fn new(pipe: P, caps: Caps, staging: usize) -> StreamLink<P, T> {
        let rx_max = staging.max(2 * MAX_HEADER_LEN);
        StreamLink {
            pipe,
            caps,
            tx: VecDeque::new(),
            tx_bytes: 0,
            rx_buf: vec![0u8; rx_max.min(FIRST_STAGING)],
            rx_max,
            rx_start: 0,
            rx_end: 0,
            rx: RxState::Header,
            drained: false,
            ledger: Ledger::default(),
            small_tx: Vec::new(),
            peeked_in_place: false,
        }
    }

    pub fn pipe(&self) -> &P {
        &self.pipe
    }

    /// Replaces the capabilities (with figures measured on the live lane).
    pub fn set_caps(&mut self, caps: Caps) {
        self.caps = caps;
    }

    /// Writes queued frames until the pipe is full; calls `done` with the token of
    /// every frame completely written. No allocation: the iovec lives on the stack.
    fn write_some(&mut self, mut done: impl FnMut(u64)) -> Result<(), LinkError> {
        self.pipe.flush()?;
        while !self.tx.is_empty() {
            let mut iov = [IoSlice::new(&[]); 2 * MAX_IOV_FRAMES];
            let mut used = 0;
            for f in self.tx.iter().take(MAX_IOV_FRAMES) {
                used += f.pending(&mut iov[used..]);
            }
            let n = self.pipe.write(&iov[..used])?;
            if n == 0 {
                return Ok(());
            }
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
    /// as one contiguous copy: for a socket one send(), cheaper in the kernel than a
    /// two-segment sendmsg() (a pipe that [`Pipe::gathers`] takes both slices);
    /// nothing is queued or reference-counted. Returns the bytes
    /// written (0 when the pipe is full), or `None` when the frame is too large for this path.
    fn send_small_now(&mut self, header: &[u8], payload: &[u8]) -> Result<Option<usize>, LinkError> {
        let total = header.len() + payload.len();
        if total > SMALL_FRAME {
            return Ok(None);
        }
        if self.pipe.gathers() {
            return self.pipe.write_frame(header, payload).map(Some);
        }
        if total <= STACK_FRAME {
            let mut buf = [0u8; STACK_FRAME];
            buf[..header.len()].copy_from_slice(header);
            buf[header.len()..total].copy_from_slice(payload);
            return self.pipe.write(&[IoSlice::new(&buf[..total])]).map(Some);
        }
        self.small_tx.clear();
        self.small_tx.extend_from_slice(header);
        self.small_tx.extend_from_slice(payload);
        self.pipe.write(&[IoSlice::new(&self.small_tx)]).map(Some)
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
            match self.send_small_now(header.as_slice(), bytes) {
                Ok(Some(n)) if n == header.as_slice().len() + bytes.len() => return Ok(true),
                Ok(Some(n)) => written = n,
                Ok(None) => {}
                Err(e) => {
                    // Queued all the same, as a frame the queue failed to write is: the
                    // lane's failover completes its send (`Link::take_queued_tokens`)
                    // when its copy goes again on another lane. Lost here, the send
                    // never completed though its message arrived.
                    let frame = TxFrame {
                        header: *header,
                        payload: keep(),
                        written: 0,
                        token,
                    };
                    self.tx_bytes += frame.total() as u64;
                    self.tx.push_back(frame);
                    return Err(e);
                }
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
            match self.pipe.read(dst)? {
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
        sink.on_payload(token, engine_buf).map_err(LinkError::Protocol)?;
        self.ledger.on_received();
        Ok(true)
    }

    /// The frame at the head of the staging buffer, if it is whole there: its header
    /// and the length of header and payload.
    fn staged_frame(&self) -> Result<Option<(DataRepr, usize, usize)>, LinkError> {
        frame_at(&self.rx_buf[self.rx_start..self.rx_end])
    }

    /// Refills the staging buffer from the pipe. `Ok(false)`: nothing available.
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
        match self.pipe.read(&mut room[..room_len])? {
            Some(n) => {
                self.drained = n < room_len;
                self.rx_end += n;
                // Filled all the room it had: more was probably waiting.
                if n == room_len && room_len < want && self.rx_buf.len() < self.rx_max {
                    let grown = (2 * self.rx_buf.len()).min(self.rx_max);
                    self.rx_buf.resize(grown, 0);
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// The header at the start of `avail` (parsed), its length, and its frame's length;
/// `None` until the whole header is there.
#[inline(always)]
fn frame_at(avail: &[u8]) -> Result<Option<(DataRepr, usize, usize)>, LinkError> {
    if let Some(h) = avail.first_chunk::<MATCH_HEADER_LEN>() {
        if h[0] == Kind::Match as u8 {
            let repr = DataRepr::parse_match(h)?;
            return Ok(Some((
                repr,
                MATCH_HEADER_LEN,
                MATCH_HEADER_LEN + repr.payload_len() as usize,
            )));
        }
    }
    let Some(&kind) = avail.first() else {
        return Ok(None);
    };
    let need = Kind::from_u8(kind).map_err(LinkError::Wire)?.header_len();
    if avail.len() < need {
        return Ok(None);
    }
    let repr = DataRepr::parse(&DataHeader::new_checked(&avail[..need])?);
    Ok(Some((repr, need, need + repr.payload_len() as usize)))
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
        Placement::Engine(v) => crate::copy::copy_into(&mut v[at as usize..], src),
    }
}

impl<P: Pipe, T> Link for StreamLink<P, T> {
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
        self.ledger.on_send(header, bytes);
        self.write_or_queue(
            header,
            bytes,
            || payload.map(|(b, off, len)| (b.clone(), off, len)),
            token,
        )
    }

    #[inline]
    fn send_copy(&mut self, header: &HeaderBytes, payload: &[u8]) -> Result<(), LinkError> {
        let len = payload.len() as u64;
        let keep = || (len > 0).then(|| (Buffer::owned(payload.to_vec()), 0, len));
        self.ledger.on_send(header, payload);
        self.write_or_queue(header, payload, keep, 0).map(|_| ())
    }

    fn flush(&mut self, done: &mut Vec<u64>) -> Result<bool, LinkError> {
        // Two counts: a datagram pipe holds what it took until the peer acknowledges it.
        let (queued, held) = (self.tx_bytes, self.pipe.queued());
        self.write_some(|t| done.push(t))?;
        Ok(self.tx_bytes < queued || self.pipe.queued() < held)
    }

    fn tx_queued(&self) -> u64 {
        self.tx_bytes + self.pipe.queued()
    }

    fn backlog(&mut self) -> u64 {
        self.tx_queued() + self.pipe.unread()
    }

    fn recv<S: Sink<Token = T>>(&mut self, sink: &mut S) -> Result<bool, LinkError> {
        let mut progressed = false;
        self.drained = false;
        self.peeked_in_place = false;
        loop {
            if let RxState::Payload { placed, .. } = self.rx {
                let more = self.fill_payload(sink)?;
                // A read that found the socket empty mid-payload is no progress: said to
                // be, it kept a rank whose large frame trickles in over a WAN from ever
                // sleeping.
                progressed |= !matches!(self.rx, RxState::Payload { placed: now, .. } if now == placed);
                if !more {
                    return Ok(progressed);
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
                sink.on_payload(token, engine_buf).map_err(LinkError::Protocol)?;
                self.ledger.on_received();
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

    #[inline]
    fn peek_small(&mut self) -> Result<Peeked<'_>, LinkError> {
        if !matches!(self.rx, RxState::Header) {
            return Ok(Peeked::Other);
        }
        self.peeked_in_place = false;
        if self.rx_start == self.rx_end {
            // One whole frame in the pipe's own memory: parsed there, copied out once.
            // Where, not the bytes: a frame borrowed from the first look would keep
            // `self` borrowed on the way that stages instead.
            if let Some((at, len)) = self.pipe.peek_in_place() {
                if let Ok(Some((repr, header, total))) = frame_at(self.pipe.in_place(at, len)) {
                    if total == len {
                        self.peeked_in_place = true;
                        return Ok(Peeked::Frame {
                            repr,
                            payload: self.pipe.in_place(at, len).get(header..).unwrap_or_default(),
                            total,
                        });
                    }
                }
            }
        }
        let mut staged = self.staged_frame()?;
        if staged.is_none_or(|(_, _, total)| self.rx_end - self.rx_start < total) {
            self.drained = false;
            if self.stage()? {
                staged = self.staged_frame()?;
            }
        }
        Ok(match staged {
            None => Peeked::Nothing,
            // Staging may not grow to hold it: the general path reads it in place.
            Some((_, _, total)) if total > SMALL_FRAME || total > self.rx_max => Peeked::Other,
            Some((_, _, total)) if self.rx_end - self.rx_start < total => Peeked::Nothing,
            Some((repr, header, total)) => Peeked::Frame {
                repr,
                payload: &self.rx_buf[self.rx_start + header..self.rx_start + total],
                total,
            },
        })
    }

    #[inline]
    fn take_peeked(&mut self, total: usize) -> bool {
        if std::mem::take(&mut self.peeked_in_place) {
            self.pipe.take_in_place();
            self.ledger.on_received();
            return false;
        }
        debug_assert!(
            self.rx_end - self.rx_start >= total,
            "a frame peek_small returned"
        );
        self.rx_start += total;
        self.ledger.on_received();
        self.rx_start < self.rx_end
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.pipe.fd()
    }
    fn watch_while_sleeping(&self) -> bool {
        self.pipe.watch_while_sleeping()
    }
    fn wake_within(&self) -> Option<std::time::Duration> {
        self.pipe.wake_within()
    }

    fn polled(&self) -> bool {
        self.pipe.polled()
    }

    #[inline]
    fn quiet(&self) -> bool {
        self.rx_start == self.rx_end && matches!(self.rx, RxState::Header) && self.pipe.quiet()
    }

    fn signalled(&self) -> bool {
        self.pipe.signalled()
    }

    fn arm_wakeup(&mut self) -> bool {
        // What is staged is never a whole frame (`recv` hands those out before it returns),
        // so only the pipe can have something the rank should wake for.
        self.pipe.arm_wakeup()
    }

    fn service_wakeup(&mut self) -> Result<(), LinkError> {
        self.pipe.service_wakeup()
    }

    fn check_path(&self, stall_ms: u32) -> Result<Option<PathFigures>, LinkError> {
        self.pipe.check_path(stall_ms)
    }

    fn abandon_payload(&mut self, buf: &Buffer) {
        if let RxState::Payload { placement, .. } = &mut self.rx {
            if matches!(placement, Placement::User { buf: b, .. } if b.same_memory(buf)) {
                *placement = Placement::None;
            }
        }
    }

    fn ledger(&mut self) -> &mut Ledger {
        &mut self.ledger
    }

    fn take_queued_tokens(&mut self, done: &mut Vec<u64>) {
        done.extend(self.tx.drain(..).map(|f| f.token).filter(|&t| t != 0));
        self.tx_bytes = 0;
    }

    fn take_partial(&mut self) -> Option<T> {
        match std::mem::replace(&mut self.rx, RxState::Header) {
            RxState::Payload { token, .. } => Some(token),
            RxState::Header => None,
        }
    }
}
