//! Requests: completing them (wait/test in all their forms), cancelling, freeing.

use std::os::raw::c_int;

use crate::abi::*;
use crate::boundary::{count, fail, Fail, Res};
use crate::cargs::{In, Out};
use crate::mpi_fn;
use crate::state::{mpi, Mpi};
use crate::state::{Buffered, ReqEntry};
use crate::statuses::{empty_status, put_status, set_cancelled, status_of};

/// Runs a non-blocking start to completion (blocking forms built on non-blocking ones).
pub(crate) fn blocking(start: impl FnOnce(Out<MPI_Request>) -> Res) -> Res {
    let mut req = MPI_REQUEST_NULL;
    // SAFETY: a local request handle, valid while `start` runs.
    start(unsafe { Out::from_raw(&mut req) })?;
    wait_one(mpi()?, &mut req, Out::absent())
}

/// Gives `entry` a handle in `*request`.
pub fn start(m: &Mpi, request: &mut MPI_Request, entry: ReqEntry) -> Res {
    *request = m
        .reqs
        .borrow_mut()
        .insert(entry)
        .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many requests in flight"))?;
    Ok(())
}

fn bad_request(h: MPI_Request) -> Fail {
    Fail::new(
        MPI_ERR_REQUEST,
        format!("{h:#x} is not a request (completed or freed already?)"),
    )
}

/// Whether a request is finished (progressing once if it is not).
fn ready(m: &Mpi, h: MPI_Request) -> Result<bool, Fail> {
    match m.reqs.borrow_mut().get_mut(h) {
        Some(e) => Ok(entry_ready(e)),
        None => Err(bad_request(h)),
    }
}

fn entry_ready(e: &mut ReqEntry) -> bool {
    match e {
        ReqEntry::Done(_) | ReqEntry::Ended { .. } => true,
        ReqEntry::P2p { op, .. } => op.is_done(),
        ReqEntry::Coll { op, .. } => op.is_done(),
        ReqEntry::Persistent { active, .. } => active.as_mut().is_none_or(|a| entry_ready(a)),
        ReqEntry::Pair { recv, send } => entry_ready(recv) && entry_ready(send),
        ReqEntry::Flush(sends) => sends.iter().all(|s| s.borrow_mut().is_done()),
        ReqEntry::Bsend { send, cancelled } => !*cancelled || send.borrow_mut().is_done(),
        ReqEntry::Generalized(g) => g.completed,
    }
}

/// Completes an entry (blocking until it is done): its status, and its error if any
/// (raised on its communicator).
fn complete(entry: ReqEntry) -> (MPI_Status, Res) {
    let (mut op, comm, unpack) = match entry {
        ReqEntry::Done(st) => return (st, Ok(())),
        ReqEntry::Ended { status, result } => return (status, result),
        // Inactive: completes at once with the empty status.
        ReqEntry::Persistent { .. } => return (empty_status(), Ok(())),
        ReqEntry::Pair { recv, send } => {
            let (st, r) = complete(*recv);
            let (_, s) = complete(*send);
            return (st, r.and(s));
        }
        ReqEntry::P2p { op, comm, unpack } => (op, comm, unpack),
        ReqEntry::Flush(sends) => return (empty_status(), wait_buffered(sends)),
        ReqEntry::Bsend { cancelled: false, .. } => return (empty_status(), Ok(())),
        ReqEntry::Bsend { send, .. } => {
            let mut st = empty_status();
            let res = match finished(&send) {
                Ok(None) => {
                    set_cancelled(&mut st, true);
                    Ok(())
                }
                other => other.map(drop).map_err(Fail::from),
            };
            return (st, res);
        }
        ReqEntry::Generalized(g) => return g.finish(),
        ReqEntry::Coll { mut op, comm, finish } => {
            let res = op
                .wait()
                .map_err(Fail::from)
                .and_then(|_| finish.map_or(Ok(()), |f| f()));
            let mut st = empty_status();
            if let Err(f) = &res {
                st.MPI_ERROR = f.class;
            }
            return (st, res.map_err(|f| f.on(comm)));
        }
    };
    let result = op.wait();
    let (mut st, res) = match result {
        Ok(Some(st)) => (status_of(&st), Ok(st.bytes)),
        Ok(None) => {
            let mut st = empty_status();
            set_cancelled(&mut st, true);
            return (st, Ok(()));
        }
        Err(pontoon::Error::Truncated {
            source_rank,
            tag,
            count,
        }) => {
            let st = pontoon::Status {
                source: source_rank,
                tag,
                bytes: count,
            };
            let e = pontoon::Error::Truncated {
                source_rank,
                tag,
                count,
            };
            (status_of(&st), Err((count, Fail::from(e))))
        }
        Err(e) => (empty_status(), Err((0, Fail::from(e)))),
    };
    let arrived = match &res {
        Ok(b) => *b,
        Err((b, _)) => *b,
    };
    if let Some(u) = unpack {
        // The program's receive buffer, lent until this completion.
        let unpacked = u.buf.data_mut(u.count, &u.dt).and_then(|d| {
            Ok(u.dt.unpack(u.count, &u.tmp[..arrived as usize], d.bytes, d.origin)?)
        });
        if let Err(f) = unpacked {
            return (st, Err(f.on(comm)));
        }
    }
    match res {
        Ok(_) => (st, Ok(())),
        Err((_, f)) => {
            st.MPI_ERROR = f.class;
            (st, Err(f.on(comm)))
        }
    }
}

/// Waits for a buffered send and looks at its result (`Ok(None)`: cancelled).
fn finished(send: &Buffered) -> pontoon::Result<Option<pontoon::Status>> {
    loop {
        // Progresses once while it runs.
        let result = send.borrow_mut().peek();
        if let Some(r) = result {
            return r;
        }
        if let Ok(m) = mpi() {
            m.u.let_others_in();
        }
    }
}

/// Waits for every buffered send of a list; the first failure is the result.
pub fn wait_buffered(sends: Vec<Buffered>) -> Res {
    let mut first_error: Option<Fail> = None;
    for s in sends {
        if let Err(e) = finished(&s) {
            first_error.get_or_insert(e.into());
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Finishes requests freed while running, once they are done (a receive's data
/// still lands in the program's memory).
fn reap_detached(m: &Mpi) {
    let list = std::mem::take(&mut *m.detached.borrow_mut());
    for mut e in list {
        if entry_ready(&mut e) {
            let _ = complete(e);
        } else {
            m.detached.borrow_mut().push(e);
        }
    }
}

/// Waits for `*h`, writes its status, sets it to MPI_REQUEST_NULL.
pub fn wait_one(m: &Mpi, h: &mut MPI_Request, status: Out<MPI_Status>) -> Res {
    if *h == MPI_REQUEST_NULL {
        put_status(status, empty_status());
        return Ok(());
    }
    // A persistent request stays; its operation in flight completes.
    let in_flight = match m.reqs.borrow_mut().get_mut(*h) {
        Some(ReqEntry::Persistent { active, .. }) => Some(active.take()),
        Some(ReqEntry::Generalized(g)) if !g.completed => return Err(crate::state::never_completed(*h)),
        Some(_) => None,
        None => return Err(bad_request(*h)),
    };
    let (st, res) = match in_flight {
        Some(Some(e)) => complete(*e),
        Some(None) => (empty_status(), Ok(())),
        None => {
            let entry = m.reqs.borrow_mut().remove(*h).ok_or_else(|| bad_request(*h))?;
            *h = MPI_REQUEST_NULL;
            complete(entry)
        }
    };
    put_status(status, st);
    res
}

/// Tests `*h`: true (and completed as by [`wait_one`]) if it is done.
fn test_one(m: &Mpi, h: &mut MPI_Request, status: Out<MPI_Status>) -> Result<bool, Fail> {
    if *h != MPI_REQUEST_NULL && !ready(m, *h)? {
        return Ok(false);
    }
    wait_one(m, h, status).map(|_| true)
}

/// Completes the requests at `which` of `reqs`; with any failure, every status gets its
/// error and the call fails with MPI_ERR_IN_STATUS.
fn complete_set(
    m: &Mpi,
    reqs: &mut [MPI_Request],
    which: &[usize],
    statuses: Out<MPI_Status>,
    out_index: &mut dyn FnMut(usize, usize),
) -> Res {
    let mut failed = None;
    let mut done = Vec::with_capacity(which.len());
    for (k, &i) in which.iter().enumerate() {
        let mut own = MPI_Status::default();
        // SAFETY: a local status, valid for the call.
        let res = wait_one(m, &mut reqs[i], unsafe { Out::from_raw(&mut own) });
        own.MPI_ERROR = res.as_ref().map_or_else(|f| f.class, |()| MPI_SUCCESS);
        done.push(own);
        out_index(k, i);
        if let Err(f) = res {
            failed.get_or_insert(f);
        }
    }
    // Every MPI_ERROR field is set when the call fails with MPI_ERR_IN_STATUS (to
    // MPI_SUCCESS for those that succeeded), and left alone otherwise.
    let in_status = failed.is_some() && which.len() > 1;
    for (k, own) in done.into_iter().enumerate() {
        // The caller's status array holds `which.len()` entries (or is null).
        if in_status {
            statuses.nth(k).set_if_given(own);
        } else {
            put_status(statuses.nth(k), own);
        }
    }
    match failed {
        None => Ok(()),
        Some(f) if which.len() == 1 => Err(f),
        Some(f) => Err(Fail {
            class: MPI_ERR_IN_STATUS,
            msg: f.msg,
            on: f.on,
        }),
    }
}

/// The requests Waitany/Waitsome/Testany/Testsome look at: null handles and inactive
/// persistent requests are left out, as the standard says.
fn active(m: &Mpi, reqs: &[MPI_Request]) -> Vec<usize> {
    let table = m.reqs.borrow();
    (0..reqs.len())
        .filter(|i| reqs[*i] != MPI_REQUEST_NULL)
        .filter(|i| {
            !matches!(
                table.get(reqs[*i]),
                Some(ReqEntry::Persistent { active: None, .. })
            )
        })
        .collect()
}

fn ready_among(m: &Mpi, reqs: &[MPI_Request], live: &[usize]) -> Result<Vec<usize>, Fail> {
    let mut done = Vec::new();
    for &i in live {
        if ready(m, reqs[i])? {
            done.push(i);
        }
    }
    Ok(done)
}

/// Spins (yielding the CPU) until some of `live` are done; returns them. Fails when
/// only generalized requests that are not complete are left (nothing could end them).
fn wait_some(m: &Mpi, reqs: &[MPI_Request], live: &[usize]) -> Result<Vec<usize>, Fail> {
    loop {
        let done = ready_among(m, reqs, live)?;
        if !done.is_empty() {
            return Ok(done);
        }
        let table = m.reqs.borrow();
        if live
            .iter()
            .all(|&i| matches!(table.get(reqs[i]), Some(ReqEntry::Generalized(_))))
        {
            return Err(crate::state::never_completed(reqs[live[0]]));
        }
        drop(table);
        m.u.let_others_in();
        std::thread::yield_now();
    }
}

mpi_fn! {
    fn MPI_Wait(request: Out<MPI_Request>, status: Out<MPI_Status>) {
        let m = mpi()?;
        reap_detached(m);
        wait_one(m, request.place("request")?, status)
    }
}

mpi_fn! {
    fn MPI_Test(request: Out<MPI_Request>, flag: Out<c_int>, status: Out<MPI_Status>) {
        let m = mpi()?;
        reap_detached(m);
        let flag = flag.place("flag")?;
        *flag = 0;
        *flag = test_one(m, request.place("request")?, status)? as c_int;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Waitall(n: c_int, requests: Out<MPI_Request>, statuses: Out<MPI_Status>) {
        let m = mpi()?;
        reap_detached(m);
        let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
        let mut failed = None;
        let mut done = Vec::with_capacity(reqs.len());
        for h in reqs.iter_mut() {
            let mut own = MPI_Status::default();
            // SAFETY: a local status, valid for the call.
            let res = wait_one(m, h, unsafe { Out::from_raw(&mut own) });
            own.MPI_ERROR = res.as_ref().map_or_else(|f| f.class, |()| MPI_SUCCESS);
            done.push(own);
            if let Err(f) = res {
                failed.get_or_insert(f);
            }
        }
        // With MPI_ERR_IN_STATUS every status says how its request ended; otherwise
        // MPI_ERROR is left alone, as the standard says.
        for (i, own) in done.into_iter().enumerate() {
            if failed.is_some() {
                statuses.nth(i).set_if_given(own);
            } else {
                put_status(statuses.nth(i), own);
            }
        }
        match failed {
            None => Ok(()),
            Some(f) => Err(Fail { class: MPI_ERR_IN_STATUS, msg: f.msg, on: f.on }),
        }
    }
}

mpi_fn! {
    fn MPI_Testall(n: c_int, requests: Out<MPI_Request>, flag: Out<c_int>, statuses: Out<MPI_Status>) {
        let m = mpi()?;
        reap_detached(m);
        let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
        let flag = flag.place("flag")?;
        let live = active(m, reqs);
        if ready_among(m, reqs, &live)?.len() < live.len() {
            *flag = 0;
            return Ok(());
        }
        *flag = 1;
        let all: Vec<usize> = (0..reqs.len()).collect();
        complete_set(m, reqs, &all, statuses, &mut |_, _| {}).map_err(|f| Fail { class: MPI_ERR_IN_STATUS, ..f })
    }
}

mpi_fn! {
    fn MPI_Waitany(n: c_int, requests: Out<MPI_Request>, index: Out<c_int>, status: Out<MPI_Status>) {
        let m = mpi()?;
        reap_detached(m);
        let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
        let index = index.place("index")?;
        let live = active(m, reqs);
        if live.is_empty() {
            *index = MPI_UNDEFINED;
            put_status(status, empty_status());
            return Ok(());
        }
        let i = wait_some(m, reqs, &live)?[0];
        *index = i as c_int;
        wait_one(m, &mut reqs[i], status)
    }
}

mpi_fn! {
    fn MPI_Testany(n: c_int, requests: Out<MPI_Request>, index: Out<c_int>, flag: Out<c_int>, status: Out<MPI_Status>) {
        let m = mpi()?;
        reap_detached(m);
        let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
        let (index, flag) = (index.place("index")?, flag.place("flag")?);
        let live = active(m, reqs);
        *index = MPI_UNDEFINED;
        if live.is_empty() {
            *flag = 1;
            put_status(status, empty_status());
            return Ok(());
        }
        match ready_among(m, reqs, &live)?.first() {
            Some(&i) => {
                *flag = 1;
                *index = i as c_int;
                wait_one(m, &mut reqs[i], status)
            }
            None => {
                *flag = 0;
                Ok(())
            }
        }
    }
}

fn some(
    n: c_int,
    requests: Out<MPI_Request>,
    outcount: Out<c_int>,
    indices: Out<c_int>,
    statuses: Out<MPI_Status>,
    block: bool,
) -> Res {
    let m = mpi()?;
    reap_detached(m);
    let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
    let outcount = outcount.place("outcount")?;
    let live = active(m, reqs);
    if live.is_empty() {
        *outcount = MPI_UNDEFINED;
        return Ok(());
    }
    let done = if block {
        wait_some(m, reqs, &live)?
    } else {
        ready_among(m, reqs, &live)?
    };
    *outcount = done.len() as c_int;
    // Room for one index per finished request.
    let idx = indices.slice(done.len(), "array_of_indices")?;
    complete_set(m, reqs, &done, statuses, &mut |k, i| idx[k] = i as c_int)
}

mpi_fn! {
    fn MPI_Waitsome(incount: c_int, requests: Out<MPI_Request>, outcount: Out<c_int>, indices: Out<c_int>, statuses: Out<MPI_Status>) {
        some(incount, requests, outcount, indices, statuses, true)
    }
}

mpi_fn! {
    fn MPI_Testsome(incount: c_int, requests: Out<MPI_Request>, outcount: Out<c_int>, indices: Out<c_int>, statuses: Out<MPI_Status>) {
        some(incount, requests, outcount, indices, statuses, false)
    }
}

mpi_fn! {
    fn MPI_Request_free(request: Out<MPI_Request>) {
        let m = mpi()?;
        let h = request.place("request")?;
        if *h == MPI_REQUEST_NULL {
            return fail(MPI_ERR_REQUEST, "the request is MPI_REQUEST_NULL");
        }
        match m.reqs.borrow_mut().get_mut(*h).map(operation) {
            // A generalized request the program has not completed stays until it does:
            // MPI_Grequest_complete then runs free_fn (MPI 4.1 §13.2).
            Some(Some(ReqEntry::Generalized(g))) if !g.completed => {
                g.freed = true;
                *h = MPI_REQUEST_NULL;
                return Ok(());
            }
            // Erroneous (MPI 4.1 §6.12): the collective would go on writing into memory
            // the program then frees. The request stays, still to be completed.
            Some(Some(ReqEntry::Coll { .. })) => {
                return fail(
                    MPI_ERR_REQUEST,
                    "MPI_Request_free of a collective request that is still active: complete it \
                     with MPI_Wait or MPI_Test first (the request stays valid)",
                );
            }
            _ => {}
        }
        let entry = m.reqs.borrow_mut().remove(*h).ok_or_else(|| bad_request(*h))?;
        *h = MPI_REQUEST_NULL;
        // A running operation goes on; its memory stays lent until it is done.
        match entry {
            ReqEntry::Done(_) | ReqEntry::Ended { .. } | ReqEntry::Persistent { active: None, .. } => {}
            ReqEntry::Generalized(g) => return g.free(),
            ReqEntry::Persistent { active: Some(a), .. } => m.detached.borrow_mut().push(*a),
            running => m.detached.borrow_mut().push(running),
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Cancel(request: Out<MPI_Request>) {
        let m = mpi()?;
        let h = *request.place("request")?;
        let mut reqs = m.reqs.borrow_mut();
        let entry = reqs.get_mut(h).ok_or_else(|| bad_request(h))?;
        if let ReqEntry::Generalized(g) = entry {
            let g = *g;
            drop(reqs);
            return g.cancel();
        }
        cancel(entry);
        Ok(())
    }
}

/// MPI_Cancel of an entry: a receive that has not matched is cancelled at once; a send
/// (buffered or not) asks its receiver to withdraw the message and completes with the
/// answer, which MPI_Test_cancelled reports (a matched one completes as usual). A
/// collective is not cancelled (the standard says trying is erroneous).
fn cancel(entry: &mut ReqEntry) {
    match entry {
        ReqEntry::P2p { op, .. } => {
            op.cancel();
        }
        ReqEntry::Bsend { send, cancelled } => {
            send.borrow_mut().cancel();
            *cancelled = true;
        }
        ReqEntry::Persistent { active: Some(op), .. } => cancel(op),
        ReqEntry::Pair { recv, .. } => cancel(recv),
        ReqEntry::Persistent { active: None, .. }
        | ReqEntry::Generalized(_)
        | ReqEntry::Done(_)
        | ReqEntry::Ended { .. }
        | ReqEntry::Coll { .. }
        | ReqEntry::Flush(_) => {}
    }
}

/// Makes a persistent request that runs `restart` at each MPI_Start.
pub fn persistent(request: Out<MPI_Request>, restart: Box<dyn Fn() -> Result<ReqEntry, Fail>>) -> Res {
    let m = mpi()?;
    let request = request.place("request")?;
    start(
        m,
        request,
        ReqEntry::Persistent {
            restart,
            active: None,
        },
    )
}

fn start_persistent(m: &Mpi, h: MPI_Request) -> Res {
    // The operation is made outside the table's borrow (it may look up handles).
    let restart = match m.reqs.borrow_mut().get_mut(h) {
        Some(ReqEntry::Persistent { active: Some(_), .. }) => {
            return fail(MPI_ERR_REQUEST, "MPI_Start on a request that is active already");
        }
        Some(ReqEntry::Persistent { restart, .. }) => std::mem::replace(
            restart,
            Box::new(|| fail(MPI_ERR_INTERN, "restarted while starting")),
        ),
        Some(_) => return fail(MPI_ERR_REQUEST, "MPI_Start needs a persistent request"),
        None => return Err(bad_request(h)),
    };
    let made = restart();
    let mut reqs = m.reqs.borrow_mut();
    let Some(ReqEntry::Persistent { restart: r, active }) = reqs.get_mut(h) else {
        return Err(bad_request(h));
    };
    *r = restart;
    *active = Some(Box::new(made?));
    Ok(())
}

mpi_fn! {
    fn MPI_Start(request: Out<MPI_Request>) {
        let m = mpi()?;
        start_persistent(m, *request.place("request")?)
    }
}

mpi_fn! {
    fn MPI_Startall(n: c_int, requests: Out<MPI_Request>) {
        let m = mpi()?;
        for h in requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?.iter() {
            start_persistent(m, *h)?;
        }
        Ok(())
    }
}

mpi_fn! {
    /// Like MPI_Test, but the request stays as it is.
    fn MPI_Request_get_status(request: MPI_Request, flag: Out<c_int>, status: Out<MPI_Status>) {
        let m = mpi()?;
        let flag = flag.place("flag")?;
        let st = get_status_at(m, request)?;
        *flag = st.is_some() as c_int;
        if let Some(st) = st {
            put_status(status, st);
        }
        Ok(())
    }
}

/// The slot of an entry that holds its operation: the one in flight of a persistent
/// request (`None` for an inactive one), else the entry itself.
fn operation(e: &mut ReqEntry) -> Option<&mut ReqEntry> {
    match e {
        ReqEntry::Persistent { active, .. } => active.as_deref_mut(),
        other => Some(other),
    }
}

/// What [`get_status_at`] does with a finished request once the table is let go.
enum Settle {
    Query(crate::state::Generalized),
    Complete(ReqEntry),
}

/// Request_get_status for one handle (null: done, empty status); `None` while it runs. A
/// finished request is completed where it stands (its data unpacked into the program's
/// memory, its last step run), so that "done" means the buffer holds the result; the
/// handle stays for Wait, Test or free. Callbacks (a last step, a generalized request's
/// `query_fn`) run outside the table's borrow: they may call MPI.
fn get_status_at(m: &Mpi, h: MPI_Request) -> Result<Option<MPI_Status>, Fail> {
    if h == MPI_REQUEST_NULL {
        return Ok(Some(empty_status()));
    }
    let taken = {
        let mut reqs = m.reqs.borrow_mut();
        let e = reqs.get_mut(h).ok_or_else(|| bad_request(h))?;
        let Some(op) = operation(e) else {
            return Ok(Some(empty_status()));
        };
        match op {
            ReqEntry::Done(st) | ReqEntry::Ended { status: st, .. } => return Ok(Some(*st)),
            // The standard has MPI_Request_get_status ask query_fn too; the request
            // stays for Wait/Test, which ask it again and free it.
            ReqEntry::Generalized(g) if g.completed => Settle::Query(*g),
            ReqEntry::Generalized(_) => return Ok(None),
            op => {
                if !entry_ready(op) {
                    return Ok(None);
                }
                Settle::Complete(std::mem::replace(op, ReqEntry::Done(empty_status())))
            }
        }
    };
    let (status, result) = match taken {
        Settle::Query(g) => return Ok(Some(g.query().0)),
        Settle::Complete(op) => complete(op),
    };
    if let Some(op) = m.reqs.borrow_mut().get_mut(h).and_then(operation) {
        *op = ReqEntry::Ended { status, result };
    }
    Ok(Some(status))
}

mpi_fn! {
    fn MPI_Request_get_status_all(n: c_int, requests: In<MPI_Request>, flag: Out<c_int>, statuses: Out<MPI_Status>) {
        let m = mpi()?;
        let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
        let flag = flag.place("flag")?;
        let got = reqs.iter().map(|h| get_status_at(m, *h)).collect::<Result<Vec<_>, _>>()?;
        *flag = got.iter().all(Option::is_some) as c_int;
        if *flag == 1 {
            for (i, st) in got.into_iter().enumerate() {
                statuses.nth(i).set_if_given(st.unwrap_or_default());
            }
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Request_get_status_any(n: c_int, requests: In<MPI_Request>, index: Out<c_int>, flag: Out<c_int>, status: Out<MPI_Status>) {
        let m = mpi()?;
        let reqs = requests.slice(count(n as i64, "count")? as usize, "array_of_requests")?;
        let (index, flag) = (index.place("index")?, flag.place("flag")?);
        let live = active(m, reqs);
        *index = MPI_UNDEFINED;
        if live.is_empty() {
            *flag = 1;
            put_status(status, empty_status());
            return Ok(());
        }
        *flag = 0;
        for i in live {
            if let Some(st) = get_status_at(m, reqs[i])? {
                *flag = 1;
                *index = i as c_int;
                put_status(status, st);
                break;
            }
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Request_get_status_some(incount: c_int, requests: In<MPI_Request>, outcount: Out<c_int>, indices: Out<c_int>, statuses: Out<MPI_Status>) {
        let m = mpi()?;
        let reqs = requests.slice(count(incount as i64, "count")? as usize, "array_of_requests")?;
        let outcount = outcount.place("outcount")?;
        let live = active(m, reqs);
        if live.is_empty() {
            *outcount = MPI_UNDEFINED;
            return Ok(());
        }
        let mut done = Vec::new();
        for i in live {
            if let Some(st) = get_status_at(m, reqs[i])? {
                done.push((i, st));
            }
        }
        *outcount = done.len() as c_int;
        let idx = indices.slice(done.len(), "array_of_indices")?;
        for (k, (i, st)) in done.into_iter().enumerate() {
            idx[k] = i as c_int;
            statuses.nth(k).set_if_given(st);
        }
        Ok(())
    }
}
