//! Process groups: ordered sets of job ranks (MPI_Group), and the set operations on them.

use std::rc::Rc;

use crate::{Error, Rank, Result};

/// An ordered set of processes, named by their rank in the job (`COMM_WORLD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    members: Rc<[Rank]>,
    me: Option<u32>,
}

/// How two groups or communicators relate (MPI_IDENT, MPI_CONGRUENT, MPI_SIMILAR, MPI_UNEQUAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    Ident,
    Congruent,
    Similar,
    Unequal,
}

impl Group {
    /// `members[i]` is the job rank of group rank `i`; `world_rank` is this process.
    pub fn new(members: Vec<Rank>, world_rank: Rank) -> Group {
        let me = members.iter().position(|m| *m == world_rank).map(|i| i as u32);
        Group {
            members: members.into(),
            me,
        }
    }

    #[inline]
    pub fn size(&self) -> u32 {
        self.members.len() as u32
    }
    /// This process's rank in the group, if it is a member.
    pub fn rank(&self) -> Option<u32> {
        self.me
    }
    /// Job ranks of the members, in group order.
    #[inline]
    pub fn members(&self) -> &[Rank] {
        &self.members
    }
    /// The same, shared rather than copied.
    pub(crate) fn shared_members(&self) -> Rc<[Rank]> {
        self.members.clone()
    }

    fn check_ranks(&self, ranks: &[u32], what: &str) -> Result<()> {
        let mut seen = vec![false; self.members.len()];
        for r in ranks {
            let Some(s) = seen.get_mut(*r as usize) else {
                return Err(Error::Arg(format!(
                    "{what}: rank {r} is not in a group of {}",
                    self.members.len()
                )));
            };
            if std::mem::replace(s, true) {
                return Err(Error::Arg(format!("{what}: rank {r} is listed twice")));
            }
        }
        Ok(())
    }

    /// The members at `ranks`, in that order (MPI_Group_incl).
    pub fn incl(&self, ranks: &[u32], world_rank: Rank) -> Result<Group> {
        self.check_ranks(ranks, "incl")?;
        Ok(Group::new(
            ranks.iter().map(|r| self.members[*r as usize]).collect(),
            world_rank,
        ))
    }

    /// The members not at `ranks`, in group order (MPI_Group_excl).
    pub fn excl(&self, ranks: &[u32], world_rank: Rank) -> Result<Group> {
        self.check_ranks(ranks, "excl")?;
        let out: Vec<Rank> = (0..self.members.len() as u32)
            .filter(|r| !ranks.contains(r))
            .map(|r| self.members[r as usize])
            .collect();
        Ok(Group::new(out, world_rank))
    }

    /// Ranks from `first` to `last` by `stride` (inclusive), per triple (MPI_Group_range_incl).
    pub fn range_ranks(&self, ranges: &[(i32, i32, i32)]) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for &(first, last, stride) in ranges {
            if stride == 0 {
                return Err(Error::Arg("range with stride 0".into()));
            }
            let mut r = first;
            while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
                if r < 0 || r as u32 >= self.size() {
                    return Err(Error::Arg(format!(
                        "range rank {r} is not in a group of {}",
                        self.size()
                    )));
                }
                out.push(r as u32);
                r += stride;
            }
        }
        Ok(out)
    }

    /// Members of `self`, then those of `other` not in `self` (MPI_Group_union).
    pub fn union(&self, other: &Group, world_rank: Rank) -> Group {
        let mut out = self.members.to_vec();
        out.extend(other.members.iter().filter(|m| !self.members.contains(m)));
        Group::new(out, world_rank)
    }

    /// Members of `self` also in `other`, in `self`'s order (MPI_Group_intersection).
    pub fn intersection(&self, other: &Group, world_rank: Rank) -> Group {
        let keep = self
            .members
            .iter()
            .filter(|m| other.members.contains(m))
            .copied()
            .collect();
        Group::new(keep, world_rank)
    }

    /// Members of `self` not in `other` (MPI_Group_difference).
    pub fn difference(&self, other: &Group, world_rank: Rank) -> Group {
        let keep = self
            .members
            .iter()
            .filter(|m| !other.members.contains(m))
            .copied()
            .collect();
        Group::new(keep, world_rank)
    }

    /// The rank in `other` of each of `ranks` in `self`; `None` where not a member
    /// (MPI_Group_translate_ranks, MPI_UNDEFINED).
    pub fn translate_ranks(&self, ranks: &[u32], other: &Group) -> Result<Vec<Option<u32>>> {
        ranks
            .iter()
            .map(|r| {
                let w = self.members.get(*r as usize).ok_or_else(|| {
                    Error::Arg(format!(
                        "translate_ranks: rank {r} is not in a group of {}",
                        self.size()
                    ))
                })?;
                Ok(other.members.iter().position(|m| m == w).map(|i| i as u32))
            })
            .collect()
    }

    /// Same members in the same order: `Ident`; same members: `Similar`.
    pub fn compare(&self, other: &Group) -> Compare {
        if self.members == other.members {
            Compare::Ident
        } else if self.members.len() == other.members.len()
            && self.members.iter().all(|m| other.members.contains(m))
        {
            Compare::Similar
        } else {
            Compare::Unequal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations_keep_mpi_order() {
        let g = Group::new(vec![10, 11, 12, 13, 14], 12);
        assert_eq!(g.rank(), Some(2));
        let a = g.incl(&[4, 2, 0], 12).unwrap();
        assert_eq!((a.members(), a.rank()), (&[14, 12, 10][..], Some(1)));
        let b = g.excl(&[1, 3], 12).unwrap();
        assert_eq!(b.members(), &[10, 12, 14]);
        assert_eq!(a.compare(&b), Compare::Similar);
        assert_eq!(b.compare(&b.clone()), Compare::Ident);
        let c = g.incl(&[1, 2], 12).unwrap();
        assert_eq!(a.union(&c, 12).members(), &[14, 12, 10, 11]);
        assert_eq!(a.intersection(&c, 12).members(), &[12]);
        assert_eq!(a.difference(&c, 12).members(), &[14, 10]);
        assert_eq!(a.translate_ranks(&[0, 1, 2], &c).unwrap(), [None, Some(1), None]);
        assert_eq!(g.range_ranks(&[(4, 0, -2)]).unwrap(), [4, 2, 0]);
        assert!(g.incl(&[1, 1], 12).is_err());
        assert!(g.excl(&[5], 12).is_err());
        assert_eq!(g.excl(&[2], 12).unwrap().rank(), None);
    }
}
