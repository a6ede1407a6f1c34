//! Point-to-point: sends, receives, probes and statuses.

use std::ffi::c_void;
use std::os::raw::c_int;

use pontoon::lent::Buffer;
use pontoon::{Comm, Data, DataMut, Datatype, Rank, Status};

use crate::abi::*;
use crate::boundary::{count, fail, out, Fail, Res};
use crate::immediate;
use crate::requests::{start, ReqEntry, Unpack};
use crate::state::mpi;
use crate::{mpi_fn, mpi_fn_c};

// ---- buffers -------------------------------------------------------------------

/// The bytes `n` elements of `dt` at `buf` touch: `(start, length, origin offset)`.
fn region(buf: *const c_void, n: u64, dt: &Datatype) -> Result<(*const u8, usize, usize), Fail> {
    let (first, end) = dt.span(n);
    let start = (buf as *const u8).wrapping_offset(first as isize);
    let len = (end - first) as usize;
    if len > 0 && start.is_null() {
        return fail(
            MPI_ERR_BUFFER,
            "the buffer is NULL but the datatype and count describe data",
        );
    }
    Ok((start, len, (-first) as usize))
}

/// `n` elements of `dt` at the C buffer `buf` (MPI_BOTTOM with absolute displacements too).
///
/// # Safety
/// The caller's buffer holds the data it describes, as MPI requires.
pub unsafe fn data<'a>(buf: *const c_void, n: u64, dt: &'a Datatype) -> Result<Data<'a>, Fail> {
    let (start, len, origin) = region(buf, n, dt)?;
    // SAFETY: the region is what the datatype and count touch, valid by contract.
    let bytes = if len == 0 {
        &[][..]
    } else {
        unsafe { std::slice::from_raw_parts(start, len) }
    };
    Ok(Data {
        bytes,
        origin,
        count: n,
        dt,
    })
}

/// The writable form of [`data`].
///
/// # Safety
/// As [`data`], for writing.
pub unsafe fn data_mut<'a>(buf: *mut c_void, n: u64, dt: &'a Datatype) -> Result<DataMut<'a>, Fail> {
    let (start, len, origin) = region(buf, n, dt)?;
    let bytes = if len == 0 {
        &mut [][..]
    } else {
        // SAFETY: as in `data`; the caller lends the region for writing.
        unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) }
    };
    Ok(DataMut {
        bytes,
        origin,
        count: n,
        dt,
    })
}

// ---- statuses ------------------------------------------------------------------

pub fn status_of(st: &Status) -> MPI_Status {
    let mut s = MPI_Status {
        MPI_SOURCE: st.source as c_int,
        MPI_TAG: st.tag,
        ..MPI_Status::default()
    };
    set_bytes(&mut s, st.bytes);
    s
}

/// Writes a completed operation's status to the program's optional `p`, leaving its
/// MPI_ERROR field as the program set it: only the functions of several statuses set
/// that field, and only when they fail with MPI_ERR_IN_STATUS (MPI-4.1 §3.2.5). The
/// empty status (of a null or inactive request, a send, a collective) is defined whole,
/// error MPI_SUCCESS included (§3.7.3), and written whole.
///
/// # Safety
/// `p` is null or valid for writes.
pub unsafe fn put_status(p: *mut MPI_Status, v: MPI_Status) {
    let empty = v.MPI_SOURCE == MPI_ANY_SOURCE && v.MPI_TAG == MPI_ANY_TAG;
    // SAFETY: as documented.
    if let Some(r) = unsafe { p.as_mut() } {
        let error = if empty { v.MPI_ERROR } else { r.MPI_ERROR };
        *r = MPI_Status {
            MPI_ERROR: error,
            ..v
        };
    }
}

/// The empty status (of a null or inactive request): any source, any tag, no data.
pub fn empty_status() -> MPI_Status {
    MPI_Status {
        MPI_SOURCE: MPI_ANY_SOURCE,
        MPI_TAG: MPI_ANY_TAG,
        ..MPI_Status::default()
    }
}

/// The status of a receive from MPI_PROC_NULL.
pub fn proc_null_status() -> MPI_Status {
    MPI_Status {
        MPI_SOURCE: MPI_PROC_NULL,
        MPI_TAG: MPI_ANY_TAG,
        ..MPI_Status::default()
    }
}

pub fn bytes_of(s: &MPI_Status) -> u64 {
    (s.internal[0] as u32 as u64) | (s.internal[1] as u32 as u64) << 32
}

fn set_bytes(s: &mut MPI_Status, bytes: u64) {
    s.internal[0] = bytes as u32 as c_int;
    s.internal[1] = (bytes >> 32) as u32 as c_int;
}

pub fn set_cancelled(s: &mut MPI_Status, yes: bool) {
    s.internal[2] = yes as c_int;
}

// ---- arguments -----------------------------------------------------------------

/// A destination: `None` for MPI_PROC_NULL.
pub fn dest_rank(c: &Comm, r: c_int) -> Result<Option<Rank>, Fail> {
    match r {
        MPI_PROC_NULL => Ok(None),
        r if r >= 0 && (r as u32) < c.peer_size() => Ok(Some(r as Rank)),
        r => fail(
            MPI_ERR_RANK,
            format!("rank {r} is not in this communicator of {} ranks", c.peer_size()),
        ),
    }
}

/// A source: `Ok(None)` for MPI_PROC_NULL, `Ok(Some(None))` for any source.
pub fn source_rank(c: &Comm, r: c_int) -> Result<Option<Option<Rank>>, Fail> {
    if r == MPI_ANY_SOURCE {
        return Ok(Some(None));
    }
    Ok(dest_rank(c, r)?.map(Some))
}

pub fn send_tag(tag: c_int) -> Result<i32, Fail> {
    if tag < 0 {
        return fail(
            MPI_ERR_TAG,
            format!("tag {tag} is negative; send tags are 0..=MPI_TAG_UB"),
        );
    }
    Ok(tag)
}

/// A receive tag, MPI_ANY_TAG becoming pontoon's own wildcard.
#[inline]
pub fn recv_tag(tag: c_int) -> Result<i32, Fail> {
    match tag {
        MPI_ANY_TAG => Ok(pontoon::ANY_TAG),
        t if t < 0 => fail(MPI_ERR_TAG, format!("tag {t} is negative and not MPI_ANY_TAG")),
        t => Ok(t),
    }
}

/// The datatype of a send or receive. One with MPI_PROC_NULL moves nothing and
/// completes at once whatever handle it names (MPI_DATATYPE_NULL among them), as in MPICH.
fn datatype_for(m: &crate::state::Mpi, datatype: MPI_Datatype, proc_null: bool) -> Result<Datatype, Fail> {
    match m.committed(datatype) {
        Err(_) if proc_null => Ok(Datatype::basic(pontoon::Basic::U8)),
        other => other,
    }
}

/// A send's arguments, checked once: the communicator, datatype, element count, tag,
/// and the destination (`None`: MPI_PROC_NULL, nothing to send).
pub struct SendArgs {
    pub comm: Comm<'static>,
    pub dt: Datatype,
    pub n: u64,
    pub tag: i32,
    pub dest: Option<Rank>,
}

pub fn send_args(
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<SendArgs, Fail> {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let n = count(n, "count")?;
    let tag = send_tag(tag)?;
    let dest = dest_rank(&c, dest)?;
    let dt = datatype_for(m, datatype, dest.is_none())?;
    Ok(SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    })
}

/// A receive's arguments, checked once; `source` `None`: MPI_PROC_NULL, `Some(None)`:
/// any source.
pub struct RecvArgs {
    pub comm: Comm<'static>,
    pub dt: Datatype,
    pub n: u64,
    pub tag: i32,
    pub source: Option<Option<Rank>>,
}

pub fn recv_args(
    n: i64,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<RecvArgs, Fail> {
    let m = mpi()?;
    let c = m.comm(comm)?;
    let n = count(n, "count")?;
    let tag = recv_tag(tag)?;
    let source = source_rank(&c, source)?;
    let dt = datatype_for(m, datatype, source.is_none())?;
    Ok(RecvArgs {
        comm: c,
        dt,
        n,
        tag,
        source,
    })
}

/// The status argument of a status query.
///
/// # Safety
/// `status` is null or points to a status.
unsafe fn status_arg<'a>(status: *const MPI_Status) -> Result<&'a MPI_Status, Fail> {
    // SAFETY: as documented.
    unsafe { status.as_ref() }.ok_or_else(|| Fail::new(MPI_ERR_ARG, "`status` is NULL"))
}

// ---- blocking ------------------------------------------------------------------

unsafe fn blocking_send(
    buf: *const c_void,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
) -> Res {
    let SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    } = send_args(n, datatype, dest, tag, comm)?;
    let Some(dest) = dest else {
        return Ok(());
    };
    // SAFETY: the caller's buffer, per the MPI contract.
    let d = unsafe { data(buf, n, &dt)? };
    if sync {
        c.ssend_data(&d, dest, tag)?;
    } else {
        c.send_data(&d, dest, tag)?;
    }
    Ok(())
}

mpi_fn_c! {
    fn MPI_Send | MPI_Send_c(buf: *const c_void, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        if let Some(sent) = immediate::send(buf, n, datatype, dest, tag, comm) {
            return sent;
        }
        blocking_send(buf, n, datatype, dest, tag, comm, false)
    }
}

mpi_fn_c! {
    fn MPI_Ssend | MPI_Ssend_c(buf: *const c_void, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        blocking_send(buf, n, datatype, dest, tag, comm, true)
    }
}

mpi_fn_c! {
    /// Ready mode: the receive is posted already, so a standard send is correct.
    fn MPI_Rsend | MPI_Rsend_c(buf: *const c_void, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm) on comm {
        let n = n.wide();
        blocking_send(buf, n, datatype, dest, tag, comm, false)
    }
}

mpi_fn_c! {
    fn MPI_Recv | MPI_Recv_c(buf: *mut c_void, n: Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) on comm {
        let n = n.wide();
        if let Some(got) = immediate::recv(buf, n, datatype, source, tag, comm, status) {
            return got;
        }
        let RecvArgs { comm: c, dt, n, tag, source } = recv_args(n, datatype, source, tag, comm)?;
        let Some(from) = source else {
            put_status(status, proc_null_status());
            return Ok(());
        };
        let mut d = data_mut(buf, n, &dt)?;
        let st = c.recv_data(&mut d, from, tag);
        finish_recv(st, status)
    }
}

/// Fills the status of a finished receive; a truncation still reports what arrived.
pub(crate) unsafe fn finish_recv(st: pontoon::Result<Status>, status: *mut MPI_Status) -> Res {
    match st {
        Ok(st) => {
            // SAFETY: the caller's optional status.
            unsafe { put_status(status, status_of(&st)) };
            Ok(())
        }
        Err(pontoon::Error::Truncated {
            source_rank,
            tag,
            count,
        }) => {
            let st = Status {
                source: source_rank,
                tag,
                bytes: count,
            };
            // SAFETY: as above.
            unsafe { put_status(status, status_of(&st)) };
            Err(pontoon::Error::Truncated {
                source_rank,
                tag,
                count,
            }
            .into())
        }
        Err(e) => Err(e.into()),
    }
}

mpi_fn_c! {
    fn MPI_Sendrecv | MPI_Sendrecv_c(
        sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, status: *mut MPI_Status) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        let m = mpi()?;
        m.comm(comm)?;
        // The receive goes first so that two ranks exchanging never both wait on sends.
        let mut recv = MPI_REQUEST_NULL;
        start(m, &mut recv, recv_entry(recvbuf, recvcount, recvtype, source, recvtag, comm)?)?;
        let sent = blocking_send(sendbuf, sendcount, sendtype, dest, sendtag, comm, false);
        let got = crate::requests::wait_one(m, &mut recv, status);
        sent?;
        got
    }
}

mpi_fn_c! {
    fn MPI_Sendrecv_replace | MPI_Sendrecv_replace_c(
        buf: *mut c_void, n: Count, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, status: *mut MPI_Status) on comm {
        let n = n.wide();
        let m = mpi()?;
        m.comm(comm)?;
        let dt = m.committed(datatype)?;
        // The outgoing data is packed first; then the buffer is free to receive into.
        let packed = data(buf, count(n, "count")?, &dt)?.packed()?.into_owned();
        let mut recv = MPI_REQUEST_NULL;
        start(m, &mut recv, recv_entry(buf, n, datatype, source, recvtag, comm)?)?;
        let sent = blocking_send(packed.as_ptr() as *const c_void, packed.len() as i64, MPI_BYTE, dest, sendtag, comm, false);
        let got = crate::requests::wait_one(m, &mut recv, status);
        sent?;
        got
    }
}

// ---- non-blocking --------------------------------------------------------------

/// A send of the caller's memory (dense) or of a packed copy, as a request entry.
///
/// # Safety
/// The program leaves the send buffer alone until the request completes (MPI's rule).
pub unsafe fn send_entry(
    buf: *const c_void,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
) -> Result<ReqEntry, Fail> {
    let args = send_args(n, datatype, dest, tag, comm)?;
    // SAFETY: as documented.
    unsafe { send_entry_with(buf, &args, comm, sync) }
}

/// [`send_entry`] with its arguments resolved already: a persistent request keeps its
/// own references to the communicator and the datatype, which the program may free
/// before it starts the request again (MPI counts the request as a user of both).
///
/// # Safety
/// As [`send_entry`].
pub unsafe fn send_entry_with(
    buf: *const c_void,
    a: &SendArgs,
    comm: MPI_Comm,
    sync: bool,
) -> Result<ReqEntry, Fail> {
    let SendArgs {
        comm: c,
        dt,
        n,
        tag,
        dest,
    } = a;
    let (n, tag) = (*n, *tag);
    let Some(dest) = *dest else {
        return Ok(ReqEntry::Done(empty_status()));
    };
    // SAFETY: as documented.
    let d = unsafe { data(buf, n, dt)? };
    let buffer = if dt.is_dense() {
        // SAFETY: as documented: the engine may read the memory until completion.
        unsafe {
            Buffer::from_raw(
                d.bytes[d.origin..].as_ptr() as *mut u8,
                (n * dt.size()) as usize,
                false,
            )
        }
    } else {
        Buffer::owned(d.packed()?.into_owned())
    };
    let op = c.isend_lent(buffer, dest, tag, sync)?;
    Ok(ReqEntry::P2p {
        op,
        comm,
        unpack: None,
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn start_send(
    buf: *const c_void,
    n: i64,
    datatype: MPI_Datatype,
    dest: c_int,
    tag: c_int,
    comm: MPI_Comm,
    sync: bool,
    request: *mut MPI_Request,
) -> Res {
    // SAFETY: the caller's arguments (MPI's contract).
    let request = unsafe { out(request, "request")? };
    let entry = unsafe { send_entry(buf, n, datatype, dest, tag, comm, sync)? };
    start(mpi()?, request, entry)
}

/// Where a receive lands: the program's memory for a dense datatype, else a packed
/// copy unpacked at completion.
///
/// # Safety
/// The program leaves the receive buffer alone until the request completes.
pub unsafe fn recv_target(buf: *mut c_void, n: u64, dt: &Datatype) -> Result<(Buffer, Option<Unpack>), Fail> {
    let (start_at, _, origin) = region(buf, n, dt)?;
    let packed_len = (n * dt.size()) as usize;
    if dt.is_dense() {
        // SAFETY: as documented; the engine writes at most `packed_len` bytes there.
        let b = unsafe { Buffer::from_raw(start_at.wrapping_add(origin) as *mut u8, packed_len, true) };
        return Ok((b, None));
    }
    let mut tmp = vec![0u8; packed_len];
    // SAFETY: `tmp`'s heap block stays put when the vector moves into the request
    // entry, which keeps it until the engine is done with it.
    let b = unsafe { Buffer::from_raw(tmp.as_mut_ptr(), packed_len, true) };
    Ok((
        b,
        Some(Unpack {
            tmp,
            buf,
            count: n,
            dt: dt.clone(),
        }),
    ))
}

/// A receive into the caller's memory, as a request entry; a non-dense datatype
/// receives into a packed copy that is unpacked at completion.
///
/// # Safety
/// The program leaves the receive buffer alone until the request completes.
pub unsafe fn recv_entry(
    buf: *mut c_void,
    n: i64,
    datatype: MPI_Datatype,
    source: c_int,
    tag: c_int,
    comm: MPI_Comm,
) -> Result<ReqEntry, Fail> {
    let args = recv_args(n, datatype, source, tag, comm)?;
    // SAFETY: as documented.
    unsafe { recv_entry_with(buf, &args, comm) }
}

/// [`recv_entry`] with its arguments resolved already (see [`send_entry_with`]).
///
/// # Safety
/// As [`recv_entry`].
pub unsafe fn recv_entry_with(buf: *mut c_void, a: &RecvArgs, comm: MPI_Comm) -> Result<ReqEntry, Fail> {
    let Some(from) = a.source else {
        return Ok(ReqEntry::Done(proc_null_status()));
    };
    // SAFETY: as documented.
    let (buffer, unpack) = unsafe { recv_target(buf, a.n, &a.dt)? };
    let op = a.comm.irecv_lent(buffer, from, a.tag)?;
    Ok(ReqEntry::P2p { op, comm, unpack })
}

mpi_fn_c! {
    fn MPI_Isend | MPI_Isend_c(buf: *const c_void, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let n = n.wide();
        start_send(buf, n, datatype, dest, tag, comm, false, request)
    }
}

mpi_fn_c! {
    fn MPI_Issend | MPI_Issend_c(buf: *const c_void, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let n = n.wide();
        start_send(buf, n, datatype, dest, tag, comm, true, request)
    }
}

mpi_fn_c! {
    fn MPI_Irsend | MPI_Irsend_c(buf: *const c_void, n: Count, datatype: MPI_Datatype, dest: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let n = n.wide();
        start_send(buf, n, datatype, dest, tag, comm, false, request)
    }
}

mpi_fn_c! {
    fn MPI_Irecv | MPI_Irecv_c(buf: *mut c_void, n: Count, datatype: MPI_Datatype, source: c_int, tag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let n = n.wide();
        let request = out(request, "request")?;
        let entry = recv_entry(buf, n, datatype, source, tag, comm)?;
        start(mpi()?, request, entry)
    }
}

// ---- probes and statuses -------------------------------------------------------

mpi_fn! {
    fn MPI_Probe(source: c_int, tag: c_int, comm: MPI_Comm, status: *mut MPI_Status) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let tag = recv_tag(tag)?;
        let Some(from) = source_rank(&c, source)? else {
            put_status(status, proc_null_status());
            return Ok(());
        };
        let st = c.probe(from, tag)?;
        put_status(status, status_of(&st));
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Iprobe(source: c_int, tag: c_int, comm: MPI_Comm, flag: *mut c_int, status: *mut MPI_Status) on comm {
        let m = mpi()?;
        let c = m.comm(comm)?;
        let tag = recv_tag(tag)?;
        let flag = out(flag, "flag")?;
        let Some(from) = source_rank(&c, source)? else {
            *flag = 1;
            put_status(status, proc_null_status());
            return Ok(());
        };
        match c.iprobe(from, tag)? {
            Some(st) => {
                *flag = 1;
                put_status(status, status_of(&st));
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

fn received(status: &MPI_Status) -> Status {
    Status {
        source: status.MPI_SOURCE as Rank,
        tag: status.MPI_TAG,
        bytes: bytes_of(status),
    }
}

mpi_fn_c! {
    fn MPI_Get_count | MPI_Get_count_c(status: *const MPI_Status, datatype: MPI_Datatype, n: *mut Count) {
        let dt = mpi()?.datatype(datatype)?;
        let st = received(status_arg(status)?);
        // MPI_UNDEFINED also when the count does not fit this form's width.
        *out(n, "count")? = st.count_of(&dt).and_then(|k| Count::try_from(k).ok()).unwrap_or(Count::from(MPI_UNDEFINED));
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Get_elements | MPI_Get_elements_c | MPI_Get_elements_x(status: *const MPI_Status, datatype: MPI_Datatype, n: *mut Count) {
        let dt = mpi()?.datatype(datatype)?;
        let st = received(status_arg(status)?);
        *out(n, "count")? = Count::try_from(st.elements_of(&dt)).unwrap_or(Count::from(MPI_UNDEFINED));
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Status_set_elements | MPI_Status_set_elements_c | MPI_Status_set_elements_x(status: *mut MPI_Status, datatype: MPI_Datatype, n: Count) {
        let n = n.wide();
        let dt = mpi()?.datatype(datatype)?;
        set_bytes(out(status, "status")?, dt.bytes_of_elements(count(n, "count")?));
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int) {
        set_cancelled(out(status, "status")?, flag != 0);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) {
        let st = status_arg(status)?;
        *out(flag, "flag")? = (st.internal[2] != 0) as c_int;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_get_source(status: *const MPI_Status, source: *mut c_int) {
        *out(source, "source")? = status_arg(status)?.MPI_SOURCE;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_get_tag(status: *const MPI_Status, tag: *mut c_int) {
        *out(tag, "tag")? = status_arg(status)?.MPI_TAG;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_get_error(status: *const MPI_Status, error: *mut c_int) {
        *out(error, "error")? = status_arg(status)?.MPI_ERROR;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_source(status: *mut MPI_Status, source: c_int) {
        out(status, "status")?.MPI_SOURCE = source;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_tag(status: *mut MPI_Status, tag: c_int) {
        out(status, "status")?.MPI_TAG = tag;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Status_set_error(status: *mut MPI_Status, error: c_int) {
        out(status, "status")?.MPI_ERROR = error;
        Ok(())
    }
}

mpi_fn_c! {
    fn MPI_Isendrecv | MPI_Isendrecv_c(
        sendbuf: *const c_void, sendcount: Count, sendtype: MPI_Datatype, dest: c_int, sendtag: c_int,
        recvbuf: *mut c_void, recvcount: Count, recvtype: MPI_Datatype, source: c_int, recvtag: c_int,
        comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let sendcount = sendcount.wide();
        let recvcount = recvcount.wide();
        let m = mpi()?;
        let request = out(request, "request")?;
        let recv = recv_entry(recvbuf, recvcount, recvtype, source, recvtag, comm)?;
        let send = send_entry(sendbuf, sendcount, sendtype, dest, sendtag, comm, false)?;
        start(m, request, ReqEntry::Pair { recv: Box::new(recv), send: Box::new(send) })
    }
}

mpi_fn_c! {
    /// The outgoing data is packed into memory of its own first; then the buffer is
    /// free to receive into.
    fn MPI_Isendrecv_replace | MPI_Isendrecv_replace_c(
        buf: *mut c_void, n: Count, datatype: MPI_Datatype, dest: c_int, sendtag: c_int,
        source: c_int, recvtag: c_int, comm: MPI_Comm, request: *mut MPI_Request) on comm {
        let n = n.wide();
        let m = mpi()?;
        let request = out(request, "request")?;
        let a = send_args(n, datatype, dest, sendtag, comm)?;
        let packed = data(buf, a.n, &a.dt)?.packed()?.into_owned();
        let send = match a.dest {
            None => ReqEntry::Done(empty_status()),
            Some(d) => ReqEntry::P2p { op: a.comm.isend_lent(Buffer::owned(packed), d, a.tag, false)?, comm, unpack: None },
        };
        let recv = recv_entry(buf, n, datatype, source, recvtag, comm)?;
        start(m, request, ReqEntry::Pair { recv: Box::new(recv), send: Box::new(send) })
    }
}
