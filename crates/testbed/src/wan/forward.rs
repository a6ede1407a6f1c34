//! The I/O half of the WAN emulator: one thread, two packet sockets, a delay line per
//! direction, buffers recycled through a pool.
//!
//! Timing: a frame's delay counts from the kernel's receive timestamp, so the loop's own
//! wake-up latency does not add to it, and arrivals that cannot be due soon may wait in
//! the socket buffer to be read in batches. Departures are precise because the loop
//! wakes a little early (by the wake-up lateness it has observed) and spins to the due
//! time. Spinning is capped to a share of the CPU; beyond it (a busy link) the loop
//! sleeps and lets due frames gather for ~50 µs, like a NIC's interrupt moderation,
//! because there the endpoints need the CPU more than frames need µs precision.

use std::io;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rustix::event::{PollFd, PollFlags, Timespec};
use transport::packet::{PacketSocket, RxMeta, MAX_BATCH, VNET_HDR_LEN};

use super::{DelayLine, DirStats, DropReason, Impairment, Verdict, WanConfig, WanStats};

/// Polls sleep at most this long, so `stop` is noticed.
const MAX_SLEEP_NS: u64 = 50_000_000;
/// Longest sleep that ignores arrivals: bounds what piles up in the socket buffers.
const MAX_BLIND_NS: u64 = 2_000_000;
/// Shorter sleeps wake on arrivals instead.
const MIN_BLIND_NS: u64 = 50_000;
/// Receive batches per direction before due frames get their turn.
const RX_ROUNDS: usize = 4;
/// A kernel timestamp older than this is not believed (clock step): the frame counts
/// as arriving when read.
const MAX_STAMP_AGE_NS: u64 = 1_000_000_000;
/// Spinning may take this share (1/n) of each window of `SPIN_WINDOW_NS`.
const SPIN_SHARE: u64 = 10;
const SPIN_WINDOW_NS: u64 = 20_000_000;
/// Bounds of how early the loop wakes to spin to a due time.
const MIN_EARLY_NS: u64 = 20_000;
const MAX_EARLY_NS: u64 = 300_000;
/// Extra wait for due frames to gather once the spin budget is spent.
const COALESCE_NS: u64 = 50_000;
/// Departures later than this count in [`WanStats::late_frames`].
const LATE_NS: u64 = 100_000;

/// Forwards frames between `cfg.a` and `cfg.b` with the configured impairments until
/// `stop` is set. Needs root (`CAP_NET_RAW`) in the namespace holding both interfaces.
pub fn run(cfg: &WanConfig, stop: &AtomicBool) -> io::Result<WanStats> {
    Wan::open(cfg)?.run(stop)
}

/// An emulator whose sockets are bound but which does not forward yet: frames arriving
/// meanwhile wait (timestamped) in the socket buffers. Lets a caller report readiness,
/// or a bad interface, before [`Wan::run`] takes over the thread.
pub struct Wan {
    cfg: WanConfig,
    socks: [PacketSocket; 2],
}

impl Wan {
    /// Checks `cfg` and opens both interfaces. Needs root (`CAP_NET_RAW`).
    pub fn open(cfg: &WanConfig) -> io::Result<Wan> {
        cfg.validate()?;
        let socks = [PacketSocket::bind(&cfg.a)?, PacketSocket::bind(&cfg.b)?];
        for s in &socks {
            s.enable_vnet_hdr()?;
        }
        Ok(Wan {
            cfg: cfg.clone(),
            socks,
        })
    }

    /// Forwards until `stop` is set; returns the counters.
    pub fn run(self, stop: &AtomicBool) -> io::Result<WanStats> {
        forward(&self.cfg, self.socks, stop)
    }
}

fn forward(cfg: &WanConfig, socks: [PacketSocket; 2], stop: &AtomicBool) -> io::Result<WanStats> {
    // Sub-millisecond delays need sleeps that end on time, not 50 µs later.
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1));
    let mtu = socks[0].mtu().unwrap_or(1500).max(socks[1].mtu().unwrap_or(1500));
    // Ethernet header, a VLAN tag and the virtio header.
    let size = (mtu + 18 + VNET_HDR_LEN).next_multiple_of(64);
    // Each direction holds at most `limit` frames (staged ones included); one receive
    // batch is in hand.
    let cap = 2 * cfg.limit_packets + 3 * MAX_BATCH;
    let mut fw = Forwarder {
        socks,
        dirs: [0u64, 1].map(|i| Dir {
            model: Impairment::new(cfg, i),
            line: DelayLine::default(),
            out: Vec::with_capacity(MAX_BATCH),
            stats: DirStats::default(),
        }),
        pool: Pool {
            free: Vec::with_capacity(cap),
            size,
            allocated: 0,
            cap,
        },
        rx: Vec::with_capacity(MAX_BATCH),
        meta: [RxMeta::default(); MAX_BATCH],
        stats: WanStats::default(),
        t0: Instant::now(),
        pacer: Pacer {
            early_ns: 50_000,
            ..Pacer::default()
        },
        stamps_ok: false,
    };
    while !stop.load(Relaxed) {
        let mut more = false;
        for d in 0..2 {
            more |= fw.receive(d)?;
        }
        let now = fw.clock();
        let mut sent = false;
        for d in 0..2 {
            sent |= fw.transmit(d, now);
        }
        if sent {
            fw.pacer.stop_spin(now);
        }
        if more {
            continue;
        }
        let next = fw.dirs.iter().filter_map(|d| d.line.next_at()).min();
        let Some(sleep) = fw.pacer.plan(now, next) else {
            continue; // spin to the next departure
        };
        // While frames are held and no new arrival can be due for a while, arrivals can
        // wait in the socket buffers (their timestamps keep their delay exact): sleep
        // on the timer alone and take them in batches, instead of waking for each.
        let stuck = fw.dirs.iter().any(|d| !d.out.is_empty());
        let mut blind_for = 0;
        if next.is_some() && fw.stamps_ok && !stuck {
            let t = Duration::from_nanos(now);
            let guard = fw
                .dirs
                .iter()
                .map(|d| d.model.earliest_departure(t))
                .min()
                .unwrap_or(t);
            blind_for = (guard.as_nanos() as u64).saturating_sub(now).min(MAX_BLIND_NS);
        }
        if blind_for >= MIN_BLIND_NS {
            fw.sleep(sleep.min(blind_for), true)?;
        } else {
            fw.sleep(sleep, false)?;
        }
    }
    for d in 0..2 {
        fw.dirs[d].stats.dropped_rcvbuf += fw.socks[d].take_drops().unwrap_or(0);
    }
    let Forwarder {
        dirs,
        mut stats,
        pacer,
        ..
    } = fw;
    stats.spin_ns = pacer.total_spun;
    [stats.a_to_b, stats.b_to_a] = dirs.map(|d| d.stats);
    Ok(stats)
}

struct Forwarder {
    socks: [PacketSocket; 2],
    /// `dirs[0]` goes from `socks[0]` to `socks[1]`, `dirs[1]` back.
    dirs: [Dir; 2],
    pool: Pool,
    /// Empty buffers for the next receive batch.
    rx: Vec<Box<[u8]>>,
    meta: [RxMeta; MAX_BATCH],
    stats: WanStats,
    t0: Instant,
    pacer: Pacer,
    /// The last frame read had a kernel timestamp, so its arrival time is known
    /// however late it is read.
    stamps_ok: bool,
}

/// One direction of the running emulator.
struct Dir {
    model: Impairment,
    line: DelayLine,
    /// Due frames not yet accepted by the egress socket.
    out: Vec<Out>,
    stats: DirStats,
}

impl Forwarder {
    /// Monotonic ns since start.
    fn clock(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Reads what has arrived on `socks[d]` into the delay line; returns whether more
    /// may be waiting.
    fn receive(&mut self, d: usize) -> io::Result<bool> {
        for _ in 0..RX_ROUNDS {
            while self.rx.len() < MAX_BATCH {
                match self.pool.get() {
                    Some(b) => self.rx.push(b),
                    None => break,
                }
            }
            if self.rx.is_empty() {
                return Ok(false); // cannot happen: the pool covers every limit
            }
            self.stats.recv_calls += 1;
            let n = match self.socks[d].recv_batch(&mut self.rx, &mut self.meta) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io_context(e, self.socks[d].ifname(), "receive")),
            };
            let now = self.clock();
            let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
            let dir = &mut self.dirs[d];
            // The filled buffers are at the front; the empty rest stays for next time.
            for (buf, m) in self.rx.drain(..n).zip(&self.meta[..n]) {
                self.stamps_ok = m.stamp.is_some();
                let age = m.stamp.map_or(0, |s| real.saturating_sub(s).as_nanos() as u64);
                let arrival = now.saturating_sub(if age > MAX_STAMP_AGE_NS { 0 } else { age });
                admit(dir, &mut self.pool, buf, m.len, arrival);
            }
            if n < MAX_BATCH {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Sends the frames of `dirs[d]` that are due; returns whether any went.
    fn transmit(&mut self, d: usize, now: u64) -> bool {
        let (dir, sock) = (&mut self.dirs[d], &self.socks[1 - d]);
        let mut any = false;
        loop {
            while dir.out.len() < MAX_BATCH {
                let Some(h) = dir.line.pop_due(now) else { break };
                let late = now - h.at;
                self.stats.late_frames += u64::from(late > LATE_NS);
                self.stats.max_late_ns = self.stats.max_late_ns.max(late);
                dir.out.push(Out(h.buf, h.len));
            }
            if dir.out.is_empty() {
                return any;
            }
            self.stats.send_calls += 1;
            let sent = match sock.send_batch(&dir.out) {
                Ok(n) => n,
                // The socket buffer is full: keep the batch, sleep() waits for room.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return any,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // This frame cannot go (too big, no buffers, link down): drop it alone.
                Err(_) => {
                    dir.stats.dropped_send += 1;
                    let Out(buf, _) = dir.out.remove(0);
                    self.pool.free.push(buf);
                    continue;
                }
            };
            any = true;
            for Out(buf, len) in dir.out.drain(..sent) {
                dir.stats.tx_frames += 1;
                dir.stats.tx_bytes += (len - VNET_HDR_LEN) as u64;
                self.pool.free.push(buf);
            }
        }
    }

    /// Waits up to `ns`, or less if frames arrive (unless `blind`) or room to send
    /// stuck ones appears.
    fn sleep(&mut self, ns: u64, blind: bool) -> io::Result<()> {
        let mut fds = [0, 1].map(|i| {
            // Room on socks[i] matters when frames headed there are stuck.
            let stuck = !self.dirs[1 - i].out.is_empty();
            let flags = if stuck {
                PollFlags::IN | PollFlags::OUT
            } else {
                PollFlags::IN
            };
            PollFd::new(&self.socks[i], flags)
        });
        let ts = Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as i64,
        };
        self.stats.polls += 1;
        let start = self.clock();
        let fds = if blind { &mut fds[..0] } else { &mut fds[..] };
        match rustix::event::poll(fds, Some(&ts)) {
            Ok(0) => self.pacer.woke((self.clock() - start).saturating_sub(ns)),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(io_context(e.into(), self.socks[0].ifname(), "poll")),
        }
        Ok(())
    }
}

fn io_context(e: io::Error, ifname: &str, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("WAN emulator on {ifname}: {what}: {e}"))
}

/// Runs one received frame (virtio header first) through the model: into the delay
/// line or back to the pool.
fn admit(dir: &mut Dir, pool: &mut Pool, buf: Box<[u8]>, len: usize, arrival: u64) {
    let wire_len = len.saturating_sub(VNET_HDR_LEN);
    dir.stats.rx_frames += 1;
    dir.stats.rx_bytes += wire_len as u64;
    if len > buf.len() || len <= VNET_HDR_LEN {
        dir.stats.dropped_oversize += 1;
        pool.free.push(buf);
        return;
    }
    let held = dir.line.len() + dir.out.len();
    match dir.model.on_frame(Duration::from_nanos(arrival), wire_len, held) {
        Verdict::Drop(DropReason::Loss) => {
            dir.stats.dropped_loss += 1;
            pool.free.push(buf);
        }
        Verdict::Drop(DropReason::Limit) => {
            dir.stats.dropped_limit += 1;
            pool.free.push(buf);
        }
        Verdict::SendAt(at) => dir.line.push(at.as_nanos() as u64, buf, len),
    }
}

/// Frame buffers of one size, allocated on first need up to a cap, then recycled: no
/// allocation per frame, and memory grows only as far as the delay line does.
struct Pool {
    free: Vec<Box<[u8]>>,
    size: usize,
    allocated: usize,
    cap: usize,
}

impl Pool {
    fn get(&mut self) -> Option<Box<[u8]>> {
        if let Some(b) = self.free.pop() {
            return Some(b);
        }
        if self.allocated >= self.cap {
            return None;
        }
        self.allocated += 1;
        Some(vec![0u8; self.size].into_boxed_slice())
    }
}

/// A frame staged for `sendmmsg`.
struct Out(Box<[u8]>, usize);

impl AsRef<[u8]> for Out {
    fn as_ref(&self) -> &[u8] {
        &self.0[..self.1]
    }
}

/// Decides, when there is nothing to do right now, whether to spin or sleep.
#[derive(Default)]
struct Pacer {
    /// How long before a due time to stop sleeping: the observed wake-up lateness.
    early_ns: u64,
    /// Moving average of how late poll() timeouts end.
    late_avg_ns: u64,
    window_start: u64,
    spun_in_window: u64,
    total_spun: u64,
    spinning_since: Option<u64>,
}

impl Pacer {
    /// `None`: spin (loop again at once); `Some(ns)`: sleep that long at most.
    fn plan(&mut self, now: u64, next: Option<u64>) -> Option<u64> {
        if now - self.window_start > SPIN_WINDOW_NS {
            self.window_start = now;
            self.spun_in_window = 0;
        }
        let Some(next) = next else {
            self.stop_spin(now);
            return Some(MAX_SLEEP_NS);
        };
        let wait = next.saturating_sub(now);
        let budget_left = self.spun_in_window < SPIN_WINDOW_NS / SPIN_SHARE;
        if wait <= self.early_ns && budget_left {
            self.spinning_since.get_or_insert(now);
            return None;
        }
        self.stop_spin(now);
        // Out of spin budget, the link is busy: let due frames gather for a batch, as
        // a NIC's interrupt moderation would, instead of waking for each.
        Some(
            if budget_left {
                wait - self.early_ns
            } else {
                wait + COALESCE_NS
            }
            .min(MAX_SLEEP_NS),
        )
    }

    /// Work arrived or a sleep begins: account for the spin that ends.
    fn stop_spin(&mut self, now: u64) {
        if let Some(since) = self.spinning_since.take() {
            let spun = now.saturating_sub(since);
            self.spun_in_window += spun;
            self.total_spun += spun;
        }
    }

    /// A poll() timeout ended `late_ns` after it should have.
    fn woke(&mut self, late_ns: u64) {
        self.late_avg_ns = (self.late_avg_ns * 7 + late_ns.min(MAX_EARLY_NS)) / 8;
        self.early_ns = (2 * self.late_avg_ns + 10_000).clamp(MIN_EARLY_NS, MAX_EARLY_NS);
    }
}
