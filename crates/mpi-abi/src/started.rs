//! A collective started on the program's memory: where its results land (the program's
//! memory when dense, else packed copies unpacked at completion; what a rank contributes
//! is `SendBuf::lend`'s), and the request that follows it.

use pontoon::lent::Buffer;
use pontoon::{Comm, Datatype, Plan};

use crate::abi::*;
use crate::boundary::{Fail, Res};
use crate::buffers::RecvBuf;
use crate::cargs::Out;
use crate::collargs::{PieceBase, Pieces};
use crate::requests::start;
use crate::state::{Finish, Mpi, ReqEntry, Unpack};

/// Where results land: the program's memory if dense, else a packed temporary
/// (filled from the memory first if `load`) unpacked by the returned finish step.
pub(crate) fn output(
    buf: RecvBuf,
    n: u64,
    dt: &Datatype,
    load: bool,
) -> Result<(Buffer, Option<Finish>), Fail> {
    let (b, unpack) = buf.lend(n, dt, load)?;
    Ok((b, unpack.map(Unpack::into_finish)))
}

/// Output as pieces, always packed (v and w forms).
pub(crate) fn pieces_output(p: Pieces<RecvBuf>, load: bool) -> Result<(Buffer, Option<Finish>), Fail> {
    let mut tmp = if load { p.pack()? } else { vec![0; p.total()] };
    let len = tmp.len();
    // SAFETY: the vector's heap block stays put when it moves into the finish step,
    // which outlives the engine's use of the buffer.
    let b = unsafe { Buffer::from_raw(tmp.as_mut_ptr(), len, true) };
    let finish: Finish = Box::new(move || p.unpack(&tmp));
    Ok((b, Some(finish)))
}

pub(crate) fn launch(
    m: &Mpi,
    c: &Comm<'static>,
    comm: MPI_Comm,
    plan: Plan,
    input: Buffer,
    out: (Buffer, Option<Finish>),
    request: Out<MPI_Request>,
) -> Res {
    let op = c.start_plan(plan, input, out.0);
    let request = request.place("request")?;
    start(
        m,
        request,
        ReqEntry::Coll {
            op,
            comm,
            finish: out.1,
        },
    )
}

pub(crate) fn none() -> Buffer {
    Buffer::owned(Vec::new())
}

pub(crate) fn blocks<B: PieceBase>(p: &Pieces<B>) -> Vec<(usize, usize)> {
    p.offsets().into_iter().zip(p.counts()).collect()
}
