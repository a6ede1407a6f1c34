//! WAN paths: a TCP lane whose round trip is long ([`proto::Caps::is_wan`]) gets parallel
//! streams to the same address, opened by the lower rank of the pair as further lanes of
//! the path, and its sockets keep little unsent data in the kernel, so that the engine
//! sees each stream's real backlog and hands fragments to the streams that drain.

use std::net::IpAddr;

use proto::Rank;
use transport::tcp::TcpPipe;

use super::Runtime;

/// Unsent bytes a WAN lane's socket may hold (`TCP_NOTSENT_LOWAT`). Without a bound the
/// kernel's autotuned send buffer takes tens of MiB per stream at once, the split of a
/// transfer over the streams is fixed when it starts, and the slowest stream ends it;
/// 256 KiB is 2 ms at 1 Gbit/s, far more than a progress pass.
pub(super) const WAN_UNSENT: u32 = 256 << 10;

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
fn nic_rate(name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{name}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&mbit| mbit > 0)
        .map_or(1_250_000_000, |mbit| mbit as u64 * 125_000)
}

/// Bounds the unsent data of a WAN lane's socket ([`WAN_UNSENT`]).
pub(super) fn limit_unsent(pipe: &TcpPipe) {
    if let Err(e) = pipe.limit_unsent(WAN_UNSENT) {
        tracing::warn!("cannot bound a WAN lane's unsent data (TCP_NOTSENT_LOWAT): {e}");
    }
}

impl Runtime {
    /// The first lane to `peer`, from `local` to `remote`, is a WAN lane: opens the
    /// further streams of its path (`PONTOON_WAN_STREAMS`, else [`proto::caps::parallel_streams`]).
    pub(super) fn open_wan_streams(&mut self, peer: Rank, local: IpAddr, remote: IpAddr, rtt_ns: u64) {
        let Some(device) = self
            .cards
            .get(self.id.rank)
            .and_then(|c| c.ifaces.iter().find(|i| i.addrs.contains(&local)))
            .map(|i| i.name.clone())
        else {
            return;
        };
        // The peer's listening address on the first lane's IP (an accepted lane's remote
        // port is the peer's ephemeral one).
        let Some(cand) = self
            .candidates_for(peer)
            .into_iter()
            .find(|c| c.kind == net::PathKind::Direct && c.addr.ip() == remote)
        else {
            return;
        };
        let streams = self.cfg.wan_streams.unwrap_or_else(|| {
            proto::caps::parallel_streams(rtt_ns, nic_rate(&device), tcp_window_limit(self.cfg.sockbuf))
        });
        tracing::debug!(peer, streams, rtt_ns, "a WAN path: opening its further streams");
        for _ in 1..streams {
            let plan = net::paths::LanePlan {
                device: device.clone(),
                candidates: vec![cand],
            };
            self.dial_lane(peer, plan);
        }
    }
}
