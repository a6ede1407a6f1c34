//! Test program: communicator management. 10,000 dup/split/free cycles must leave
//! the context ids as they were; communicators created at the same time by disjoint
//! sets of ranks must not see each other's messages; attributes are copied by dup
//! and deleted (callbacks run) on replace, delete, free and finalize.

use std::cell::RefCell;
use std::rc::Rc;

use pontoon::{Compare, Error, Keyval, Op, ANY_TAG, UNDEFINED};

mod common;
use common::ensure;

fn main() -> Result<(), Error> {
    let cycles: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let universe = pontoon::init()?;
    let world = universe.world();
    let (me, p) = (world.rank(), world.size());
    let baseline = universe.contexts_in_use();

    // Cycles of creation and freeing: ids must come back.
    for i in 0..cycles {
        let d = world.dup()?;
        let s = d.split((me % 3) as i32, 0)?.expect("colored");
        if i % 1000 == 0 {
            s.barrier()?;
        }
        s.free()?;
        d.free()?;
    }
    ensure(universe.contexts_in_use() == baseline, || {
        format!(
            "{} context ids in use after {cycles} cycles, {baseline} before",
            universe.contexts_in_use()
        )
    })?;
    println!("rank {me}: {cycles} dup/split/free cycles, {baseline} context ids in use before and after");

    // The ranks of this node (MPI_COMM_TYPE_SHARED), by the node the transports use.
    let node = world.split_by_node(0)?.expect("every rank has a node");
    let here = world.universe().node(me);
    let node_peers = (0..p).filter(|&r| world.universe().node(r) == here).count() as u32;
    ensure(node.size() == node_peers, || {
        format!(
            "node communicator of {} ranks, {node_peers} on this node",
            node.size()
        )
    })?;
    println!("rank {me}: {} ranks on this node", node.size());

    // Split: keys order the new ranks (backwards here); UNDEFINED opts out.
    let back = world.split(0, -(me as i32))?.expect("one color");
    ensure(back.rank() == p - 1 - me, || {
        format!("split by key: rank {} at {me}", back.rank())
    })?;
    let none = world.split(if me == 0 { UNDEFINED } else { 1 }, 0)?;
    ensure(none.is_none() == (me == 0), || {
        "UNDEFINED joins no communicator".into()
    })?;
    if let Some(rest) = &none {
        ensure(rest.size() == p - 1 && rest.rank() == me - 1, || {
            "the others keep their order".into()
        })?;
    }

    // Disjoint halves create communicators at once; traffic stays in each.
    let half = world.split((me % 2) as i32, 0)?.expect("colored");
    let inner = half.dup()?;
    if half.size() > 1 {
        let peer = (half.rank() + 1) % half.size();
        let from = (half.rank() + half.size() - 1) % half.size();
        // The same tag on three communicators: each receive gets its own communicator's message.
        let tag = 7;
        inner.send(&[1000 + me], peer, tag)?;
        half.send(&[2000 + me], peer, tag)?;
        let mut a = [0u32];
        let st = half.recv(&mut a, None, ANY_TAG)?;
        ensure(st.source == from && a[0] >= 2000, || {
            format!("half got {a:?} from {}", st.source)
        })?;
        let st = inner.recv(&mut a, Some(from), ANY_TAG)?;
        ensure(st.source == from && a[0] >= 1000 && a[0] < 2000, || {
            format!("inner got {a:?}")
        })?;
    }
    // A collective on world while p2p with ANY_TAG is posted: neither takes the other's message.
    if p > 1 {
        let req = world.irecv(vec![0u32; 1], Some((me + p - 1) % p), ANY_TAG)?;
        let mut sum = [0u32];
        world.allreduce(&[1u32], &mut sum, &Op::Sum)?;
        ensure(sum[0] == p, || "allreduce beside a posted ANY_TAG receive".into())?;
        world.send(&[me], (me + 1) % p, 3)?;
        let (st, v) = req.wait();
        ensure(st?.tag == 3 && v[0] == (me + p - 1) % p, || {
            "the p2p message".into()
        })?;
    }

    // Groups and create.
    let evens: Vec<u32> = (0..p).step_by(2).collect();
    let g = world.group().incl(&evens, me)?;
    let made = world.create(&g)?;
    ensure(made.is_some() == (me % 2 == 0), || {
        "create gives members a communicator".into()
    })?;
    if let Some(c) = &made {
        ensure(c.group().compare(&half.group()) == Compare::Ident, || {
            "evens group".into()
        })?;
        ensure(c.compare(&half) == Compare::Congruent, || {
            "create vs split: congruent".into()
        })?;
    }
    ensure(world.compare(&world.clone()) == Compare::Ident, || "ident".into())?;
    let dupw = world.dup()?;
    ensure(world.compare(&dupw) == Compare::Congruent, || {
        "dup is congruent".into()
    })?;
    ensure(
        world.compare(&back)
            == if p > 1 {
                Compare::Similar
            } else {
                Compare::Congruent
            },
        || "reordered is similar".into(),
    )?;
    dupw.set_name("dup of world");
    ensure(
        dupw.name() == "dup of world" && world.name() == "MPI_COMM_WORLD",
        || "names".into(),
    )?;

    // Attributes: copy on dup, delete on replace, delete, free and at finalize.
    let log: Rc<RefCell<Vec<String>>> = Rc::default();
    let (l1, l2) = (log.clone(), log.clone());
    let kv = Keyval::new(
        Some(Box::new(move |_, v| {
            l1.borrow_mut().push(format!("copy {v}"));
            Ok(Some(v + 1))
        })),
        Some(Box::new(move |c, v| {
            l2.borrow_mut().push(format!("delete {v} from {}", c.name()));
            Ok(())
        })),
    );
    let not_copied = Keyval::new(None, None);
    dupw.set_attr(&kv, 10)?;
    dupw.set_attr(&not_copied, 5)?;
    let d2 = dupw.dup()?;
    d2.set_name("d2");
    ensure(
        d2.get_attr(&kv) == Some(11) && d2.get_attr(&not_copied).is_none(),
        || "dup copies".into(),
    )?;
    dupw.set_attr(&kv, 20)?;
    dupw.delete_attr(&kv)?;
    d2.free()?;
    drop(kv); // the keyval is freed; the value on world below keeps its callbacks
    let expected = [
        "copy 10",
        "delete 10 from dup of world",
        "delete 20 from dup of world",
        "delete 11 from d2",
    ];
    ensure(*log.borrow() == expected, || {
        format!("attribute callbacks: {:?}", log.borrow())
    })?;
    let fin = Keyval::new(
        None,
        Some(Box::new(move |c, v| {
            println!("rank {me}: finalize deleted attribute {v} of {}", c.name());
            Ok(())
        })),
    );
    world.set_attr(&fin, 42)?;
    universe.self_comm().set_attr(&fin, 7)?;
    ensure(world.tag_ub() >= 32767, || "TAG_UB".into())?;
    println!("rank {me}: communicators, groups and attributes behave");
    drop((back, none, half, inner, made, dupw));
    universe.finalize()
}
