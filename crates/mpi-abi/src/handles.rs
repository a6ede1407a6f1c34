//! Tables behind created handles. A created handle is `1 << 30 | kind << 24 | slot`:
//! far above every predefined value (all below 0x1000), tagged with its kind so a
//! datatype passed as a communicator is caught, and small enough that
//! `MPI_*_toint` gives it back as a positive `int`.

use crate::abi::Handle;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Comm = 1,
    Group = 2,
    Datatype = 3,
    Op = 4,
    Request = 5,
    Errhandler = 6,
    Info = 7,
    Message = 8,
}

const CREATED: usize = 1 << 30;
const SLOTS: usize = 1 << 24;

/// Entries of one kind, reusing freed slots.
pub struct Slab<T> {
    kind: Kind,
    entries: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    pub fn new(kind: Kind) -> Slab<T> {
        Slab {
            kind,
            entries: Vec::new(),
            free: Vec::new(),
        }
    }

    /// Stores `v`; `None` when the table is full.
    pub fn insert(&mut self, v: T) -> Option<Handle> {
        let slot = match self.free.pop() {
            Some(s) => {
                self.entries[s] = Some(v);
                s
            }
            None if self.entries.len() < SLOTS => {
                self.entries.push(Some(v));
                self.entries.len() - 1
            }
            None => return None,
        };
        Some(CREATED | (self.kind as usize) << 24 | slot)
    }

    fn slot(&self, h: Handle) -> Option<usize> {
        (h & !(SLOTS - 1) == CREATED | (self.kind as usize) << 24).then_some(h & (SLOTS - 1))
    }

    pub fn get(&self, h: Handle) -> Option<&T> {
        self.entries.get(self.slot(h)?)?.as_ref()
    }

    pub fn get_mut(&mut self, h: Handle) -> Option<&mut T> {
        let s = self.slot(h)?;
        self.entries.get_mut(s)?.as_mut()
    }

    pub fn remove(&mut self, h: Handle) -> Option<T> {
        let s = self.slot(h)?;
        let v = self.entries.get_mut(s)?.take()?;
        self.free.push(s);
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_their_kind_and_reuse_slots() {
        let mut comms: Slab<&str> = Slab::new(Kind::Comm);
        let mut types: Slab<&str> = Slab::new(Kind::Datatype);
        let a = comms.insert("a").unwrap();
        let t = types.insert("t").unwrap();
        assert!(a > 0x1000 && a < i32::MAX as usize, "{a:#x}");
        assert_eq!(comms.get(a), Some(&"a"));
        assert_eq!(comms.get(t), None, "a datatype handle is not a communicator");
        assert_eq!(comms.get(0x101), None);
        assert_eq!(comms.remove(a), Some("a"));
        assert_eq!(comms.get(a), None);
        let b = comms.insert("b").unwrap();
        assert_eq!(a, b, "freed slots are reused");
    }
}
