//! Buffers described by memory, an origin, a count and a datatype — the way the C ABI
//! passes them — for point-to-point and the collectives. A dense datatype goes
//! straight from and to the memory (no copy); any other is packed into one
//! contiguous buffer first and unpacked after, since a message is contiguous on
//! the wire.

use std::borrow::Cow;

use crate::coll::Input;
use crate::comm::Comm;
use crate::datatype::Datatype;
use crate::op::Op;
use crate::{Error, Rank, Result, Status};

/// `count` elements of `dt` in `bytes`, the buffer's origin (C's `buf`) at `bytes[origin]`.
#[derive(Clone, Copy)]
pub struct Data<'a> {
    pub bytes: &'a [u8],
    pub origin: usize,
    pub count: u64,
    pub dt: &'a Datatype,
}

/// The receiving side of [`Data`].
pub struct DataMut<'a> {
    pub bytes: &'a mut [u8],
    pub origin: usize,
    pub count: u64,
    pub dt: &'a Datatype,
}

fn packed_len(count: u64, dt: &Datatype) -> usize {
    (count * dt.size()) as usize
}

impl<'a> Data<'a> {
    pub fn new(bytes: &'a [u8], count: u64, dt: &'a Datatype) -> Data<'a> {
        Data {
            bytes,
            origin: 0,
            count,
            dt,
        }
    }

    /// The packed form: the memory itself for a dense datatype.
    pub fn packed(&self) -> Result<Cow<'a, [u8]>> {
        let n = packed_len(self.count, self.dt);
        self.dt.check_fits(self.count, self.bytes.len(), self.origin)?;
        if self.dt.is_dense() {
            return Ok(Cow::Borrowed(&self.bytes[self.origin..self.origin + n]));
        }
        let mut out = vec![0; n];
        self.dt.pack(self.count, self.bytes, self.origin, &mut out)?;
        Ok(Cow::Owned(out))
    }
}

impl<'a> DataMut<'a> {
    pub fn new(bytes: &'a mut [u8], count: u64, dt: &'a Datatype) -> DataMut<'a> {
        DataMut {
            bytes,
            origin: 0,
            count,
            dt,
        }
    }

    /// Runs `f` on the packed form (filled from the memory first if `load`), then
    /// unpacks the first `used` bytes `f` reports back into the memory.
    fn with_packed<R>(&mut self, load: bool, f: impl FnOnce(&mut [u8]) -> Result<(R, usize)>) -> Result<R> {
        let n = packed_len(self.count, self.dt);
        self.dt.check_fits(self.count, self.bytes.len(), self.origin)?;
        if self.dt.is_dense() {
            return f(&mut self.bytes[self.origin..self.origin + n]).map(|(r, _)| r);
        }
        let mut tmp = vec![0; n];
        if load {
            self.dt.pack(self.count, self.bytes, self.origin, &mut tmp)?;
        }
        let (r, used) = f(&mut tmp)?;
        self.dt
            .unpack(self.count, &tmp[..used.min(n)], self.bytes, self.origin)?;
        Ok(r)
    }

    /// As `with_packed` where `f` fills the whole buffer.
    pub(crate) fn with_whole<R>(&mut self, load: bool, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
        self.with_packed(load, |p| {
            let n = p.len();
            f(p).map(|r| (r, n))
        })
    }
}

impl Status {
    /// Whole elements of `dt` received, or `None` if the bytes are not a whole number
    /// of them (MPI_Get_count, MPI_UNDEFINED).
    pub fn count_of(&self, dt: &Datatype) -> Option<u64> {
        match dt.size() {
            0 => Some(0),
            s if self.bytes.is_multiple_of(s) => Some(self.bytes / s),
            _ => None,
        }
    }

    /// Basic elements received (MPI_Get_elements).
    pub fn elements_of(&self, dt: &Datatype) -> u64 {
        dt.elements_in(self.bytes)
    }
}

fn check_signature(what: &str, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(Error::Arg(format!(
            "{what}: {a} bytes of data on the sending side, {b} on the receiving side; counts and \
             datatypes must describe the same amount of data"
        )));
    }
    Ok(())
}

impl Comm<'_> {
    /// Sends `data` (MPI_Send with any datatype).
    pub fn send_data(&self, data: &Data, dest: Rank, tag: i32) -> Result<()> {
        self.send(data.packed()?.as_ref(), dest, tag)
    }

    /// Sends once matched (MPI_Ssend with any datatype).
    pub fn ssend_data(&self, data: &Data, dest: Rank, tag: i32) -> Result<()> {
        self.ssend(data.packed()?.as_ref(), dest, tag)
    }

    /// Receives into `buf`; a shorter message fills a prefix of its elements (MPI_Recv).
    pub fn recv_data(&self, buf: &mut DataMut, source: Option<Rank>, tag: i32) -> Result<Status> {
        buf.with_packed(false, |p| {
            let st = self.recv(p, source, tag)?;
            Ok((st, st.bytes as usize))
        })
    }

    /// MPI_Bcast with any datatype.
    pub fn bcast_data(&self, buf: &mut DataMut, root: Rank) -> Result<()> {
        let me = self.rank();
        buf.with_whole(me == root, |p| self.bcast(p, root))
    }

    /// MPI_Allreduce with any datatype; `send` None: in place.
    pub fn allreduce_data(&self, send: Option<&Data>, recv: &mut DataMut, op: &Op) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        let dt = recv.dt.clone();
        buf_check(input.as_deref(), recv)?;
        recv.with_whole(input.is_none(), |p| {
            self.allreduce_bytes(input.as_deref(), p, &dt, op)
        })
    }

    /// MPI_Reduce with any datatype; `recv` matters at the root only; `send` None: in
    /// place at the root.
    pub fn reduce_data(&self, send: Option<&Data>, recv: &mut DataMut, op: &Op, root: Rank) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        let dt = send.map_or(recv.dt, |s| s.dt).clone();
        if self.rank() != root {
            return self.reduce_bytes(input.as_deref(), &mut [], &dt, op, root);
        }
        buf_check(input.as_deref(), recv)?;
        recv.with_whole(input.is_none(), |p| {
            self.reduce_bytes(input.as_deref(), p, &dt, op, root)
        })
    }

    /// MPI_Gather with any datatypes; `recv` matters at the root only.
    pub fn gather_data(&self, send: Option<&Data>, recv: &mut DataMut, root: Rank) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        if self.rank() != root {
            let i = input.as_deref().unwrap_or(&[]);
            return self.gather(i, &mut [][..], root);
        }
        let p = self.size() as usize;
        if let Some(i) = &input {
            check_signature("gather", i.len() * p, packed_len(recv.count, recv.dt))?;
        }
        recv.with_whole(input.is_none(), |out| match &input {
            Some(i) => self.gather(&i[..], out, root),
            None => self.gather(Input::InPlace, out, root),
        })
    }

    /// MPI_Scatter with any datatypes; `recv` None: in place at the root.
    pub fn scatter_data(&self, send: &Data, recv: Option<&mut DataMut>, root: Rank) -> Result<()> {
        let input = if self.rank() == root {
            send.packed()?
        } else {
            Cow::Borrowed(&[][..])
        };
        match recv {
            Some(r) => r.with_whole(false, |out| self.scatter(&input[..], Some(out), root)),
            None => self.scatter(&input[..], None, root),
        }
    }

    /// MPI_Allgather with any datatypes; `send` None: in place.
    pub fn allgather_data(&self, send: Option<&Data>, recv: &mut DataMut) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        if let Some(i) = &input {
            check_signature(
                "allgather",
                i.len() * self.size() as usize,
                packed_len(recv.count, recv.dt),
            )?;
        }
        recv.with_whole(input.is_none(), |out| match &input {
            Some(i) => self.allgather(&i[..], out),
            None => self.allgather(Input::InPlace, out),
        })
    }

    /// MPI_Alltoall with any datatypes; `send` None: in place.
    pub fn alltoall_data(&self, send: Option<&Data>, recv: &mut DataMut) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        if let Some(i) = &input {
            check_signature("alltoall", i.len(), packed_len(recv.count, recv.dt))?;
        }
        recv.with_whole(input.is_none(), |out| match &input {
            Some(i) => self.alltoall(&i[..], out),
            None => self.alltoall(Input::InPlace, out),
        })
    }
}

impl Comm<'_> {
    /// MPI_Reduce_scatter with any datatype: `counts[i]` elements of the reduced vector
    /// go to rank i. `send` None: in place, the vector is in `recv` (which then
    /// describes all of it).
    pub fn reduce_scatter_data(
        &self,
        send: Option<&Data>,
        recv: &mut DataMut,
        counts: &[u64],
        op: &Op,
    ) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        let dt = recv.dt.clone();
        let elem = dt.size() as usize;
        let byte_counts: Vec<usize> = counts.iter().map(|c| *c as usize * elem).collect();
        let total: usize = byte_counts.iter().sum();
        let mine = byte_counts.get(self.rank() as usize).copied().unwrap_or(0);
        match &input {
            Some(i) => {
                check_signature("reduce_scatter (send)", i.len(), total)?;
                check_signature("reduce_scatter (receive)", mine, packed_len(recv.count, recv.dt))?;
            }
            None => check_signature(
                "reduce_scatter (in place)",
                total,
                packed_len(recv.count, recv.dt),
            )?,
        }
        recv.with_whole(input.is_none(), |p| {
            self.reduce_scatter_bytes(input.as_deref(), p, &byte_counts, &dt, op)
        })
    }

    /// MPI_Scan with any datatype; `send` None: in place.
    pub fn scan_data(&self, send: Option<&Data>, recv: &mut DataMut, op: &Op) -> Result<()> {
        self.prefix_data(send, recv, op, false)
    }

    /// MPI_Exscan with any datatype; `send` None: in place. Rank 0's `recv` is left alone.
    pub fn exscan_data(&self, send: Option<&Data>, recv: &mut DataMut, op: &Op) -> Result<()> {
        self.prefix_data(send, recv, op, true)
    }

    fn prefix_data(&self, send: Option<&Data>, recv: &mut DataMut, op: &Op, exclusive: bool) -> Result<()> {
        let input = send.map(Data::packed).transpose()?;
        let dt = recv.dt.clone();
        buf_check(input.as_deref(), recv)?;
        // Exscan leaves rank 0's buffer as it was, so the packed copy starts from it.
        let load = input.is_none() || exclusive;
        recv.with_whole(load, |p| {
            self.prefix_bytes(input.as_deref(), p, &dt, op, exclusive)
        })
    }
}

fn buf_check(input: Option<&[u8]>, recv: &DataMut) -> Result<()> {
    match input {
        Some(i) => check_signature("reduction", i.len(), packed_len(recv.count, recv.dt)),
        None => Ok(()),
    }
}
