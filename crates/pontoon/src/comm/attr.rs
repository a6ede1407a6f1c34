//! Communicator attributes: values stored under keyvals, with copy callbacks run by
//! `dup` and delete callbacks run when a value is replaced or deleted, when its
//! communicator is freed, and at finalize (COMM_SELF, then COMM_WORLD).

use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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

/// Keyvals are numbered across the process (a program may make them on any thread).
static NEXT_KEYVAL: AtomicU32 = AtomicU32::new(1);
/// Orders the setting of values, so that they can be deleted in reverse.
static NEXT_SET: AtomicU64 = AtomicU64::new(1);

impl Keyval {
    /// `copy`: `None` never copies (MPI_COMM_NULL_COPY_FN); `delete`: `None` does nothing.
    pub fn new(copy: Option<CopyFn>, delete: Option<DeleteFn>) -> Keyval {
        let id = NEXT_KEYVAL.fetch_add(1, Ordering::Relaxed);
        Keyval(Rc::new(KeyvalData { id, copy, delete }))
    }

    /// A keyval whose values `dup` copies as they are (MPI_COMM_DUP_FN).
    pub fn copied(delete: Option<DeleteFn>) -> Keyval {
        Keyval::new(Some(Box::new(|_, v| Ok(Some(v)))), delete)
    }

    pub fn id(&self) -> u32 {
        self.0.id
    }

    /// Whether a value set with it still holds it (besides this handle): a keyval the
    /// program freed stays usable for those values until they are deleted.
    pub fn in_use(&self) -> bool {
        Rc::strong_count(&self.0) > 1
    }
}

pub(crate) struct Attr {
    kv: Keyval,
    value: usize,
    /// When it was set (see `NEXT_SET`).
    order: u64,
}

impl Attr {
    fn new(kv: &Keyval, value: usize) -> Attr {
        let order = NEXT_SET.fetch_add(1, Ordering::Relaxed);
        Attr {
            kv: kv.clone(),
            value,
            order,
        }
    }
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

/// Takes `kv`'s value out and runs its delete callback (outside the table's borrow, so
/// the callback may use the communicator). When the callback fails, the value stays
/// set and its error is the caller's: the program's callback refused the deletion.
fn remove(c: &Comm<'_>, kv: &Keyval) -> Result<()> {
    let old = c.d.attrs.borrow_mut().remove(&kv.0.id);
    let Some(old) = old else { return Ok(()) };
    match &old.kv.0.delete {
        Some(f) => f(c, old.value).inspect_err(|_| {
            c.d.attrs.borrow_mut().entry(kv.0.id).or_insert(old);
        }),
        None => Ok(()),
    }
}

pub(crate) fn set(c: &Comm<'_>, kv: &Keyval, value: usize) -> Result<()> {
    remove(c, kv)?;
    c.d.attrs.borrow_mut().insert(kv.0.id, Attr::new(kv, value));
    Ok(())
}

pub(crate) fn delete(c: &Comm<'_>, kv: &Keyval) -> Result<()> {
    remove(c, kv)
}

/// Deletes every attribute, the last set first (MPI orders it so for MPI_COMM_SELF at
/// finalize, where libraries hook their clean-up in); every callback runs, and the
/// first failure is returned after all ran.
pub(crate) fn delete_all(c: &Comm<'_>) -> Result<()> {
    let mut all: Vec<Attr> = std::mem::take(&mut *c.d.attrs.borrow_mut())
        .into_values()
        .collect();
    all.sort_by_key(|a| std::cmp::Reverse(a.order));
    let mut first = Ok(());
    for a in all {
        let r = run_delete(c, a);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Runs every copy callback of `from` and sets what they return on `to`.
pub(crate) fn copy_all(from: &Comm<'_>, to: &Comm<'_>) -> Result<()> {
    // In the order they were set, which the copies keep.
    let mut keys: Vec<(u64, Keyval, usize)> = from
        .d
        .attrs
        .borrow()
        .values()
        .map(|a| (a.order, a.kv.clone(), a.value))
        .collect();
    keys.sort_by_key(|k| k.0);
    for (_, kv, value) in keys {
        if let Some(copy) = &kv.0.copy {
            if let Some(v) = copy(from, value)? {
                to.d.attrs.borrow_mut().insert(kv.0.id, Attr::new(&kv, v));
            }
        }
    }
    Ok(())
}
