//! `MPI_Status` as the library fills it: source, tag, bytes, cancelled.

use std::os::raw::c_int;

use pontoon::Status;

use crate::abi::*;
use crate::cargs::{In, Out};
use crate::fail::{Fail, Res};

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
pub fn put_status(p: Out<MPI_Status>, v: MPI_Status) {
    let empty = v.MPI_SOURCE == MPI_ANY_SOURCE && v.MPI_TAG == MPI_ANY_TAG;
    if let Some(r) = p.given() {
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

pub fn set_bytes(s: &mut MPI_Status, bytes: u64) {
    s.internal[0] = bytes as u32 as c_int;
    s.internal[1] = (bytes >> 32) as u32 as c_int;
}

pub fn set_cancelled(s: &mut MPI_Status, yes: bool) {
    s.internal[2] = yes as c_int;
}

/// Fills the status of a finished receive; a truncation still reports what arrived.
pub fn finish_recv(st: pontoon::Result<Status>, status: Out<MPI_Status>) -> Res {
    match st {
        Ok(st) => {
            put_status(status, status_of(&st));
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
            put_status(status, status_of(&st));
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

/// The status argument of a status query.
pub fn status_arg<'a>(status: In<MPI_Status>) -> Result<&'a MPI_Status, Fail> {
    status
        .given()
        .ok_or_else(|| Fail::new(MPI_ERR_ARG, "`status` is NULL"))
}
