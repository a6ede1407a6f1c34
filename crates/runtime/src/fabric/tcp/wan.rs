//! WAN paths: a TCP lane whose round trip is long ([`proto::Caps::is_wan`]) gets parallel
//! streams to the same address, opened by the lower rank of the pair as further lanes of
//! the path, and its sockets keep little unsent data in the kernel, so that the engine
//! sees each stream's real backlog and hands fragments to the streams that drain.

use transport::tcp::TcpPipe;

/// Unsent bytes a WAN lane's socket may hold (`TCP_NOTSENT_LOWAT`). Without a bound the
/// kernel's autotuned send buffer takes tens of MiB per stream at once, the split of a
/// transfer over the streams is fixed when it starts, and the slowest stream ends it;
/// 256 KiB is 2 ms at 1 Gbit/s, far more than a progress pass.
pub(crate) const WAN_UNSENT: u32 = 256 << 10;

/// What one TCP socket may have in flight at most: the kernel's autotuning limits
/// (`net.ipv4.tcp_wmem` and `tcp_rmem`, whose receive window is about half the buffer),
/// or the buffers `PONTOON_SOCKBUF` fixes.
pub fn tcp_window_limit(sockbuf: usize) -> u64 {
    if sockbuf > 0 {
        return sockbuf as u64 / 2;
    }
    let max = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{name}"))
            .ok()
            .and_then(|s| s.split_whitespace().nth(2)?.parse::<u64>().ok())
    };
    match (max("tcp_wmem"), max("tcp_rmem")) {
        (Some(w), Some(r)) => w.min(r / 2),
        _ => 4 << 20, // Linux's default tcp_wmem limit
    }
}

/// Bytes per second the interface `name` sends (its link speed), or 10 Gbit/s where the
/// kernel does not know (virtual interfaces, some drivers).
pub(crate) fn nic_rate(name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&mbit| mbit > 0)
        .map_or(1_250_000_000, |mbit| mbit as u64 * 125_000)
}

/// Bounds the unsent data of a WAN lane's socket ([`WAN_UNSENT`]).
pub(crate) fn limit_unsent(pipe: &TcpPipe) {
    if let Err(e) = pipe.limit_unsent(WAN_UNSENT) {
        tracing::warn!("cannot bound a WAN lane's unsent data (TCP_NOTSENT_LOWAT): {e}");
    }
}
