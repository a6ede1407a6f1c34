//! Attributes on datatypes (MPI 4.1 §7.7.4): values under type keyvals, copied by
//! `MPI_Type_dup` through the keyval's copy callback, deleted through its delete callback
//! when replaced, deleted, or when the datatype is freed (the last set first). As for
//! communicators, a keyval the program frees stays usable for the values set with it, and
//! a callback's error is the error of the call that ran it (the value then stays).
//!
//! Type keyvals have numbers of their own, so that a communicator keyval given to a
//! datatype call (or the reverse) fails with `MPI_ERR_KEYVAL`.

use std::os::raw::c_int;
use std::rc::Rc;

use crate::abi::*;
use crate::boundary::{fail, Fail, Res};
use crate::callbacks::{CopyAttr, DeleteAttr, Opaque};
use crate::cargs::Out;
use crate::mpi_fn;
use crate::state::{mpi, Mpi};
use crate::state::{TypeAttr, TypeKeyval, TYPE_KEYVAL_BASE};

fn callback(what: &str, rc: c_int) -> Res {
    if rc == MPI_SUCCESS {
        return Ok(());
    }
    Err(Fail::new(
        rc,
        format!("the program's datatype attribute {what} callback returned {rc}"),
    ))
}

fn run_delete(h: MPI_Datatype, a: &TypeAttr) -> Res {
    callback("delete", a.kv.delete.delete(h, a.kv.id, a.value, a.kv.extra))
}

/// Takes `kv`'s value off `h` and runs its delete callback (no table borrowed, so the
/// callback may call MPI); a failing callback leaves the value set.
fn remove(m: &Mpi, h: MPI_Datatype, kv: &TypeKeyval) -> Res {
    let taken = {
        let mut t = m.type_attrs.borrow_mut();
        let list = t.values.entry(h).or_default();
        list.iter()
            .position(|a| a.kv.id == kv.id)
            .map(|i| (i, list.remove(i)))
    };
    let Some((i, old)) = taken else { return Ok(()) };
    run_delete(h, &old).inspect_err(|_| {
        let mut t = m.type_attrs.borrow_mut();
        let list = t.values.entry(h).or_default();
        list.insert(i.min(list.len()), old);
    })
}

/// MPI_Type_dup: runs the copy callbacks of `from`'s values and sets what they return
/// on `to`, in the order they were set.
pub(crate) fn copy_all(m: &Mpi, from: MPI_Datatype, to: MPI_Datatype) -> Res {
    let list: Vec<(Rc<TypeKeyval>, usize)> = match m.type_attrs.borrow().values.get(&from) {
        Some(l) => l.iter().map(|a| (a.kv.clone(), a.value)).collect(),
        None => return Ok(()),
    };
    let mut copied = Vec::new();
    for (kv, value) in list {
        match kv.copy.copy(from, kv.id, kv.extra, value) {
            Ok(Some(v)) => copied.push(TypeAttr { kv, value: v }),
            Ok(None) => {}
            Err(rc) => return callback("copy", rc),
        }
    }
    m.type_attrs.borrow_mut().values.insert(to, copied);
    Ok(())
}

/// MPI_Type_free: deletes every value of `h`, the last set first; all callbacks run and
/// the first failure is returned.
pub(crate) fn delete_all(m: &Mpi, h: MPI_Datatype) -> Res {
    let list = m.type_attrs.borrow_mut().values.remove(&h).unwrap_or_default();
    let mut first = Ok(());
    for a in list.iter().rev() {
        let r = run_delete(h, a);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

mpi_fn! {
    fn MPI_Type_create_keyval(type_copy_attr_fn: CopyAttr, type_delete_attr_fn: DeleteAttr, type_keyval: Out<c_int>, extra_state: Opaque) {
        let m = mpi()?;
        let k = type_keyval.place("type_keyval")?;
        let mut t = m.type_attrs.borrow_mut();
        let id = TYPE_KEYVAL_BASE + t.next;
        t.next += 1;
        let kv = TypeKeyval { id, copy: type_copy_attr_fn, delete: type_delete_attr_fn, extra: extra_state.bits() };
        t.keyvals.insert(id, Rc::new(kv));
        *k = id;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_free_keyval(type_keyval: Out<c_int>) {
        let m = mpi()?;
        let k = type_keyval.place("type_keyval")?;
        let mut t = m.type_attrs.borrow_mut();
        let Some(kv) = t.keyvals.remove(k) else {
            return fail(MPI_ERR_KEYVAL, format!("{} is not a datatype keyval", *k));
        };
        if Rc::strong_count(&kv) > 1 {
            t.retired.insert(*k, kv);
        }
        *k = MPI_KEYVAL_INVALID;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_set_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: Opaque) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let kv = m.type_attrs.borrow_mut().keyval(type_keyval, false)?;
        remove(m, datatype, &kv)?;
        let a = TypeAttr { kv, value: attribute_val.bits() };
        m.type_attrs.borrow_mut().values.entry(datatype).or_default().push(a);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_get_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: Out<usize>, flag: Out<c_int>) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let flag = flag.place("flag")?;
        let mut t = m.type_attrs.borrow_mut();
        let kv = t.keyval(type_keyval, true)?;
        let value = t.values.get(&datatype).and_then(|l| l.iter().find(|a| a.kv.id == kv.id)).map(|a| a.value);
        *flag = value.is_some() as c_int;
        if let Some(v) = value {
            attribute_val.set("attribute_val", v)?;
        }
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_delete_attr(datatype: MPI_Datatype, type_keyval: c_int) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let kv = m.type_attrs.borrow_mut().keyval(type_keyval, true)?;
        remove(m, datatype, &kv)
    }
}
