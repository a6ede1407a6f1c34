//! MPI_Comm_idup: agreeing on a context id without blocking, in rounds of a small
//! allreduce (the scheme of Open MPI's non-blocking CID allocation). Each member proposes
//! its lowest free id and the highest proposal is the candidate; each member takes the
//! candidate if it is free there and says whether it could; when all could, it is the new
//! communicator's; otherwise those that took it give it back, and the next candidate is
//! the highest of the next proposals, each above the last candidate, so the rounds end.
//!
//! A candidate is held for one round only, so the blocking agreements (dup, split, …) and
//! other idups that run meanwhile never wait for this one, and none of them can take the
//! same id at this process: an id held here is not free here. The rounds run on the
//! parent's collective context with tags of their own (negative: no ordinary collective
//! uses those), so they may overlap any other collective on the parent.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use runtime::Buffer;

use super::algos;
use super::nonblocking::{Link, Next};
use super::plans::CollPending;
use super::schedule::{INPUT, OUTPUT};
use crate::comm::{no_context_left, Comm, ContextPool, MAX_CONTEXTS};
use crate::datatype::{Basic, Datatype};
use crate::op::Op;
use crate::{Error, Result};

/// What a round's agreed values lead to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Every member holds this id now: it is the new communicator's.
    Agreed(u32),
    /// No id is free at every member.
    NoneLeft,
    /// Another round, with this member's contribution `[refused, next proposal]`.
    Vote([u32; 2]),
}

/// One member's side of the agreement.
#[derive(Default)]
pub(crate) struct Agreement {
    candidate: Option<u32>,
    held: bool,
}

const NONE_LEFT: u32 = MAX_CONTEXTS as u32;

impl Agreement {
    /// The first round's contribution: nothing refused, the lowest free id.
    pub(crate) fn first(pool: &ContextPool) -> [u32; 2] {
        [0, pool.lowest_free_from(0)]
    }

    /// Takes a round's agreed `[any refused, highest proposal]` (a MAX allreduce).
    pub(crate) fn step(&mut self, agreed: [u32; 2], pool: &mut ContextPool) -> Outcome {
        let [refused, proposal] = agreed;
        if let Some(c) = self.candidate {
            if refused == 0 {
                return Outcome::Agreed(c);
            }
            self.give_back(pool);
        }
        if proposal >= NONE_LEFT {
            self.candidate = None;
            return Outcome::NoneLeft;
        }
        self.held = pool.is_free(proposal);
        if self.held {
            pool.take(proposal);
        }
        self.candidate = Some(proposal);
        Outcome::Vote([u32::from(!self.held), pool.lowest_free_from(proposal + 1)])
    }

    /// Releases the candidate this member holds, if any (a round failed or the chain
    /// was cut short).
    pub(crate) fn give_back(&mut self, pool: &mut ContextPool) {
        if let (Some(c), true) = (self.candidate, self.held) {
            pool.release(c);
        }
        self.held = false;
    }
}

/// The tag of round `round` of the idup that took `base` from its parent's collective
/// tags: negative, apart from every ordinary collective tag (and never `ANY_TAG`).
fn round_tag(base: i32, round: u32) -> i32 {
    (0x8000_0000 | ((base as u32 & 0x7f_ffff) << 6) | (round & 63)) as i32
}

/// The context ids an idup agreed on, for the communicator made once it completes.
pub struct IdupResult<'u> {
    parent: Comm<'u>,
    agreed: Rc<Cell<Option<Ids>>>,
}

/// An intracommunicator's id; an intercommunicator's, then its own group's.
type Ids = [u32; 2];

impl<'u> IdupResult<'u> {
    /// The new communicator (MPI_Comm_idup's newcomm), once its request completed: the
    /// parent's groups, attributes (through their copy callbacks) and topology.
    pub fn communicator(self) -> Result<Comm<'u>> {
        let [id, local_id] = self
            .agreed
            .take()
            .ok_or_else(|| Error::Arg("MPI_Comm_idup has not completed".into()))?;
        let p = &self.parent;
        let c = match p.is_inter() {
            true => p.inter_on(
                p.d.group.members().to_vec(),
                p.peer_group().members().to_vec(),
                id,
                local_id,
            ),
            false => p.with_members(p.d.group.members().to_vec(), id),
        };
        crate::comm::attr::copy_all(p, &c)?;
        c.set_topology(p.topology());
        Ok(c)
    }
}

impl<'u> Comm<'u> {
    /// Starts duplicating this communicator without blocking (MPI_Comm_idup): the
    /// request completes once the members agreed on a context; then
    /// [`IdupResult::communicator`] gives the duplicate.
    ///
    /// An intercommunicator's members agree over both groups, on two ids: the new
    /// intercommunicator's and its groups' own.
    pub fn start_idup(&self) -> Result<(CollPending<'u>, IdupResult<'u>)> {
        let (members, wanted) = match self.is_inter() {
            true => (self.both_groups()?, 2),
            false => (self.d.group.members().to_vec(), 1),
        };
        let rank = members
            .iter()
            .position(|&w| w == self.u.rank())
            .ok_or_else(|| Error::Arg("MPI_Comm_idup: this process is not a member".into()))?
            as u32;
        let shape = algos::Shape {
            rank,
            size: members.len() as u32,
        };
        let base = self.next_coll_tag();
        let tuning = self.tuning();
        let round = move |mine: [u32; 2], n: u32| Link {
            sched: algos::allreduce(shape, INPUT, OUTPUT, 8, 4, true, &tuning),
            input: Buffer::owned_pod(mine.to_vec()),
            output: Buffer::owned(vec![0; 8]),
            op: Some((Op::Max, Datatype::basic(Basic::U32))),
            tag: round_tag(base, n),
        };
        let pool: Rc<RefCell<ContextPool>> = self.u.contexts.clone();
        let agreed = Rc::new(Cell::new(None));
        let (mut me, mut n, done) = (Agreement::default(), 0, agreed.clone());
        let mut ids: Vec<u32> = Vec::new();
        let first = round(Agreement::first(&pool.borrow()), n);
        let then = Box::new(move |r: Result<Buffer>| {
            let mut pool = pool.borrow_mut();
            let failed = |e, me: &mut Agreement, pool: &mut ContextPool, ids: &[u32]| {
                me.give_back(pool);
                ids.iter().for_each(|&id| pool.release(id));
                Next::Done(Err(e))
            };
            let out = match r {
                Ok(out) => out,
                Err(e) => return failed(e, &mut me, &mut pool, &ids),
            };
            let v: Vec<u32> = bytemuck::pod_collect_to_vec(out.slice(0, 8));
            n += 1;
            match me.step([v[0], v[1]], &mut pool) {
                Outcome::Agreed(id) if ids.len() + 1 == wanted => {
                    done.set(Some([id, ids.first().copied().unwrap_or(id)]));
                    Next::Done(Ok(out))
                }
                // The next id, agreed the same way; this one stays taken.
                Outcome::Agreed(id) => {
                    ids.push(id);
                    me = Agreement::default();
                    Next::Run(round(Agreement::first(&pool), n))
                }
                Outcome::NoneLeft => failed(no_context_left(), &mut me, &mut pool, &ids),
                Outcome::Vote(mine) => Next::Run(round(mine, n)),
            }
        });
        let state = self.start_chain(first, then, members.into());
        let result = IdupResult {
            parent: self.clone(),
            agreed,
        };
        Ok((CollPending::of(self.clone(), state), result))
    }
}

impl Comm<'_> {
    /// `wanted` context ids agreed with every member in blocking rounds, as an idup's
    /// (so agreements that other threads run meanwhile at this process never take the
    /// same id: a mask of free ids taken at the start would be stale by its end).
    /// `max_all` gives the element-wise maximum of every member's pair (collective).
    pub(crate) fn agree_in_rounds(
        &self,
        wanted: usize,
        mut max_all: impl FnMut([u32; 2]) -> Result<[u32; 2]>,
    ) -> Result<Vec<u32>> {
        let pool = &self.u.contexts;
        let mut ids = Vec::with_capacity(wanted);
        let mut me = Agreement::default();
        let mut mine = Agreement::first(&pool.borrow());
        let failed = |e, me: &mut Agreement, ids: &[u32]| {
            let mut pool = pool.borrow_mut();
            me.give_back(&mut pool);
            ids.iter().for_each(|&id| pool.release(id));
            Err(e)
        };
        while ids.len() < wanted {
            // No borrow of the pool while the members talk: other threads agree too.
            let agreed = match max_all(mine) {
                Ok(agreed) => agreed,
                Err(e) => return failed(e, &mut me, &ids),
            };
            let outcome = me.step(agreed, &mut pool.borrow_mut());
            match outcome {
                Outcome::Agreed(id) => {
                    ids.push(id);
                    me = Agreement::default();
                    mine = Agreement::first(&pool.borrow());
                }
                Outcome::NoneLeft => return failed(no_context_left(), &mut me, &ids),
                Outcome::Vote(v) => mine = v,
            }
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the rounds for `pools` (one per member) with nothing else happening, and
    /// `meddle(round, pools)` between rounds (other agreements taking ids).
    fn agree(pools: &mut [ContextPool], mut meddle: impl FnMut(u32, &mut [ContextPool])) -> Outcome {
        let mut members: Vec<Agreement> = pools.iter().map(|_| Agreement::default()).collect();
        let mut mine: Vec<[u32; 2]> = pools.iter().map(Agreement::first).collect();
        for round in 0.. {
            meddle(round, pools);
            let agreed = [0, 1].map(|i| mine.iter().map(|m| m[i]).max().unwrap_or(0));
            let outcomes: Vec<Outcome> = members
                .iter_mut()
                .zip(pools.iter_mut())
                .map(|(a, p)| a.step(agreed, p))
                .collect();
            match &outcomes[0] {
                Outcome::Vote(_) => {}
                done => {
                    assert!(
                        outcomes.iter().all(|o| o == done),
                        "members disagree: {outcomes:?}"
                    );
                    return outcomes.into_iter().next().expect("a member");
                }
            }
            mine = outcomes
                .iter()
                .map(|o| match o {
                    Outcome::Vote(v) => *v,
                    other => panic!("members disagree: {other:?}"),
                })
                .collect();
        }
        unreachable!()
    }

    #[test]
    fn members_with_different_histories_agree_on_an_id_free_at_all() {
        let mut pools = [ContextPool::new(), ContextPool::new(), ContextPool::new()];
        for id in 2..10 {
            pools[0].take(id);
        }
        pools[1].take(12);
        pools[2].take(10);
        let got = agree(&mut pools, |_, _| {});
        assert_eq!(got, Outcome::Agreed(11));
        assert!(pools.iter().all(|p| !p.is_free(11)));
        // Candidates that failed were given back.
        assert!(pools[1].is_free(10) && pools[0].is_free(10));
    }

    #[test]
    fn an_id_taken_between_rounds_is_not_given_twice() {
        let mut pools = [ContextPool::new(), ContextPool::new()];
        // Another agreement takes member 1's proposal before the candidate is held.
        let got = agree(&mut pools, |round, p| {
            if round == 0 {
                p[1].take(2);
            }
        });
        assert_eq!(got, Outcome::Agreed(3));
        assert!(!pools[1].is_free(2) && pools[0].is_free(2));
    }

    #[test]
    fn a_full_member_ends_the_rounds() {
        let mut pools = [ContextPool::new(), ContextPool::new()];
        for id in 0..MAX_CONTEXTS as u32 {
            pools[0].take(id);
        }
        assert_eq!(agree(&mut pools, |_, _| {}), Outcome::NoneLeft);
        assert_eq!(pools[1].lowest_free_from(0), 2, "nothing left held");
    }

    #[test]
    fn round_tags_stay_apart_from_ordinary_ones() {
        for (base, round) in [(0, 0), (5, 1), (0x3fff_ffff, 63), (0x7fff_ffff, 64)] {
            let t = round_tag(base, round);
            assert!(t < 0 && t != proto::ANY_TAG, "{base} {round}: {t}");
        }
        assert_ne!(round_tag(7, 1), round_tag(7, 2));
        assert_ne!(round_tag(7, 1), round_tag(8, 1));
    }
}
