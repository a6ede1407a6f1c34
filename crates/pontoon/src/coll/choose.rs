//! The one place that chooses between the flat algorithms and the site-aware ones: a
//! communicator spanning two or more sites (declared, or inferred from the endpoint
//! cards: `net::sites`) runs the
//! site-aware barrier, bcast, reduce (commutative), allreduce (commutative), gather,
//! scatter, allgather(v) and alltoall (long blocks), unless `PONTOON_COLL_HIER=0`.

use std::rc::Rc;

use super::algos::{self, Shape, Tuning};
use super::hier::{self, Sites};
use super::schedule::{BufId, Region, Schedule, INPUT, OUTPUT};
use crate::comm::Comm;
use crate::Rank;

impl Comm<'_> {
    /// The sites of this communicator's ranks, when it spans two or more and the
    /// site-aware algorithms are on.
    pub(crate) fn sites(&self) -> Option<Rc<Sites>> {
        // Looking up every member's site took a rank of 256 as long as its part of a
        // short alltoall: the cards are cold by then.
        if !self.tuning().site_aware || !self.u.sited() {
            return None;
        }
        self.d
            .sites
            .get_or_init(|| {
                let names: Vec<Option<String>> =
                    self.d.group.members().iter().map(|&w| self.u.site(w)).collect();
                Sites::from_names(&names).map(Rc::new)
            })
            .clone()
    }

    /// How many sites this communicator's collectives are site-aware across (`None`:
    /// they run flat).
    pub fn site_count(&self) -> Option<u32> {
        self.sites().map(|s| s.count())
    }

    pub(crate) fn barrier_schedule(&self) -> Schedule {
        match self.sites() {
            Some(sites) => hier::barrier(self.shape(), &sites, &self.tuning()),
            None => algos::barrier(self.shape()),
        }
    }

    pub(crate) fn bcast_schedule(&self, root: Rank, buf: BufId, n: usize) -> Schedule {
        match self.sites() {
            Some(sites) => hier::bcast(self.shape(), &sites, root, buf, n, &self.tuning()),
            None => algos::bcast(self.shape(), root, buf, n, &self.tuning()),
        }
    }

    pub(crate) fn reduce_schedule(
        &self,
        root: Rank,
        src: BufId,
        dst: BufId,
        n: usize,
        commutative: bool,
    ) -> Schedule {
        match self.sites().filter(|_| commutative) {
            Some(sites) => hier::reduce(self.shape(), &sites, root, src, dst, n),
            None => algos::reduce(self.shape(), root, src, dst, n, commutative),
        }
    }

    pub(crate) fn allreduce_schedule(
        &self,
        src: BufId,
        dst: BufId,
        n: usize,
        elem: usize,
        commutative: bool,
    ) -> Schedule {
        // Sites that are aligned power-of-two blocks of ranks make recursive doubling and
        // halving hierarchical already: their partners nearer than a site's size share it.
        match self.sites().filter(|s| commutative && !s.aligned_blocks()) {
            Some(sites) => hier::allreduce(self.shape(), &sites, src, dst, n, elem, &self.tuning()),
            None => algos::allreduce(self.shape(), src, dst, n, elem, commutative, &self.tuning()),
        }
    }

    pub(crate) fn allgather_schedule(&self, src: Option<BufId>, dst: BufId, n: usize) -> Schedule {
        match self.sites() {
            Some(sites) => hier::allgather(self.shape(), &sites, src, dst, n, &self.tuning()),
            None => algos::allgather(self.shape(), src, dst, n, &self.tuning()),
        }
    }

    pub(crate) fn gather_schedule(&self, root: Rank, src: Option<BufId>, n: usize) -> Schedule {
        match self.sites() {
            Some(sites) => hier::gather(self.shape(), &sites, root, src, OUTPUT, n, &self.tuning()),
            None => algos::gather(self.shape(), root, src, OUTPUT, n, &self.tuning()),
        }
    }

    pub(crate) fn scatter_schedule(&self, root: Rank, dst: Option<BufId>, n: usize) -> Schedule {
        match self.sites() {
            Some(sites) => hier::scatter(self.shape(), &sites, root, INPUT, dst, n, &self.tuning()),
            None => algos::scatter(self.shape(), root, INPUT, dst, n, &self.tuning()),
        }
    }

    pub(crate) fn allgatherv_schedule(&self, src: Option<Region>, blocks: &[(usize, usize)]) -> Schedule {
        match self.sites() {
            Some(sites) => hier::allgatherv(self.shape(), &sites, src, OUTPUT, blocks, &self.tuning()),
            None => algos::allgatherv(self.shape(), src, OUTPUT, blocks),
        }
    }

    /// `src` None: in place (the send blocks are the receive blocks, in the output).
    /// Flat across sites too: each rank knows only its own blocks' lengths, so leaders
    /// could not gather them without a round of their own.
    pub(crate) fn alltoallv_schedule(
        &self,
        src: Option<BufId>,
        send: &[(usize, usize)],
        recv: &[(usize, usize)],
    ) -> Schedule {
        let long = recv.iter().map(|b| b.1).max().unwrap_or(0) >= self.tuning().alltoall_long;
        algos::alltoallv(self.shape(), src, send, OUTPUT, recv, long)
    }

    pub(crate) fn alltoall_schedule(&self, src: Option<BufId>, n: usize) -> Schedule {
        alltoall(self.shape(), self.sites().as_deref(), src, n, &self.tuning())
    }
}

/// Alltoall with `n` bytes per peer; site-aware for long blocks while what two sites'
/// leaders swap stays within [`hier::LEADER_EXCHANGE_MAX`]. Across sites, short blocks
/// go all at once (one WAN latency), not by Bruck's log₂ p rounds in sequence.
pub(super) fn alltoall(
    sh: Shape,
    sites: Option<&Sites>,
    src: Option<BufId>,
    n: usize,
    t: &Tuning,
) -> Schedule {
    match sites {
        Some(sites) if n >= t.alltoall_long && sites.largest_exchange(n) <= hier::LEADER_EXCHANGE_MAX => {
            hier::alltoall(sh, sites, src, OUTPUT, n, t)
        }
        Some(_) => algos::alltoall(
            sh,
            src,
            OUTPUT,
            n,
            &Tuning {
                alltoall_short: 0,
                ..*t
            },
        ),
        None => algos::alltoall(sh, src, OUTPUT, n, t),
    }
}
