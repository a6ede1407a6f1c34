//! A peer that could not be reached: why (what each transport tried and how it failed,
//! what the NATs and relays suggest), told to the launcher so that the peer learns it too.

use proto::Rank;
use transport::Transport;

use super::connect::FIRST_LANE_ORDER;
use super::Runtime;
use crate::fabric::Refusal;
use net::EndpointCard;

impl Runtime {
    /// Why `peer` could not be reached: what was tried and how each failed, and, between
    /// nodes, what would help.
    pub(super) fn unreachable_cause(&mut self, peer: Rank, yielded: bool) -> String {
        let refused: Vec<String> = FIRST_LANE_ORDER
            .into_iter()
            .filter_map(|t| self.dialing.refusals.of(peer, t))
            .filter(|r| !r.expected)
            .map(Refusal::to_string)
            .collect();
        let mut report = refused.join("; ");
        if report.trim().is_empty() {
            report = if yielded {
                "no address of ours was tried: both ranks connected at once and ours gave way, \
                 but the peer's connection never completed"
                    .into()
            } else {
                "no connection attempt of ours finished in time, and none came from the peer".into()
            };
        }
        let timeout = format!(
            "no connection with rank {peer} within {} ms ({})",
            self.cfg.connect_timeout.as_millis(),
            self.cfg.timeout_source("PONTOON_CONNECT_TIMEOUT_MS")
        );
        if self.job.cards.same_node(peer, self.job.id.rank) {
            // Relays and NATs are no answer between two processes of one host.
            return format!(
                "{timeout}: {report}. Rank {peer} runs on this host: it is overloaded or stopped \
                 (PONTOON_LOG=debug on both ranks shows the handshake)"
            );
        }
        let (nat, relay) = (self.nat_note(peer), self.relay_note(peer));
        if self.cfg.transports.contains(&Transport::Tcp) {
            // Doctor lists TCP as refused, with what the notes say would help.
            let mut tcp = self
                .dialing
                .refusals
                .of(peer, Transport::Tcp)
                .cloned()
                .unwrap_or_else(|| Refusal::new(Transport::Tcp, report.clone()));
            let help: Vec<&str> = nat.iter().chain(&relay).map(String::as_str).collect();
            if !help.is_empty() {
                tcp.help = Some(help.join(". "));
            }
            self.dialing.refusals.record(peer, tcp);
        }
        let nat = nat.map(|n| format!("; {n}")).unwrap_or_default();
        let relay = relay.map(|r| format!(". {r}")).unwrap_or_default();
        format!("{timeout}: {report}{nat}{relay}")
    }

    /// Tells the launcher that `peer` could not be reached, so that `peer` learns it too
    /// and its operations with this rank fail instead of waiting for it forever.
    pub(super) fn report_unreachable(&mut self, peer: Rank, cause: &str) {
        if let Some(rendezvous) = self.job.rendezvous.as_mut() {
            if let Err(e) = rendezvous.unreachable(peer, cause) {
                tracing::warn!(
                    "rank {}: cannot tell the launcher about rank {peer}: {e}",
                    self.job.id.rank
                );
            }
        }
    }

    /// What the coordinator saw of the NATs between it and the two ranks, when they differ:
    /// the likely reason why private addresses led nowhere.
    fn nat_note(&self, peer: Rank) -> Option<String> {
        let nat = |r: Rank| self.job.cards.get(r).and_then(EndpointCard::nat);
        let seen = |n: Option<std::net::IpAddr>| match n {
            Some(ip) => format!("behind NAT {ip}"),
            None => "directly".to_string(),
        };
        let (mine, theirs) = (nat(self.job.id.rank), nat(peer));
        if mine == theirs {
            return None;
        }
        Some(format!(
            "the launcher's coordinator sees this rank {} and rank {peer} {}: probably \
             different private networks",
            seen(mine),
            seen(theirs)
        ))
    }

    /// What relays could do for `peer`, or why they did not.
    fn relay_note(&self, peer: Rank) -> Option<String> {
        let theirs = self.job.cards.get(peer).map_or(0, |c| c.relays.len());
        if theirs > 0 {
            return None; // its relays were tried: the report says how each failed
        }
        let mut note = format!(
            "Rank {peer} is registered with no relay: between different private networks, run \
             `pontoon relay` on the front-end node of its cluster (`pontoon run --relay HOST`, or \
             PONTOON_RELAYS for relays already running), or give both sites IPv6"
        );
        if self.cfg.relays.is_empty() {
            note.push_str(" (this job has no relays)");
        } else {
            note.push_str(&format!(
                " (none of this job's {} relay(s) can reach rank {peer} back; PONTOON_LOG=info \
                 on it says why)",
                self.cfg.relays.len()
            ));
        }
        Some(note)
    }
}
