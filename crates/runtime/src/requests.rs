//! The request table: every send and receive in flight, with its buffer and result.

use proto::{Failure, ReqId, Status};
use transport::Buffer;

pub struct Req {
    pub buf: Buffer,
    pub result: Option<Result<Status, Failure>>,
    /// A send that may still be cancelled: what the engine needs for it.
    pub sent: Option<proto::Sent>,
    /// A cancel of this send awaits its answer: not done before it comes.
    pub cancelling: bool,
}

impl Req {
    pub fn new(buf: Buffer) -> Req {
        Req {
            buf,
            result: None,
            sent: None,
            cancelling: false,
        }
    }
}

/// Slots with generations, so that a stale id (from the network or a user) never
/// reaches another request.
#[derive(Default)]
pub struct Requests {
    slots: Vec<(u32, Option<Req>)>,
    free: Vec<u32>,
}

fn split(id: ReqId) -> (u32, u32) {
    ((id & 0xffff_ffff) as u32, (id >> 32) as u32)
}

impl Requests {
    pub fn insert(&mut self, req: Req) -> ReqId {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push((0, None));
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[idx as usize];
        slot.0 = slot.0.wrapping_add(1);
        slot.1 = Some(req);
        (u64::from(slot.0) << 32) | u64::from(idx)
    }

    /// No request is in flight.
    pub fn is_empty(&self) -> bool {
        self.free.len() == self.slots.len()
    }

    pub fn get(&self, id: ReqId) -> Option<&Req> {
        let (idx, gen) = split(id);
        match self.slots.get(idx as usize) {
            Some((g, Some(r))) if *g == gen => Some(r),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, id: ReqId) -> Option<&mut Req> {
        let (idx, gen) = split(id);
        match self.slots.get_mut(idx as usize) {
            Some((g, Some(r))) if *g == gen => Some(r),
            _ => None,
        }
    }

    pub fn remove(&mut self, id: ReqId) -> Option<Req> {
        let (idx, gen) = split(id);
        match self.slots.get_mut(idx as usize) {
            Some((g, slot)) if *g == gen && slot.is_some() => {
                self.free.push(idx);
                slot.take()
            }
            _ => None,
        }
    }
}
