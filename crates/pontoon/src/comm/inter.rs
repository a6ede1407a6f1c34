//! Intercommunicators: two disjoint groups, each talking to the other. Ranks in
//! point-to-point calls name the remote group's members; `size`, `rank` and `group` are
//! the local group's (MPI 4.1 §7.6).
//!
//! Each side keeps its own group as an intracommunicator of its own context (`local`),
//! on which dup, split and merge agree on contexts; the two sides' leaders (local rank
//! 0) meet on the intercommunicator's collective context. The collectives are schedules
//! over both groups (`coll::inter`).

use std::rc::Rc;

use crate::comm::{new_comm_data, ranks_by_world, Remote, UNDEFINED};
use crate::group::Group;
use crate::{Comm, Datatype, Error, Op, Rank, Result};

/// Who an intercommunicator's bcast is rooted at, as each process sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterRoot {
    /// This process is the root (MPI_ROOT).
    Here,
    /// The root is another process of this group (MPI_PROC_NULL): nothing to do.
    ElsewhereHere,
    /// The root is this rank of the remote group: receive its data.
    Remote(Rank),
}

impl<'u> Comm<'u> {
    /// Whether this is an intercommunicator (MPI_Comm_test_inter).
    pub fn is_inter(&self) -> bool {
        self.d.remote.is_some()
    }

    /// The remote group's size (MPI_Comm_remote_size); an error on an intracommunicator.
    pub fn remote_size(&self) -> Result<u32> {
        Ok(self.remote()?.group.size())
    }

    /// The remote group (MPI_Comm_remote_group).
    pub fn remote_group(&self) -> Result<Group> {
        Ok(self.remote()?.group.clone())
    }

    /// How many ranks point-to-point calls may name: the remote group's size on an
    /// intercommunicator, the communicator's size otherwise.
    #[inline]
    pub fn peer_size(&self) -> u32 {
        self.peer_group().size()
    }

    fn remote(&self) -> Result<&Remote> {
        self.d
            .remote
            .as_ref()
            .ok_or_else(|| Error::Arg("not an intercommunicator".into()))
    }

    /// This side's own members as an intracommunicator.
    fn local(&self) -> Result<Comm<'u>> {
        Ok(Comm {
            u: self.u,
            d: self.remote()?.local.clone(),
        })
    }

    /// Makes an intercommunicator of this communicator's members (its `local_leader`
    /// speaking for them) and the group whose leader is `remote_leader` of `peer`
    /// (MPI_Intercomm_create). Collective over this communicator; the leaders talk on
    /// `peer` with `tag`.
    pub fn intercomm_create(
        &self,
        local_leader: Rank,
        peer: &Comm<'u>,
        remote_leader: Rank,
        tag: i32,
    ) -> Result<Comm<'u>> {
        if self.is_inter() {
            return Err(Error::Arg(
                "intercomm_create: the local communicator is an intercommunicator".into(),
            ));
        }
        if local_leader >= self.size() {
            return Err(Error::Arg(format!(
                "intercomm_create: local leader {local_leader} is not a rank of the local communicator of {}",
                self.size()
            )));
        }
        // The leaders swap their groups; everyone learns the other group.
        let mut remote_n = [0u64];
        let mut theirs = Vec::new();
        if self.rank() == local_leader {
            let members: Vec<u64> = self.d.group.members().iter().map(|&w| u64::from(w)).collect();
            peer.sendrecv(
                &[members.len() as u64],
                remote_leader,
                tag,
                &mut remote_n,
                Some(remote_leader),
                tag,
            )?;
            theirs = vec![0u64; remote_n[0] as usize];
            peer.sendrecv(
                &members,
                remote_leader,
                tag,
                &mut theirs,
                Some(remote_leader),
                tag,
            )?;
        }
        self.bcast(&mut remote_n, local_leader)?;
        theirs.resize(remote_n[0] as usize, 0);
        self.bcast(&mut theirs, local_leader)?;
        let remote_members: Vec<Rank> = theirs.iter().map(|&w| w as Rank).collect();
        if let Some(w) = remote_members.iter().find(|&&w| self.comm_rank_of(w) != u32::MAX) {
            return Err(Error::Arg(format!(
                "intercomm_create: job rank {w} is in both groups; they must be disjoint"
            )));
        }
        let ids = self.ids_across(2, |ours| {
            let mut theirs = vec![0u64; ours.len()];
            if self.rank() == local_leader {
                peer.sendrecv(ours, remote_leader, tag, &mut theirs, Some(remote_leader), tag)?;
            }
            self.bcast(&mut theirs, local_leader)?;
            Ok(theirs)
        })?;
        Ok(self.inter_on(self.d.group.members().to_vec(), remote_members, ids[0], ids[1]))
    }

    /// An intercommunicator between `local` and `remote` members on context `id` (taken
    /// at every member of both), its own group's communicator on `local_id`.
    pub(crate) fn inter_on(&self, local: Vec<Rank>, remote: Vec<Rank>, id: u32, local_id: u32) -> Comm<'u> {
        let me = self.u.rank();
        let world = self.u.world_size();
        let both = local.iter().chain(&remote).copied().collect();
        let local_group = Group::new(local, me);
        let remote = Group::new(remote, me);
        let own = new_comm_data(local_group.clone(), local_id, world, "", false);
        let mut d = new_comm_data(local_group, id, world, "", false);
        d.remote = Some(Remote {
            by_world: ranks_by_world(&remote, world),
            group: remote,
            local: Rc::new(own),
            both,
        });
        Comm {
            u: self.u,
            d: Rc::new(d),
        }
    }

    /// Both groups as one list, the same at every member of both: the group with the
    /// lower leader first (what an agreement over both groups runs on).
    pub(crate) fn both_groups(&self) -> Result<Vec<Rank>> {
        let (local, remote) = (self.d.group.members(), self.remote()?.group.members());
        let (first, second) = if local.first() < remote.first() {
            (local, remote)
        } else {
            (remote, local)
        };
        Ok(first.iter().chain(second).copied().collect())
    }

    /// The two leaders swap `send` for `recv` with `tag`.
    fn leaders_swap(&self, send: &[u64], recv: &mut [u64], tag: i32) -> Result<()> {
        let remote_leader = self.remote()?.group.members()[0];
        let (send, recv) = (bytemuck::cast_slice(send), bytemuck::cast_slice_mut(recv));
        let from = remote_leader as i32;
        self.u
            .swap(self.coll_ctx(), (send, remote_leader, tag), (recv, from, tag))
            .map(drop)
    }

    /// What the other group's leader sends for `ours` (`len` words), given to every
    /// member of this group (collective over both groups).
    fn swap_across(&self, ours: &[u64], len: usize) -> Result<Vec<u64>> {
        let local = self.local()?;
        let mut theirs = vec![0u64; len];
        // Every member takes the tag, so that the next collective's agrees at both sides.
        let tag = self.next_coll_tag();
        if local.rank() == 0 {
            self.leaders_swap(ours, &mut theirs, tag)?;
        }
        local.bcast(&mut theirs, 0)?;
        Ok(theirs)
    }

    /// `wanted` context ids free at every member of both groups (collective over both
    /// groups): the first for a new intercommunicator, the next for each side's own
    /// group (disjoint groups may share that one).
    fn ids_both_sides(&self, wanted: usize) -> Result<Vec<u32>> {
        self.local()?
            .ids_across(wanted, |ours| self.swap_across(ours, ours.len()))
    }

    /// An intercommunicator with the same groups and a new context (MPI_Comm_dup).
    pub(crate) fn inter_dup(&self) -> Result<Comm<'u>> {
        let ids = self.ids_both_sides(2)?;
        let remote = self.remote()?.group.members().to_vec();
        let c = self.inter_on(self.d.group.members().to_vec(), remote, ids[0], ids[1]);
        crate::comm::attr::copy_all(self, &c)?;
        Ok(c)
    }

    /// MPI_Comm_split of an intercommunicator: the members of each color in each group
    /// make an intercommunicator with the other group's members of that color (ordered
    /// by `key`, then rank). `None` for `UNDEFINED`, or when the other group has no
    /// member of this color.
    pub(crate) fn inter_split(&self, color: i32, key: i32) -> Result<Option<Comm<'u>>> {
        let local = self.local()?;
        // Signed values travel as words: colors and keys may be negative.
        let word = |v: i32| i64::from(v) as u64;
        let mut ours = vec![0u64; 2 * local.size() as usize];
        local.allgather(&[word(color), word(key)], &mut ours)?;
        let remote_n = self.remote_size()? as usize;
        let their_colors = self.swap_across(&ours, 2 * remote_n)?;
        let ids = self.ids_both_sides(2)?;
        let part = |colors: &[u64], members: &[Rank]| -> Vec<Rank> {
            let mut same: Vec<(i64, usize)> = (0..members.len())
                .filter(|&r| colors[2 * r] == word(color))
                .map(|r| (colors[2 * r + 1] as i64, r))
                .collect();
            same.sort();
            same.iter().map(|&(_, r)| members[r]).collect()
        };
        let remote = part(&their_colors, self.remote()?.group.members());
        if color == UNDEFINED || remote.is_empty() {
            let mut pool = self.u.contexts.borrow_mut();
            ids.iter().for_each(|&id| pool.release(id));
            return Ok(None);
        }
        let local_members = part(&ours, self.d.group.members());
        Ok(Some(self.inter_on(local_members, remote, ids[0], ids[1])))
    }

    /// MPI_Comm_create of an intercommunicator (MPI-2.2): `group`, a subgroup of this
    /// side's group, with the other side's, as an intercommunicator; `None` for a
    /// process outside `group`, or when the other side's group is empty.
    pub(crate) fn inter_create(&self, group: &Group) -> Result<Option<Comm<'u>>> {
        let local = self.d.group.members();
        if let Some(outsider) = group.members().iter().find(|w| !local.contains(w)) {
            return Err(Error::Arg(format!(
                "create: job rank {outsider} of the group is not in the local group of this intercommunicator"
            )));
        }
        // The group's own order, as a split by one color keyed by the rank in the group.
        match group.rank() {
            Some(r) => self.inter_split(0, r as i32),
            None => self.inter_split(UNDEFINED, 0),
        }
    }

    /// One intracommunicator of both groups (MPI_Intercomm_merge): the group that says
    /// `high` false comes first; if both say the same, the group whose leader has the
    /// lower job rank.
    pub fn merge(&self, high: bool) -> Result<Comm<'u>> {
        let their_high = self.swap_across(&[u64::from(high)], 1)?[0] != 0;
        let id = self.ids_both_sides(1)?[0];
        let remote = self.remote()?.group.members();
        let first = if high != their_high {
            !high
        } else {
            self.d.group.members()[0] < remote[0]
        };
        let members: Vec<Rank> = if first {
            self.d.group.members().iter().chain(remote).copied().collect()
        } else {
            remote.iter().chain(self.d.group.members()).copied().collect()
        };
        let me = self.u.rank();
        let d = new_comm_data(Group::new(members, me), id, self.u.world_size(), "", false);
        Ok(Comm {
            u: self.u,
            d: Rc::new(d),
        })
    }

    /// Runs `what` on this intercommunicator to the end (MPI_Barrier, MPI_Bcast, … on
    /// an intercommunicator): `input` and `output` are packed bytes as
    /// [`InterColl`](crate::coll::InterColl) describes them; `reduction` for the
    /// reducing ones.
    pub fn inter_collective(
        &self,
        what: &crate::coll::InterColl,
        reduction: Option<(&Op, &Datatype)>,
        input: &[u8],
        output: &mut [u8],
    ) -> Result<()> {
        let plan = self.plan_inter(what, reduction)?;
        self.run_plan(plan, input, output)
    }
}
