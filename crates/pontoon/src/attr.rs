//! Communicator attributes: values stored under keyvals, with copy callbacks run by
//! `dup` and delete callbacks run when a value is replaced or deleted, when its
//! communicator is freed, and at finalize (COMM_SELF, then COMM_WORLD).

use std::cell::Cell;
use std::rc::Rc;

use crate::comm::Comm;
use crate::Result;

/// Decides what a `dup` gives the new communicator: `Some(value)` to copy, `None` not to.
pub type CopyFn = Box<dyn Fn(&Comm<'_>, usize) -> Result<Option<usize>>>;
/// Runs when a value leaves a communicator.
pub type DeleteFn = Box<dyn Fn(&Comm<'_>, usize) -> Result<()>>;

struct KeyvalData {
    id: u32,
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
}

/// An attribute key (MPI_Comm_create_keyval). Dropping every handle frees it; values
/// already set keep it alive until they are deleted, as MPI requires.
#[derive(Clone)]
pub struct Keyval(Rc<KeyvalData>);

thread_local! {
    static NEXT_KEYVAL: Cell<u32> = const { Cell::new(1) };
}

impl Keyval {
    /// `copy`: `None` never copies (MPI_COMM_NULL_COPY_FN); `delete`: `None` does nothing.
    pub fn new(copy: Option<CopyFn>, delete: Option<DeleteFn>) -> Keyval {
        let id = NEXT_KEYVAL.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        Keyval(Rc::new(KeyvalData { id, copy, delete }))
    }

    /// A keyval whose values `dup` copies as they are (MPI_COMM_DUP_FN).
    pub fn copied(delete: Option<DeleteFn>) -> Keyval {
        Keyval::new(Some(Box::new(|_, v| Ok(Some(v)))), delete)
    }

    pub fn id(&self) -> u32 {
        self.0.id
    }
}

pub(crate) struct Attr {
    kv: Keyval,
    value: usize,
}

pub(crate) fn get(c: &Comm<'_>, kv: &Keyval) -> Option<usize> {
    c.d.attrs.borrow().get(&kv.0.id).map(|a| a.value)
}

fn run_delete(c: &Comm<'_>, a: Attr) -> Result<()> {
    match &a.kv.0.delete {
        Some(f) => f(c, a.value),
        None => Ok(()),
    }
}

pub(crate) fn set(c: &Comm<'_>, kv: &Keyval, value: usize) -> Result<()> {
    let old = c.d.attrs.borrow_mut().remove(&kv.0.id);
    if let Some(old) = old {
        run_delete(c, old)?;
    }
    c.d.attrs.borrow_mut().insert(
        kv.0.id,
        Attr {
            kv: kv.clone(),
            value,
        },
    );
    Ok(())
}

pub(crate) fn delete(c: &Comm<'_>, kv: &Keyval) -> Result<()> {
    let old = c.d.attrs.borrow_mut().remove(&kv.0.id);
    match old {
        Some(a) => run_delete(c, a),
        None => Ok(()),
    }
}

/// Deletes every attribute (callbacks run outside the table's borrow, so they may
/// use the communicator); the first failure is returned after all ran.
pub(crate) fn delete_all(c: &Comm<'_>) -> Result<()> {
    let all = std::mem::take(&mut *c.d.attrs.borrow_mut());
    let mut first = Ok(());
    for (_, a) in all {
        let r = run_delete(c, a);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Runs every copy callback of `from` and sets what they return on `to`.
pub(crate) fn copy_all(from: &Comm<'_>, to: &Comm<'_>) -> Result<()> {
    let keys: Vec<(Keyval, usize)> = from
        .d
        .attrs
        .borrow()
        .values()
        .map(|a| (a.kv.clone(), a.value))
        .collect();
    for (kv, value) in keys {
        if let Some(copy) = &kv.0.copy {
            if let Some(v) = copy(from, value)? {
                to.d.attrs.borrow_mut().insert(
                    kv.0.id,
                    Attr {
                        kv: kv.clone(),
                        value: v,
                    },
                );
            }
        }
    }
    Ok(())
}
