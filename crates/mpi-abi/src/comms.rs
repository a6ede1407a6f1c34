//! Communicators, groups and attributes.

use std::ffi::c_char;
use std::os::raw::c_int;

use pontoon::{Comm, Compare, Group, Keyval};

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Res};
use crate::callbacks::{CopyAttr, DeleteAttr, Opaque};
use crate::cargs::{In, Out};
use crate::mpi_fn;
use crate::state::{mpi, Mpi};

fn compare_value(c: Compare) -> c_int {
    match c {
        Compare::Ident => MPI_IDENT,
        Compare::Congruent => MPI_CONGRUENT,
        Compare::Similar => MPI_SIMILAR,
        Compare::Unequal => MPI_UNEQUAL,
    }
}

/// Registers a new communicator (or MPI_COMM_NULL) in `*newcomm`; it inherits the
/// error handler of the communicator it came from.
pub(crate) fn publish(m: &Mpi, parent: MPI_Comm, made: Option<Comm<'static>>, newcomm: &mut MPI_Comm) -> Res {
    *newcomm = match made {
        Some(c) => m.add_comm(c, m.comm_errhandler(parent).unwrap_or(MPI_ERRORS_ARE_FATAL))?,
        None => MPI_COMM_NULL,
    };
    Ok(())
}

mpi_fn! {
    fn MPI_Comm_size(comm: MPI_Comm, size: Out<c_int>) on comm {
        size.set("size", mpi()?.comm(comm)?.size() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Comm_rank(comm: MPI_Comm, rank: Out<c_int>) on comm {
        rank.set("rank", mpi()?.comm(comm)?.rank() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Comm_dup(comm: MPI_Comm, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        let newcomm = newcomm.place("newcomm")?;
        // A failed dup (a copy callback refused) leaves no communicator behind.
        *newcomm = MPI_COMM_NULL;
        let made = m.comm(comm)?.dup()?;
        publish(m, comm, Some(made), newcomm)
    }
}

mpi_fn! {
    fn MPI_Comm_dup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        crate::info::accepted(info)?;
        let newcomm = newcomm.place("newcomm")?;
        // A failed dup (a copy callback refused) leaves no communicator behind.
        *newcomm = MPI_COMM_NULL;
        let made = m.comm(comm)?.dup()?;
        publish(m, comm, Some(made), newcomm)
    }
}

/// MPI_Comm_idup(_with_info): the request completes once the members agreed on a context
/// (in the background, `pontoon::coll::idup`); its completion makes the communicator and
/// writes its handle to `newcomm`, which the program must leave alone until then.
fn idup(comm: MPI_Comm, newcomm: Out<MPI_Comm>, request: Out<MPI_Request>) -> Res {
    let m = mpi()?;
    let (target, request) = (newcomm.place("newcomm")?, request.place("request")?);
    *target = MPI_COMM_NULL;
    let (op, result) = m.comm(comm)?.start_idup()?;
    let finish: crate::state::Finish = Box::new(move || {
        let made = result.communicator()?;
        // The program keeps `newcomm` for this request's completion (MPI's rule).
        let target = newcomm.place("newcomm")?;
        publish(mpi()?, comm, Some(made), target)
    });
    crate::requests::start(
        m,
        request,
        crate::state::ReqEntry::Coll {
            op,
            comm,
            finish: Some(finish),
        },
    )
}

mpi_fn! {
    fn MPI_Comm_idup(comm: MPI_Comm, newcomm: Out<MPI_Comm>, request: Out<MPI_Request>) on comm {
        idup(comm, newcomm, request)
    }
}

mpi_fn! {
    fn MPI_Comm_idup_with_info(comm: MPI_Comm, info: MPI_Info, newcomm: Out<MPI_Comm>, request: Out<MPI_Request>) on comm {
        crate::info::accepted(info)?;
        idup(comm, newcomm, request)
    }
}

mpi_fn! {
    fn MPI_Comm_set_info(comm: MPI_Comm, info: MPI_Info) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        crate::info::accepted(info)
    }
}

mpi_fn! {
    /// No hint is in use, so the info is empty.
    fn MPI_Comm_get_info(comm: MPI_Comm, info_used: Out<MPI_Info>) on comm {
        let m = mpi()?;
        m.comm(comm)?;
        info_used.set("info_used", crate::info::add(Vec::new())?)?;
        Ok(())
    }
}

/// A key naming this process's node, the same at every rank on it.
const RESOURCE_KEY: &str = "mpi_hw_resource_type";
const SHARED_MEMORY: &str = "mpi_shared_memory";

mpi_fn! {
    /// The one hardware resource pontoon knows is the node (shared memory):
    /// - MPI_COMM_TYPE_SHARED: the ranks of this node;
    /// - _HW_GUIDED and _RESOURCE_GUIDED: the same when the info asks for
    ///   `mpi_hw_resource_type=mpi_shared_memory`, else MPI_COMM_NULL;
    /// - _HW_UNGUIDED: the node when it is smaller than `comm` (the info then names it),
    ///   else MPI_COMM_NULL.
    fn MPI_Comm_split_type(comm: MPI_Comm, split_type: c_int, key: c_int, info: MPI_Info, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        crate::info::accepted(info)?;
        let newcomm = newcomm.place("newcomm")?;
        let c = m.comm(comm)?;
        let asks_shared = info != MPI_INFO_NULL
            && crate::info::entries(info)?.iter().any(|(k, v)| k == RESOURCE_KEY && v == SHARED_MEMORY);
        let by_node = match split_type {
            MPI_COMM_TYPE_SHARED | MPI_COMM_TYPE_HW_UNGUIDED => true,
            MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_RESOURCE_GUIDED => asks_shared,
            _ => false,
        };
        let mut made = if by_node { c.split_by_node(key)? } else { c.split(MPI_UNDEFINED, key)? };
        if split_type == MPI_COMM_TYPE_HW_UNGUIDED {
            // Every part is smaller than `comm` or none is: the ranks agree.
            if made.as_ref().is_some_and(|n| n.size() == c.size()) {
                made = None;
            } else if made.is_some() && info != MPI_INFO_NULL {
                crate::info::set(info, RESOURCE_KEY, SHARED_MEMORY)?;
            }
        }
        publish(m, comm, made, newcomm)
    }
}

mpi_fn! {
    fn MPI_Comm_split(comm: MPI_Comm, color: c_int, key: c_int, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        let newcomm = newcomm.place("newcomm")?;
        let made = m.comm(comm)?.split(color, key)?;
        publish(m, comm, made, newcomm)
    }
}

mpi_fn! {
    fn MPI_Comm_create(comm: MPI_Comm, group: MPI_Group, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        let newcomm = newcomm.place("newcomm")?;
        let g = m.group(group)?;
        let made = m.comm(comm)?.create(&g)?;
        publish(m, comm, made, newcomm)
    }
}

mpi_fn! {
    /// Collective over `group`'s members only; others get MPI_COMM_NULL at once.
    fn MPI_Comm_create_group(comm: MPI_Comm, group: MPI_Group, tag: c_int, newcomm: Out<MPI_Comm>) on comm {
        let m = mpi()?;
        let newcomm = newcomm.place("newcomm")?;
        if tag < 0 {
            return fail(MPI_ERR_TAG, format!("tag {tag} is negative"));
        }
        let g = m.group(group)?;
        let made = m.comm(comm)?.create_group(&g, tag)?;
        publish(m, comm, made, newcomm)
    }
}

mpi_fn! {
    /// MPI-4.0, without a parent: collective over `group`'s members, which must all call
    /// it with the same `stringtag`. Every group is part of MPI_COMM_WORLD's here (pontoon
    /// has no sessions), so the members agree on a context over it, with a tag derived
    /// from `stringtag` that keeps concurrent creations apart.
    fn MPI_Comm_create_from_group(group: MPI_Group, stringtag: In<c_char>, info: MPI_Info, errhandler: MPI_Errhandler, newcomm: Out<MPI_Comm>) {
        let m = mpi()?;
        let newcomm = newcomm.place("newcomm")?;
        let tag = stringtag.str("stringtag")?;
        crate::info::accepted(info)?;
        let errhandler = if errhandler == MPI_ERRHANDLER_NULL { MPI_ERRORS_ARE_FATAL } else { errhandler };
        crate::errors::errhandler_ok(m, errhandler)?;
        let g = m.group(group)?;
        if g.rank().is_none() {
            return fail(MPI_ERR_GROUP, "MPI_Comm_create_from_group: this process is not a member of the group");
        }
        let made = m.comm(MPI_COMM_WORLD)?.create_group(&g, string_tag(tag))?;
        *newcomm = match made {
            Some(c) => m.add_comm(c, errhandler)?,
            None => MPI_COMM_NULL,
        };
        Ok(())
    }
}

/// A non-negative tag from a string tag, the same in every process (FNV-1a, 30 bits).
fn string_tag(s: &str) -> i32 {
    let hash = s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash & 0x3fff_ffff) as i32
}

mpi_fn! {
    fn MPI_Comm_free(comm: Out<MPI_Comm>) {
        let m = mpi()?;
        let h = comm.place("comm")?;
        let c = m.comm(*h).map_err(|f| f.on(MPI_COMM_SELF))?;
        if *h == MPI_COMM_WORLD || *h == MPI_COMM_SELF {
            return fail(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed");
        }
        // Delete callbacks run while the handle still names the communicator.
        let freed = c.free();
        crate::bsend::forget_comm(m, *h);
        m.remove_comm(*h)?;
        *h = MPI_COMM_NULL;
        Ok(freed?)
    }
}

mpi_fn! {
    fn MPI_Comm_compare(comm1: MPI_Comm, comm2: MPI_Comm, result: Out<c_int>) on comm1 {
        let m = mpi()?;
        let (a, b) = (m.comm(comm1)?, m.comm(comm2)?);
        result.set("result", compare_value(a.compare(&b)))?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Comm_test_inter(comm: MPI_Comm, flag: Out<c_int>) on comm {
        flag.set("flag", mpi()?.comm(comm)?.is_inter() as c_int)?;
        Ok(())
    }
}

/// The root argument of a collective on an intercommunicator.
pub(crate) fn inter_root(c: &Comm, root: c_int) -> Result<pontoon::InterRoot, Fail> {
    let remote = c.remote_size()?;
    match root {
        MPI_ROOT => Ok(pontoon::InterRoot::Here),
        MPI_PROC_NULL => Ok(pontoon::InterRoot::ElsewhereHere),
        r if r >= 0 && (r as u32) < remote => Ok(pontoon::InterRoot::Remote(r as u32)),
        r => fail(
            MPI_ERR_ROOT,
            format!(
                "root {r} on an intercommunicator: MPI_ROOT at the root, MPI_PROC_NULL elsewhere in its \
                 group, or a rank of the remote group of {remote}"
            ),
        ),
    }
}

mpi_fn! {
    fn MPI_Comm_remote_size(comm: MPI_Comm, size: Out<c_int>) on comm {
        let c = mpi()?.comm(comm)?;
        let n = c.remote_size().map_err(|_| Fail::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        size.set("size", n as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Comm_remote_group(comm: MPI_Comm, group: Out<MPI_Group>) on comm {
        let m = mpi()?;
        let g = m.comm(comm)?.remote_group().map_err(|_| Fail::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        group.set("group", m.add_group(g)?)?;
        Ok(())
    }
}

mpi_fn! {
    /// Collective over `local_comm`; its `local_leader` and `peer_comm`'s `remote_leader`
    /// exchange the two groups on `peer_comm` with `tag`.
    fn MPI_Intercomm_create(local_comm: MPI_Comm, local_leader: c_int, peer_comm: MPI_Comm, remote_leader: c_int, tag: c_int, newintercomm: Out<MPI_Comm>) on local_comm {
        let m = mpi()?;
        let newintercomm = newintercomm.place("newintercomm")?;
        let local = m.comm(local_comm)?;
        if local_leader < 0 || local_leader as u32 >= local.size() {
            return fail(MPI_ERR_RANK, format!("local leader {local_leader} is not a rank of the local communicator"));
        }
        // Only the leaders use the peer communicator.
        let at_leader = local.rank() == local_leader as u32;
        let peer = if at_leader { m.comm(peer_comm)? } else { local.clone() };
        if at_leader && (remote_leader < 0 || remote_leader as u32 >= peer.size()) {
            return fail(MPI_ERR_RANK, format!("remote leader {remote_leader} is not a rank of the peer communicator"));
        }
        if tag < 0 {
            return fail(MPI_ERR_TAG, format!("tag {tag} is negative"));
        }
        let made = local.intercomm_create(local_leader as u32, &peer, remote_leader.max(0) as u32, tag)?;
        publish(m, local_comm, Some(made), newintercomm)
    }
}

mpi_fn! {
    /// MPI-4.0, without a parent: both groups are part of MPI_COMM_WORLD's here (no
    /// sessions), so the local group becomes a communicator as in
    /// MPI_Comm_create_from_group, and the leaders meet on MPI_COMM_WORLD with a tag
    /// derived from `stringtag`.
    fn MPI_Intercomm_create_from_groups(local_group: MPI_Group, local_leader: c_int, remote_group: MPI_Group, remote_leader: c_int, stringtag: In<c_char>, info: MPI_Info, errhandler: MPI_Errhandler, newintercomm: Out<MPI_Comm>) {
        let m = mpi()?;
        let newintercomm = newintercomm.place("newintercomm")?;
        let tag = string_tag(stringtag.str("stringtag")?);
        crate::info::accepted(info)?;
        let errhandler = if errhandler == MPI_ERRHANDLER_NULL { MPI_ERRORS_ARE_FATAL } else { errhandler };
        crate::errors::errhandler_ok(m, errhandler)?;
        let (local, remote) = (m.group(local_group)?, m.group(remote_group)?);
        if local.rank().is_none() {
            return fail(MPI_ERR_GROUP, "MPI_Intercomm_create_from_groups: this process is not in the local group");
        }
        let leader_of = |g: &Group, r: c_int, which: &str| {
            g.members().get(usize::try_from(r).unwrap_or(usize::MAX)).copied().ok_or_else(|| {
                Fail::new(MPI_ERR_RANK, format!("{which} leader {r} is not a rank of the {which} group of {}", g.size()))
            })
        };
        leader_of(&local, local_leader, "local")?;
        let remote_leader = leader_of(&remote, remote_leader, "remote")?;
        let world = m.comm(MPI_COMM_WORLD)?;
        let own = world
            .create_group(&local, tag)?
            .ok_or_else(|| Fail::new(MPI_ERR_GROUP, "this process is not in the local group"))?;
        let made = own.intercomm_create(local_leader as u32, &world, remote_leader, tag)?;
        *newintercomm = m.add_comm(made, errhandler)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Intercomm_merge(intercomm: MPI_Comm, high: c_int, newintracomm: Out<MPI_Comm>) on intercomm {
        let m = mpi()?;
        let newintracomm = newintracomm.place("newintracomm")?;
        let c = m.comm(intercomm)?;
        if !c.is_inter() {
            return fail(MPI_ERR_COMM, "MPI_Intercomm_merge needs an intercommunicator");
        }
        let made = c.merge(high != 0)?;
        publish(m, intercomm, Some(made), newintracomm)
    }
}

mpi_fn! {
    fn MPI_Comm_set_name(comm: MPI_Comm, comm_name: In<c_char>) on comm {
        let c = mpi()?.comm(comm)?;
        c.set_name(comm_name.str("comm_name")?);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Comm_get_name(comm: MPI_Comm, comm_name: Out<c_char>, resultlen: Out<c_int>) on comm {
        if comm == MPI_COMM_NULL {
            return comm_name.put_str(MPI_MAX_OBJECT_NAME, "MPI_COMM_NULL", &resultlen);
        }
        let c = mpi()?.comm(comm)?;
        comm_name.put_str(MPI_MAX_OBJECT_NAME, &c.name(), &resultlen)
    }
}

mpi_fn! {
    fn MPI_Comm_group(comm: MPI_Comm, group: Out<MPI_Group>) on comm {
        let m = mpi()?;
        let g = m.comm(comm)?.group();
        group.set("group", m.add_group(g)?)?;
        Ok(())
    }
}

// ---- groups --------------------------------------------------------------------

fn me(m: &Mpi) -> u32 {
    m.u.world().rank()
}

fn ranks_arg(p: In<c_int>, n: c_int, what: &str) -> Result<Vec<u32>, Fail> {
    let v = p.slice(count(n as i64, "n")? as usize, what)?;
    v.iter()
        .map(|r| u32::try_from(*r).map_err(|_| Fail::new(MPI_ERR_RANK, format!("rank {r} is negative"))))
        .collect()
}

fn new_group(m: &Mpi, made: pontoon::Result<Group>, newgroup: Out<MPI_Group>) -> Res {
    let g = made.map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))?;
    let h = if g.size() == 0 {
        MPI_GROUP_EMPTY
    } else {
        m.add_group(g)?
    };
    newgroup.set("newgroup", h)
}

mpi_fn! {
    fn MPI_Group_size(group: MPI_Group, size: Out<c_int>) {
        size.set("size", mpi()?.group(group)?.size() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Group_rank(group: MPI_Group, rank: Out<c_int>) {
        rank.set("rank", mpi()?.group(group)?.rank().map_or(MPI_UNDEFINED, |r| r as c_int))?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Group_incl(group: MPI_Group, n: c_int, ranks: In<c_int>, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let g = m.group(group)?;
        new_group(m, g.incl(&ranks_arg(ranks, n, "ranks")?, me(m)), newgroup)
    }
}

mpi_fn! {
    fn MPI_Group_excl(group: MPI_Group, n: c_int, ranks: In<c_int>, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let g = m.group(group)?;
        new_group(m, g.excl(&ranks_arg(ranks, n, "ranks")?, me(m)), newgroup)
    }
}

fn range_ranks(g: &Group, n: c_int, ranges: In<[c_int; 3]>) -> Result<Vec<u32>, Fail> {
    let r = ranges.slice(count(n as i64, "n")? as usize, "ranges")?;
    let triples: Vec<(i32, i32, i32)> = r.iter().map(|t| (t[0], t[1], t[2])).collect();
    g.range_ranks(&triples)
        .map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))
}

mpi_fn! {
    fn MPI_Group_range_incl(group: MPI_Group, n: c_int, ranges: In<[c_int; 3]>, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let g = m.group(group)?;
        let ranks = range_ranks(&g, n, ranges)?;
        new_group(m, g.incl(&ranks, me(m)), newgroup)
    }
}

mpi_fn! {
    fn MPI_Group_range_excl(group: MPI_Group, n: c_int, ranges: In<[c_int; 3]>, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let g = m.group(group)?;
        let ranks = range_ranks(&g, n, ranges)?;
        new_group(m, g.excl(&ranks, me(m)), newgroup)
    }
}

mpi_fn! {
    fn MPI_Group_union(group1: MPI_Group, group2: MPI_Group, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        new_group(m, Ok(a.union(&b, me(m))), newgroup)
    }
}

mpi_fn! {
    fn MPI_Group_intersection(group1: MPI_Group, group2: MPI_Group, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        new_group(m, Ok(a.intersection(&b, me(m))), newgroup)
    }
}

mpi_fn! {
    fn MPI_Group_difference(group1: MPI_Group, group2: MPI_Group, newgroup: Out<MPI_Group>) {
        let m = mpi()?;
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        new_group(m, Ok(a.difference(&b, me(m))), newgroup)
    }
}

mpi_fn! {
    fn MPI_Group_translate_ranks(group1: MPI_Group, n: c_int, ranks1: In<c_int>, group2: MPI_Group, ranks2: Out<c_int>) {
        let m = mpi()?;
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        let given = ranks1.slice(count(n as i64, "n")? as usize, "ranks1")?;
        let result = ranks2.slice(given.len(), "ranks2")?;
        // MPI_PROC_NULL translates to itself; the rest through the groups.
        let real: Vec<u32> = given.iter().filter(|r| **r != MPI_PROC_NULL).map(|r| *r as u32).collect();
        let mut mapped = a.translate_ranks(&real, &b).map_err(|e| Fail::new(MPI_ERR_RANK, e.to_string()))?.into_iter();
        for (r, g) in result.iter_mut().zip(given) {
            *r = if *g == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                mapped.next().flatten().map_or(MPI_UNDEFINED, |x| x as c_int)
            };
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Group_compare(group1: MPI_Group, group2: MPI_Group, result: Out<c_int>) {
        let m = mpi()?;
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        result.set("result", compare_value(a.compare(&b)))?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Group_free(group: Out<MPI_Group>) {
        let m = mpi()?;
        let h = group.place("group")?;
        if *h != MPI_GROUP_EMPTY && m.groups.borrow_mut().remove(*h).is_none() {
            return fail(MPI_ERR_GROUP, format!("{:#x} is not a group", *h));
        }
        *h = MPI_GROUP_NULL;
        Ok(())
    }
}

// ---- attributes ----------------------------------------------------------------

/// C keyvals are the library's keyval ids past the predefined attribute keys.
const KEYVAL_BASE: c_int = 1024;

/// Values of the predefined attributes, which C reads through a pointer.
static TAG_UB_VALUE: c_int = i32::MAX;
static HOST_VALUE: c_int = MPI_PROC_NULL;
static IO_VALUE: c_int = MPI_ANY_SOURCE;
static WTIME_IS_GLOBAL_VALUE: c_int = 0;
/// MPI_LASTUSEDCODE, read through a pointer, updated when asked for.
static LAST_USED: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(MPI_ERR_LASTCLASS);

mpi_fn! {
    fn MPI_Comm_create_keyval(copy_fn: CopyAttr, delete_fn: DeleteAttr, keyval: Out<c_int>, extra_state: Opaque) {
        create_keyval(copy_fn, delete_fn, keyval, extra_state)
    }
}

mpi_fn! {
    /// MPI-1's name, deprecated but still defined (older programs call it).
    fn MPI_Keyval_create(copy_fn: CopyAttr, delete_fn: DeleteAttr, keyval: Out<c_int>, extra_state: Opaque) {
        create_keyval(copy_fn, delete_fn, keyval, extra_state)
    }
}

fn create_keyval(copy_fn: CopyAttr, delete_fn: DeleteAttr, keyval: Out<c_int>, extra_state: Opaque) -> Res {
    let m = mpi()?;
    let keyval = keyval.place("comm_keyval")?;
    let extra = extra_state.bits();
    let id = std::rc::Rc::new(std::cell::Cell::new(0));
    let handle = |c: &Comm<'_>| mpi().map(|m| m.handle_of_comm(c)).unwrap_or(MPI_COMM_NULL);
    let delete = {
        let id = id.clone();
        Box::new(move |c: &Comm<'_>, v: usize| {
            callback_result(
                "attribute delete",
                delete_fn.delete(handle(c), id.get(), v, extra),
            )
        }) as pontoon::DeleteFn
    };
    let copy = {
        let id = id.clone();
        Box::new(move |c: &Comm<'_>, v: usize| {
            let copied = copy_fn.copy(handle(c), id.get(), extra, v);
            copied.map_err(|code| pontoon::Error::Callback {
                what: "attribute copy",
                code,
            })
        }) as pontoon::CopyFn
    };
    let kv = Keyval::new(Some(copy), Some(delete));
    let k = KEYVAL_BASE + kv.id() as c_int;
    id.set(k);
    m.keyvals.borrow_mut().insert(k, kv);
    *keyval = k;
    Ok(())
}

fn callback_result(what: &'static str, rc: c_int) -> pontoon::Result<()> {
    if rc == MPI_SUCCESS {
        Ok(())
    } else {
        Err(pontoon::Error::Callback { what, code: rc })
    }
}

/// The keyval `k` names: a live one, or for reading and deleting values (`retired`
/// allowed) one the program freed while values set with it remain.
fn keyval(m: &Mpi, k: c_int, retired: bool) -> Result<Keyval, Fail> {
    if let Some(kv) = m.keyvals.borrow().get(&k) {
        return Ok(kv.clone());
    }
    let mut old = m.retired_keyvals.borrow_mut();
    old.retain(|_, kv| kv.in_use());
    match old.get(&k) {
        Some(kv) if retired => Ok(kv.clone()),
        _ => fail(
            MPI_ERR_KEYVAL,
            format!("{k} is not a communicator keyval (freed already?)"),
        ),
    }
}

mpi_fn! {
    fn MPI_Comm_free_keyval(keyval: Out<c_int>) {
        free_keyval(keyval)
    }
}

mpi_fn! {
    /// MPI-1's name, deprecated but still defined.
    fn MPI_Keyval_free(keyval: Out<c_int>) {
        free_keyval(keyval)
    }
}

fn free_keyval(keyval: Out<c_int>) -> Res {
    let m = mpi()?;
    let k = keyval.place("comm_keyval")?;
    let Some(kv) = m.keyvals.borrow_mut().remove(k) else {
        return fail(MPI_ERR_KEYVAL, format!("{} is not a communicator keyval", *k));
    };
    // Values set with it keep it alive, and usable through its number, until deleted.
    if kv.in_use() {
        m.retired_keyvals.borrow_mut().insert(*k, kv);
    }
    *k = MPI_KEYVAL_INVALID;
    Ok(())
}

mpi_fn! {
    fn MPI_Comm_set_attr(comm: MPI_Comm, keyval_: c_int, attribute_val: Opaque) on comm {
        set_attr(comm, keyval_, attribute_val)
    }
}

mpi_fn! {
    /// MPI-1's name, deprecated but still defined.
    fn MPI_Attr_put(comm: MPI_Comm, keyval_: c_int, attribute_val: Opaque) on comm {
        set_attr(comm, keyval_, attribute_val)
    }
}

fn set_attr(comm: MPI_Comm, keyval_: c_int, attribute_val: Opaque) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    if keyval_ < KEYVAL_BASE {
        return fail(
            MPI_ERR_KEYVAL,
            format!("keyval {keyval_} is predefined and read-only"),
        );
    }
    c.set_attr(&keyval(m, keyval_, false)?, attribute_val.bits())?;
    Ok(())
}

mpi_fn! {
    fn MPI_Comm_get_attr(comm: MPI_Comm, keyval_: c_int, attribute_val: Out<usize>, flag: Out<c_int>) on comm {
        get_attr(comm, keyval_, attribute_val, flag)
    }
}

mpi_fn! {
    /// MPI-1's name, deprecated but still defined.
    fn MPI_Attr_get(comm: MPI_Comm, keyval_: c_int, attribute_val: Out<usize>, flag: Out<c_int>) on comm {
        get_attr(comm, keyval_, attribute_val, flag)
    }
}

/// `attribute_val` receives the value set (C declares it `void *`: it points to a
/// `void *`), or for a predefined attribute the address of its `int`.
fn get_attr(comm: MPI_Comm, keyval_: c_int, attribute_val: Out<usize>, flag: Out<c_int>) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let flag = flag.place("flag")?;
    let predefined: Option<*const c_int> = match keyval_ {
        MPI_TAG_UB => Some(&TAG_UB_VALUE),
        MPI_HOST => Some(&HOST_VALUE),
        MPI_IO => Some(&IO_VALUE),
        MPI_WTIME_IS_GLOBAL => Some(&WTIME_IS_GLOBAL_VALUE),
        MPI_LASTUSEDCODE => {
            LAST_USED.store(
                crate::errors::last_used_code(),
                std::sync::atomic::Ordering::Relaxed,
            );
            Some(LAST_USED.as_ptr() as *const c_int)
        }
        MPI_UNIVERSE_SIZE | MPI_APPNUM => None,
        _ => {
            let value = c.get_attr(&keyval(m, keyval_, true)?);
            *flag = value.is_some() as c_int;
            if let Some(v) = value {
                attribute_val.set("attribute_val", v)?;
            }
            return Ok(());
        }
    };
    // MPI_UNIVERSE_SIZE and MPI_APPNUM: not set (no dynamic processes).
    *flag = predefined.is_some() as c_int;
    if let Some(p) = predefined {
        attribute_val.set("attribute_val", p as usize)?;
    }
    Ok(())
}

mpi_fn! {
    fn MPI_Comm_delete_attr(comm: MPI_Comm, keyval_: c_int) on comm {
        delete_attr(comm, keyval_)
    }
}

mpi_fn! {
    /// MPI-1's name, deprecated but still defined.
    fn MPI_Attr_delete(comm: MPI_Comm, keyval_: c_int) on comm {
        delete_attr(comm, keyval_)
    }
}

fn delete_attr(comm: MPI_Comm, keyval_: c_int) -> Res {
    let m = mpi()?;
    let c = m.comm(comm)?;
    c.delete_attr(&keyval(m, keyval_, true)?)?;
    Ok(())
}

mpi_fn! {
    /// No virtual topologies yet: every communicator has none.
    fn MPI_Topo_test(comm: MPI_Comm, status: Out<c_int>) on comm {
        let c = mpi()?.comm(comm)?;
        status.set("status", match c.topology().as_deref() {
            Some(pontoon::Topology::Cart(_)) => MPI_CART,
            Some(pontoon::Topology::Graph { .. }) => MPI_GRAPH,
            Some(pontoon::Topology::DistGraph { .. }) => MPI_DIST_GRAPH,
            None => MPI_UNDEFINED,
        })?;
        Ok(())
    }
}

mpi_fn! {
    /// Not started by MPI_Comm_spawn: no parent.
    fn MPI_Comm_get_parent(parent: Out<MPI_Comm>) {
        mpi()?;
        parent.set("parent", MPI_COMM_NULL)?;
        Ok(())
    }
}
