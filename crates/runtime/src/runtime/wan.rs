//! WAN streams as the event loop opens them (`fabric::tcp::wan` says why they exist).

use std::net::IpAddr;

use proto::Rank;

use super::Runtime;
use crate::fabric::tcp::wan::{nic_rate, tcp_window_limit};

impl Runtime {
    /// The first lane to `peer`, from `local` to `remote`, is a WAN lane: opens the
    /// further streams of its path (`PONTOON_WAN_STREAMS`, else [`proto::caps::parallel_streams`]).
    pub(super) fn open_wan_streams(&mut self, peer: Rank, local: IpAddr, remote: IpAddr, rtt_ns: u64) {
        let Some(device) = self
            .job
            .cards
            .get(self.job.id.rank)
            .and_then(|c| c.ifaces.iter().find(|i| i.addrs.contains(&local)))
            .map(|i| i.name.clone())
        else {
            return;
        };
        // The peer's listening address on the first lane's IP (an accepted lane's remote
        // port is the peer's ephemeral one).
        let Some(cand) = crate::fabric::tcp::candidates(&self.cfg, &self.job.cards, self.job.id.rank, peer)
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
