//! Messages a node-local receiver reads straight out of the sender's memory
//! (`transport::shm::cma`): the engine asks for each with `Output::Pull`; the runtime
//! gathers those of one pass over the engine's outputs and reads them with one system
//! call per peer, then reports each (`Endpoint::pulled`). A read that fails goes again
//! alone, which says why, and the engine then has the message sent through the ring.

use proto::{Rank, ReqId};

use super::Runtime;

/// One `Output::Pull`: the peer, the receive, and where and how long the message is.
pub(super) type Pull = (Rank, ReqId, u64, u64);

impl Runtime {
    /// Reads every gathered pull, the ones of one peer together, and reports each.
    pub(super) fn read_pulls(&mut self) {
        let mut pulls = std::mem::take(&mut self.passes.pulls);
        for group in pulls.chunk_by(|a, b| a.0 == b.0) {
            let peer = group[0].0;
            let whole = match self.fabrics.shm.pid_of(peer) {
                Some(pid) => {
                    let parts: Vec<_> = group
                        .iter()
                        .map_while(|&(_, req, at, len)| self.reqs.get(req).map(|r| (&r.buf, at, len)))
                        .collect();
                    transport::shm::cma::read_many(pid, &parts)
                }
                None => 0,
            };
            for (i, &(_, req, at, len)) in group.iter().enumerate() {
                let ok = i < whole || self.read_one(peer, req, at, len);
                self.ep.pulled(req, ok);
            }
        }
        pulls.clear();
        self.passes.pulls = pulls;
    }

    /// Reads one message alone: whether it worked (a failure is logged).
    fn read_one(&self, peer: Rank, req: ReqId, at: u64, len: u64) -> bool {
        let read = match (self.reqs.get(req), self.fabrics.shm.pid_of(peer)) {
            (Some(r), Some(pid)) => transport::shm::cma::read_into(pid, at, &r.buf, len),
            _ => Err(std::io::Error::other("no request or pid")),
        };
        if let Err(e) = &read {
            tracing::debug!(
                "rank {}: one-copy read from rank {peer} failed ({e}): by the ring",
                self.job.id.rank
            );
        }
        read.is_ok()
    }
}
