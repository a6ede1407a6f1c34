//! MPI matching: posted receives and unexpected messages per communicator context,
//! keyed by (source, tag) with `ANY_SOURCE` / `ANY_TAG`.
//!
//! Both queues keep MPI's order: a message matches the earliest posted receive that
//! fits, and a receive matches the earliest arrived message that fits. Exact
//! (source, tag) pairs are indexed so the common case is O(1); receives with a
//! wildcard live in one ordered list per context that is scanned.

use std::collections::{BTreeMap, VecDeque};

// Keys are small integers chosen by this job's ranks: a fast hasher, not SipHash.
use rustc_hash::FxHashMap as HashMap;

use crate::{Rank, ANY_SOURCE, ANY_TAG};

/// Request id chosen by the caller (the runtime's request table).
pub type ReqId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    src: Rank,
    tag: i32,
}

#[derive(Debug, Clone, Copy)]
struct Posted {
    order: u64,
    req: ReqId,
    src: i32,
    tag: i32,
    capacity: u64,
}

impl Posted {
    fn fits(&self, src: Rank, tag: i32) -> bool {
        (self.src == ANY_SOURCE || self.src as i64 == src as i64) && (self.tag == ANY_TAG || self.tag == tag)
    }
}

fn pattern_fits(psrc: i32, ptag: i32, src: Rank, tag: i32) -> bool {
    (psrc == ANY_SOURCE || psrc as i64 == src as i64) && (ptag == ANY_TAG || ptag == tag)
}

struct Unexpected<T> {
    key: Key,
    item: T,
}

struct Context<T> {
    posted_exact: HashMap<Key, VecDeque<Posted>>,
    posted_wild: VecDeque<Posted>,
    unexpected: BTreeMap<u64, Unexpected<T>>,
    unexpected_by_key: HashMap<Key, VecDeque<u64>>,
}

impl<T> Default for Context<T> {
    fn default() -> Self {
        Context {
            posted_exact: HashMap::default(),
            posted_wild: VecDeque::new(),
            unexpected: BTreeMap::new(),
            unexpected_by_key: HashMap::default(),
        }
    }
}

impl<T> Context<T> {
    fn is_empty(&self) -> bool {
        self.posted_exact.values().all(VecDeque::is_empty)
            && self.posted_wild.is_empty()
            && self.unexpected.is_empty()
    }

    /// Arrival order of the earliest unexpected message fitting the pattern.
    fn find_unexpected(&self, src: i32, tag: i32) -> Option<u64> {
        if src != ANY_SOURCE && tag != ANY_TAG {
            let key = Key {
                src: src as Rank,
                tag,
            };
            return self.unexpected_by_key.get(&key).and_then(|q| q.front().copied());
        }
        self.unexpected
            .iter()
            .find(|(_, u)| pattern_fits(src, tag, u.key.src, u.key.tag))
            .map(|(o, _)| *o)
    }

    fn remove_unexpected(&mut self, order: u64) -> Option<Unexpected<T>> {
        let u = self.unexpected.remove(&order)?;
        if let Some(q) = self.unexpected_by_key.get_mut(&u.key) {
            if let Some(pos) = q.iter().position(|o| *o == order) {
                q.remove(pos);
            }
            if q.is_empty() {
                self.unexpected_by_key.remove(&u.key);
            }
        }
        Some(u)
    }
}

/// The matching engine. `T` is what an unexpected message carries (its payload or its RTS).
///
/// A context's tables stay once created (one per communicator; `forget_context` drops
/// them when it is freed), and emptied per-(source, tag) queues are recycled, so
/// matching a message allocates nothing in the steady state.
pub struct Matcher<T> {
    contexts: HashMap<u32, Context<T>>,
    spare_queues: Vec<VecDeque<Posted>>,
    next_order: u64,
    posted: usize,
    unexpected: usize,
}

impl<T> Default for Matcher<T> {
    fn default() -> Self {
        Matcher {
            contexts: HashMap::default(),
            spare_queues: Vec::new(),
            next_order: 0,
            posted: 0,
            unexpected: 0,
        }
    }
}

/// Emptied queues kept for reuse; more are simply freed.
const SPARE_QUEUES: usize = 64;
/// Up to this many (source, tag) queues per context stay in place when they empty.
const KEEP_EMPTY_QUEUES: usize = 64;

/// Source and tag of a matched or probed message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchInfo {
    pub src: Rank,
    pub tag: i32,
}

impl<T> Matcher<T> {
    fn order(&mut self) -> u64 {
        self.next_order += 1;
        self.next_order
    }

    /// Posts a receive into a buffer of `capacity` bytes. If an unexpected message
    /// fits, it is removed and returned instead of posting.
    pub fn post(
        &mut self,
        ctx: u32,
        src: i32,
        tag: i32,
        req: ReqId,
        capacity: u64,
    ) -> Option<(MatchInfo, T)> {
        if let Some(hit) = self.take(ctx, src, tag) {
            return Some(hit);
        }
        let order = self.order();
        let p = Posted {
            order,
            req,
            src,
            tag,
            capacity,
        };
        let c = self.contexts.entry(ctx).or_default();
        if src == ANY_SOURCE || tag == ANY_TAG {
            c.posted_wild.push_back(p);
        } else {
            let spare = &mut self.spare_queues;
            let key = Key {
                src: src as Rank,
                tag,
            };
            c.posted_exact
                .entry(key)
                .or_insert_with(|| spare.pop().unwrap_or_default())
                .push_back(p);
        }
        self.posted += 1;
        None
    }

    /// A message arrived (in per-sender order): the posted receive it matches, if any,
    /// removed from the posted queue, with its capacity. Stores nothing; see [`Matcher::store`].
    pub fn match_posted(&mut self, ctx: u32, src: Rank, tag: i32) -> Option<(ReqId, u64)> {
        if self.posted == 0 {
            return None;
        }
        let key = Key { src, tag };
        let c = self.contexts.get_mut(&ctx)?;
        let wild = if c.posted_wild.is_empty() {
            None
        } else {
            c.posted_wild.iter().position(|p| p.fits(src, tag))
        };
        let wild_order = wild.map(|i| c.posted_wild[i].order);
        // One hash lookup on the common path (an exact receive, no wildcards).
        let queue = c.posted_exact.get_mut(&key);
        let exact = queue.as_ref().and_then(|q| q.front()).map(|p| p.order);
        let take_wild = match (exact, wild_order) {
            (Some(e), Some(w)) => w < e,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        let posted = if take_wild {
            wild.and_then(|i| c.posted_wild.remove(i))
        } else {
            let q = queue?;
            let p = q.pop_front();
            // A small table keeps its emptied queues (the same source and tag usually come
            // again); a large one drops them, so many distinct tags cannot pile up.
            if q.is_empty() && c.posted_exact.len() > KEEP_EMPTY_QUEUES {
                if let Some(q) = c.posted_exact.remove(&key) {
                    if self.spare_queues.len() < SPARE_QUEUES {
                        self.spare_queues.push(q);
                    }
                }
            }
            p
        };
        let p = posted?;
        self.posted -= 1;
        Some((p.req, p.capacity))
    }

    /// Stores a message that matched no posted receive.
    pub fn store(&mut self, ctx: u32, src: Rank, tag: i32, item: T) {
        let key = Key { src, tag };
        let order = self.order();
        let c = self.contexts.entry(ctx).or_default();
        c.unexpected.insert(order, Unexpected { key, item });
        c.unexpected_by_key.entry(key).or_default().push_back(order);
        self.unexpected += 1;
    }

    /// Matches against posted receives, else stores: `Some((req, capacity, item))` on a match.
    pub fn arrive(&mut self, ctx: u32, src: Rank, tag: i32, item: T) -> Option<(ReqId, u64, T)> {
        match self.match_posted(ctx, src, tag) {
            Some((req, capacity)) => Some((req, capacity, item)),
            None => {
                self.store(ctx, src, tag, item);
                None
            }
        }
    }

    /// The earliest unexpected message fitting the pattern, left in place (probe).
    pub fn peek(&self, ctx: u32, src: i32, tag: i32) -> Option<(MatchInfo, &T)> {
        let c = self.contexts.get(&ctx)?;
        let order = c.find_unexpected(src, tag)?;
        let u = c.unexpected.get(&order)?;
        Some((
            MatchInfo {
                src: u.key.src,
                tag: u.key.tag,
            },
            &u.item,
        ))
    }

    /// Removes and returns the earliest unexpected message fitting the pattern (mprobe).
    pub fn take(&mut self, ctx: u32, src: i32, tag: i32) -> Option<(MatchInfo, T)> {
        if self.unexpected == 0 {
            return None; // the common case of a receive posted before its message: no lookup
        }
        let c = self.contexts.get_mut(&ctx)?;
        let order = c.find_unexpected(src, tag)?;
        let u = c.remove_unexpected(order)?;
        self.unexpected -= 1;
        Some((
            MatchInfo {
                src: u.key.src,
                tag: u.key.tag,
            },
            u.item,
        ))
    }

    /// Removes and returns the unexpected message from `src` with `tag` in `ctx` that
    /// `which` picks out (a cancelled send's), if no receive or probe took it yet.
    pub fn withdraw(&mut self, ctx: u32, src: Rank, tag: i32, which: impl Fn(&T) -> bool) -> Option<T> {
        let c = self.contexts.get_mut(&ctx)?;
        let queue = c.unexpected_by_key.get(&Key { src, tag })?;
        let order = *queue
            .iter()
            .find(|o| c.unexpected.get(o).is_some_and(|u| which(&u.item)))?;
        let u = c.remove_unexpected(order)?;
        self.unexpected -= 1;
        Some(u.item)
    }

    /// Removes a posted receive (cancel). Returns whether it was still posted.
    pub fn cancel(&mut self, req: ReqId) -> bool {
        for c in self.contexts.values_mut() {
            if let Some(i) = c.posted_wild.iter().position(|p| p.req == req) {
                c.posted_wild.remove(i);
                self.posted -= 1;
                return true;
            }
            let mut hit = None;
            for (k, q) in c.posted_exact.iter_mut() {
                if let Some(i) = q.iter().position(|p| p.req == req) {
                    q.remove(i);
                    hit = Some((*k, q.is_empty()));
                    break;
                }
            }
            if let Some((k, empty)) = hit {
                if empty {
                    c.posted_exact.remove(&k);
                }
                self.posted -= 1;
                return true;
            }
        }
        false
    }

    /// Removes every posted receive for which `doomed(src pattern)` holds; returns their ids.
    pub fn remove_posted_where(&mut self, doomed: impl Fn(i32) -> bool) -> Vec<ReqId> {
        let mut out = Vec::new();
        for c in self.contexts.values_mut() {
            c.posted_wild.retain(|p| {
                let d = doomed(p.src);
                if d {
                    out.push(p.req);
                }
                !d
            });
            c.posted_exact.retain(|_, q| {
                q.retain(|p| {
                    let d = doomed(p.src);
                    if d {
                        out.push(p.req);
                    }
                    !d
                });
                !q.is_empty()
            });
        }
        self.posted -= out.len();
        out
    }

    /// Drops the tables of a context (its communicator was freed). Returns whether it
    /// still held posted receives or unexpected messages (an erroneous program).
    pub fn forget_context(&mut self, ctx: u32) -> bool {
        let Some(c) = self.contexts.remove(&ctx) else {
            return false;
        };
        // The counts stay exact: `take` and `match_posted` skip all lookups at zero.
        self.posted -= c.posted_wild.len() + c.posted_exact.values().map(VecDeque::len).sum::<usize>();
        self.unexpected -= c.unexpected.len();
        !c.is_empty()
    }

    pub fn posted_len(&self) -> usize {
        self.posted
    }
    pub fn unexpected_len(&self) -> usize {
        self.unexpected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_a_context_takes_its_entries_out_of_the_counts() {
        let mut m: Matcher<&str> = Matcher::default();
        assert!(m.post(3, 1, 7, 1, 0).is_none());
        assert!(m.post(3, ANY_SOURCE, 7, 2, 0).is_none());
        assert_eq!(m.arrive(4, 1, 7, "x"), None);
        assert!(m.forget_context(3), "it held receives");
        assert!(m.forget_context(4), "it held a message");
        assert_eq!((m.posted_len(), m.unexpected_len()), (0, 0));
        // With both counts at zero the lookups are skipped; a new pair still matches.
        assert!(m.post(5, 1, 7, 3, 0).is_none());
        assert_eq!(m.arrive(5, 1, 7, "y"), Some((3, 0, "y")));
        assert_eq!(m.arrive(5, 1, 8, "z"), None);
        assert_eq!(m.take(5, 1, 8).map(|(_, t)| t), Some("z"));
    }

    #[test]
    fn a_withdrawn_message_leaves_the_others_in_their_order() {
        let mut m: Matcher<u32> = Matcher::default();
        for seq in [1, 2, 3] {
            assert_eq!(m.arrive(0, 4, 9, seq), None);
        }
        assert_eq!(m.withdraw(0, 4, 9, |s| *s == 2), Some(2));
        assert_eq!(m.withdraw(0, 4, 9, |s| *s == 2), None, "once");
        assert_eq!(m.withdraw(0, 4, 8, |s| *s == 1), None, "another tag");
        assert_eq!(m.withdraw(1, 4, 9, |s| *s == 1), None, "another context");
        assert_eq!(m.unexpected_len(), 2);
        assert_eq!(
            m.post(0, ANY_SOURCE, 9, 1, 0),
            Some((MatchInfo { src: 4, tag: 9 }, 1))
        );
        assert_eq!(m.post(0, 4, 9, 2, 0), Some((MatchInfo { src: 4, tag: 9 }, 3)));
        assert_eq!(m.unexpected_len(), 0);
    }

    #[test]
    fn exact_and_wildcard_keep_post_order() {
        let mut m: Matcher<&str> = Matcher::default();
        assert!(m.post(0, ANY_SOURCE, 5, 1, 0).is_none());
        assert!(m.post(0, 2, 5, 2, 0).is_none());
        // The wildcard receive was posted first, so it takes the first message.
        assert_eq!(m.arrive(0, 2, 5, "a"), Some((1, 0, "a")));
        assert_eq!(m.arrive(0, 2, 5, "b"), Some((2, 0, "b")));
        assert_eq!(m.arrive(0, 2, 5, "c"), None);
        assert_eq!(m.unexpected_len(), 1);
    }

    #[test]
    fn receive_takes_earliest_fitting_unexpected() {
        let mut m: Matcher<u32> = Matcher::default();
        assert!(m.arrive(0, 1, 7, 10).is_none());
        assert!(m.arrive(0, 2, 8, 20).is_none());
        assert!(m.arrive(0, 1, 8, 30).is_none());
        assert_eq!(
            m.post(0, ANY_SOURCE, 8, 1, 0).map(|(i, v)| (i.src, v)),
            Some((2, 20))
        );
        assert_eq!(
            m.post(0, 1, ANY_TAG, 2, 0).map(|(i, v)| (i.tag, v)),
            Some((7, 10))
        );
        assert_eq!(m.peek(0, 1, 8).map(|(_, v)| *v), Some(30));
        assert_eq!(m.post(0, 1, 8, 3, 0).map(|(_, v)| v), Some(30));
        assert_eq!(m.unexpected_len(), 0);
        assert!(!m.forget_context(0), "nothing is left in the context");
        assert!(m.contexts.is_empty());
    }

    #[test]
    fn contexts_are_separate_and_cancel_works() {
        let mut m: Matcher<u32> = Matcher::default();
        m.post(1, 0, 0, 9, 0);
        assert_eq!(m.arrive(2, 0, 0, 1), None);
        assert!(m.cancel(9));
        assert!(!m.cancel(9));
        assert_eq!(m.arrive(1, 0, 0, 2), None);
        assert_eq!(m.posted_len(), 0);
    }

    #[test]
    fn failed_source_removes_only_its_exact_receives() {
        let mut m: Matcher<u32> = Matcher::default();
        m.post(0, 3, 1, 1, 0);
        m.post(0, ANY_SOURCE, 1, 2, 0);
        m.post(0, 4, ANY_TAG, 3, 0);
        let mut gone = m.remove_posted_where(|src| src == 3);
        gone.sort();
        assert_eq!(gone, vec![1]);
        assert_eq!(m.posted_len(), 2);
    }
}
