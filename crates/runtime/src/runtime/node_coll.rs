//! The node's collectives as the event loop runs them (the area's state is
//! `fabric::shm::coll`).

use std::time::Duration;

use proto::dial::Deadline;
use proto::{Failure, Rank};

use super::sleep::Idle;
use super::{Error, Runtime};
use crate::clock;
use crate::fabric::shm::coll::{Await, NodeMembers};
use transport::shm::COLL_PHASES;

impl Runtime {
    /// `Some` when `members` (job ranks, in communicator order) are exactly this node's
    /// ranks and the node's collective area serves them: every rank of the node joined
    /// the segment. Waits until that is settled (the leader settles it when it stops
    /// waiting for joins at the latest), so every member decides alike.
    pub fn node_members(&mut self, members: &[Rank]) -> Option<NodeMembers> {
        let n = self.fabrics.shm.local.len();
        if n < 2 || members.len() != n {
            return None;
        }
        // Members of a communicator are distinct: n of this node's ranks are all of them.
        let slots = members
            .iter()
            .map(|&r| self.fabrics.shm.index(r))
            .collect::<Option<Vec<usize>>>()?;
        // A rank still joining waits for its join (which has its own deadline).
        let give_up = Deadline::after(clock::now(), clock::nanos(2 * self.cfg.connect_timeout));
        loop {
            if !self.fabrics.shm.joining() {
                let verdict = self.fabrics.shm.node()?.collectives_verdict();
                if let Some(serves) = verdict {
                    return serves.then_some(NodeMembers { slots });
                }
                if give_up.passed(clock::now()) {
                    // The leader may be gone: settle it here rather than wait on.
                    let node = self.fabrics.shm.node()?;
                    let serves = node.decide_collectives(false);
                    node.wake_all();
                    return serves.then_some(NodeMembers { slots });
                }
            }
            if !self.progress() {
                self.sleep(super::IDLE_SLEEP.min(self.cfg.connect_timeout));
            }
        }
    }

    /// A collective that waits for every member: each posts `post` (at most
    /// [`NODE_COLL_DATA`] bytes, the same length at every member), and once all have,
    /// bytes `offset..offset + len` of communicator rank i's post land in
    /// `dest[i·len..(i + 1)·len]`. `what` names the collective in errors.
    pub fn node_all(
        &mut self,
        m: &NodeMembers,
        what: &str,
        post: &[u8],
        part: (usize, usize),
        dest: &mut [u8],
    ) -> Result<(), Error> {
        self.node_gather(m, what, post, part, dest, true)
    }

    /// A collective to communicator rank `root` (gather, reduce): every member posts
    /// `post` (the same length at every member); the root, once all have, gets bytes
    /// `offset..offset + len` of rank i's post in `dest[i·len..(i + 1)·len]`. The
    /// others leave once they posted.
    #[allow(clippy::too_many_arguments)]
    pub fn node_to_root(
        &mut self,
        m: &NodeMembers,
        what: &str,
        me: usize,
        root: usize,
        post: &[u8],
        part: (usize, usize),
        dest: &mut [u8],
    ) -> Result<(), Error> {
        self.node_gather(m, what, post, part, dest, me == root)
    }

    /// Every member posts `post`; if `reads`, this one waits for all and reads their
    /// posts' parts into `dest` (`node_all` for every member, `node_to_root` for its root).
    fn node_gather(
        &mut self,
        m: &NodeMembers,
        what: &str,
        post: &[u8],
        part: (usize, usize),
        dest: &mut [u8],
        reads: bool,
    ) -> Result<(), Error> {
        let (seq, phase) = self.node_post_arrive(m, what, post)?;
        if reads {
            self.node_wait(m, what, Await::Arrivals(phase))?;
            self.node_read_all(m, what, phase, post.len(), part, dest)?;
        }
        self.node_done(seq);
        Ok(())
    }

    /// A collective from communicator rank `root` (bcast, scatter): the root posts
    /// `post`, `posted` bytes (every member passes that length); every other member
    /// copies bytes `offset..offset + dest.len()` of it into `dest`.
    #[allow(clippy::too_many_arguments)]
    pub fn node_from_root(
        &mut self,
        m: &NodeMembers,
        what: &str,
        me: usize,
        root: usize,
        (post, posted): (&[u8], usize),
        offset: usize,
        dest: &mut [u8],
    ) -> Result<(), Error> {
        let Some(&root_slot) = m.slots.get(root) else {
            return Err(Error::Setup(format!(
                "{what}: no root {root} among {} members",
                m.len()
            )));
        };
        if me == root {
            let (seq, _) = self.node_post(m, what, post)?;
            if let Some(node) = self.fabrics.shm.node() {
                node.wake_sleepers();
            }
            self.node_done(seq);
            return Ok(());
        }
        let (seq, phase) = self.node_next();
        let stamp = Await::Stamp {
            slot: root_slot,
            phase,
        };
        self.node_wait(m, what, stamp)?;
        let node = self.fabrics.shm.node().ok_or_else(|| lost(what))?;
        node.coll_read(root_slot, phase, posted, offset, dest)
            .map_err(|e| broken(what, e))?;
        self.node_done(seq);
        Ok(())
    }

    /// Numbers the next collective and posts this rank's part (once every member is
    /// done with the buffer's last use); returns its number and phase.
    fn node_post(&mut self, m: &NodeMembers, what: &str, post: &[u8]) -> Result<(u64, usize), Error> {
        let (seq, phase) = self.node_begin(m, what)?;
        let node = self.fabrics.shm.node().ok_or_else(|| lost(what))?;
        node.coll_post(phase, seq, post).map_err(|e| broken(what, e))?;
        Ok((seq, phase))
    }

    /// Numbers the next collective, posts this rank's part and counts it among the
    /// arrivals (ringing whoever waits for them); returns its number and phase.
    fn node_post_arrive(&mut self, m: &NodeMembers, what: &str, post: &[u8]) -> Result<(u64, usize), Error> {
        let (seq, phase) = self.node_post(m, what, post)?;
        // On a node that counts arrivals: the count once everybody posted.
        let everybody = m.counted().then(|| {
            self.fabrics.shm.colls.synced[phase] += 1;
            m.len() as u64 * self.fabrics.shm.colls.synced[phase]
        });
        let node = self.fabrics.shm.node().ok_or_else(|| lost(what))?;
        match everybody {
            Some(all) if node.coll_arrive(phase) == all => node.wake_all(),
            Some(_) => {}
            None => node.wake_sleepers(),
        }
        Ok((seq, phase))
    }

    /// Copies bytes `offset..offset + len` of each member's post of `posted` bytes into
    /// `dest`, member by member.
    fn node_read_all(
        &self,
        m: &NodeMembers,
        what: &str,
        phase: usize,
        posted: usize,
        (offset, len): (usize, usize),
        dest: &mut [u8],
    ) -> Result<(), Error> {
        if dest.len() < len * m.len() {
            return Err(Error::Setup(format!(
                "{what}: no room for {} parts of {len} bytes",
                m.len()
            )));
        }
        let node = self.fabrics.shm.node().ok_or_else(|| lost(what))?;
        for (part, &slot) in dest.chunks_exact_mut(len.max(1)).zip(&m.slots) {
            node.coll_read(slot, phase, posted, offset, &mut part[..len])
                .map_err(|e| broken(what, e))?;
        }
        Ok(())
    }

    /// Numbers the next collective: its number and phase.
    fn node_next(&mut self) -> (u64, usize) {
        self.fabrics.shm.colls.seq += 1;
        let seq = self.fabrics.shm.colls.seq;
        (seq, (seq % COLL_PHASES as u64) as usize)
    }

    /// Numbers the next collective, for a rank that posts to it: returns it once every
    /// member is done with the last collective that used the same buffer.
    fn node_begin(&mut self, m: &NodeMembers, what: &str) -> Result<(u64, usize), Error> {
        let (seq, phase) = self.node_next();
        if let Some(before) = seq.checked_sub(COLL_PHASES as u64) {
            if self.fabrics.shm.colls.all_done < before {
                // Looking once tells how far everyone is: usually far enough for the
                // next few collectives too.
                self.fabrics.shm.colls.all_done = self.node_least_done(m);
            }
            if self.fabrics.shm.colls.all_done < before {
                // A rank this far ahead (a root broadcasting over and over) waits until
                // the others are half the buffers behind, not just one: then it runs
                // that many collectives without looking again. Looking at every post
                // pulled each reader's "done" line away from it once per collective.
                let target = before.max(seq - COLL_PHASES as u64 / 2);
                self.node_wait(m, what, Await::Done(target))?;
                self.fabrics.shm.colls.all_done = target;
            }
        }
        Ok((seq, phase))
    }

    /// This rank is done with collective `seq`.
    fn node_done(&mut self, seq: u64) {
        if let Some(node) = self.fabrics.shm.node() {
            if node.coll_done(seq) {
                node.wake_sleepers();
            }
        }
    }

    /// The last collective every member is done with.
    fn node_least_done(&self, m: &NodeMembers) -> u64 {
        let Some(node) = self.fabrics.shm.node() else {
            return 0;
        };
        m.slots.iter().map(|&i| node.coll_done_of(i)).min().unwrap_or(0)
    }

    /// Whether `what` holds in the area.
    fn node_ready(&self, m: &NodeMembers, what: Await) -> bool {
        let Some(node) = self.fabrics.shm.node() else {
            return true; // the caller finds the node gone
        };
        let c = &self.fabrics.shm.colls;
        match what {
            Await::Done(seq) => self.node_least_done(m) >= seq,
            Await::Arrivals(phase) if m.counted() => {
                node.coll_arrivals(phase) >= m.len() as u64 * c.synced[phase]
            }
            Await::Arrivals(phase) => m.slots.iter().all(|&i| node.coll_stamp(i, phase) >= c.seq),
            Await::Stamp { slot, phase } => node.coll_stamp(slot, phase) >= c.seq,
        }
    }

    /// Progresses, then sleeps, until `what` holds; fails once a member's process ended
    /// without finalizing.
    fn node_wait(&mut self, m: &NodeMembers, op: &str, what: Await) -> Result<(), Error> {
        // Looking is a load or a few; a progress pass costs many: look several times
        // between passes, so a post is seen soon after it lands.
        const LOOKS_PER_PASS: u32 = 16;
        // Posters ring sleepers without a fence (`transport::shm::coll`): a post that was still
        // on its way when this rank said it sleeps is seen on the next wake-up, which a
        // short sleep brings soon.
        let mut idle = Idle::short_sleeps_within(Duration::from_millis(1));
        loop {
            for _ in 0..LOOKS_PER_PASS {
                if self.node_ready(m, what) {
                    return self.fabrics.shm.node().map(|_| ()).ok_or_else(|| lost(op));
                }
                std::hint::spin_loop();
            }
            self.node_check_members(m, op)?;
            if self.progress() {
                continue;
            }
            let say_so = |rt: &Runtime| {
                if let (Await::Done(_), Some(node)) = (what, rt.fabrics.shm.node()) {
                    node.coll_want_departures();
                }
            };
            self.idle(&mut idle, say_so, &mut |rt| rt.node_ready(m, what));
        }
    }

    /// Fails when a member's process ended without finalizing: it will never post.
    fn node_check_members(&self, m: &NodeMembers, op: &str) -> Result<(), Error> {
        let Some(node) = self.fabrics.shm.node() else {
            return Err(lost(op));
        };
        if node.gone_count() == 0 {
            return Ok(());
        }
        match m.slots.iter().find(|&&slot| node.failed(slot)) {
            Some(&slot) => Err(Error::Failed(Failure::PeerFailed {
                rank: self.fabrics.shm.local[slot],
                cause: format!(
                    "its process ended while rank {} waited for it in {op} on the node's shared memory",
                    self.job.id.rank
                ),
            })),
            None => Ok(()),
        }
    }
}

fn broken(what: &str, e: std::io::Error) -> Error {
    Error::Setup(format!("{what} on the node's shared memory: {e}"))
}

fn lost(what: &str) -> Error {
    Error::Setup(format!("{what}: this rank lost the node's shared memory"))
}
