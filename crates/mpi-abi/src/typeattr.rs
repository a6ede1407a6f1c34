//! Attributes on datatypes (MPI 4.1 §7.7.4): values under type keyvals, copied by
//! `MPI_Type_dup` through the keyval's copy callback, deleted through its delete callback
//! when replaced, deleted, or when the datatype is freed (the last set first). As for
//! communicators, a keyval the program frees stays usable for the values set with it, and
//! a callback's error is the error of the call that ran it (the value then stays).
//!
//! Type keyvals have numbers of their own, so that a communicator keyval given to a
//! datatype call (or the reverse) fails with `MPI_ERR_KEYVAL`.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::rc::Rc;

use crate::abi::*;
use crate::boundary::{fail, out, Fail, Res};
use crate::cargs::Out;
use crate::mpi_fn;
use crate::state::{mpi, Mpi};
use crate::state::{TypeAttr, TypeCopyFn, TypeDeleteFn, TypeKeyval, TYPE_KEYVAL_BASE};

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
    match a.kv.delete {
        // SAFETY: the program's delete callback, called as the standard says.
        Some(f) => callback("delete", unsafe {
            f(h, a.kv.id, a.value as *mut c_void, a.kv.extra as *mut c_void)
        }),
        None => Ok(()),
    }
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
        let v = match kv.copy {
            0 => continue,
            1 => value,
            f => {
                // SAFETY: any other value is the program's copy function.
                let f = unsafe { std::mem::transmute::<usize, TypeCopyFn>(f) };
                let (mut new, mut flag): (usize, c_int) = (0, 0);
                // SAFETY: the program's copy callback, called as the standard says.
                let rc = unsafe {
                    f(
                        from,
                        kv.id,
                        kv.extra as *mut c_void,
                        value as *mut c_void,
                        &mut new as *mut usize as *mut c_void,
                        &mut flag,
                    )
                };
                callback("copy", rc)?;
                if flag == 0 {
                    continue;
                }
                new
            }
        };
        copied.push(TypeAttr { kv, value: v });
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
    fn MPI_Type_create_keyval(type_copy_attr_fn: usize, type_delete_attr_fn: Option<TypeDeleteFn>, type_keyval: Out<c_int>, extra_state: *mut c_void) {
        let m = mpi()?;
        let k = type_keyval.place("type_keyval")?;
        let mut t = m.type_attrs.borrow_mut();
        let id = TYPE_KEYVAL_BASE + t.next;
        t.next += 1;
        let kv = TypeKeyval { id, copy: type_copy_attr_fn, delete: type_delete_attr_fn, extra: extra_state as usize };
        t.keyvals.insert(id, Rc::new(kv));
        *k = id;
        Ok(())
    }
}

mpi_fn! {
    safe fn MPI_Type_free_keyval(type_keyval: Out<c_int>) {
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
    fn MPI_Type_set_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: *mut c_void) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let kv = m.type_attrs.borrow_mut().keyval(type_keyval, false)?;
        remove(m, datatype, &kv)?;
        let a = TypeAttr { kv, value: attribute_val as usize };
        m.type_attrs.borrow_mut().values.entry(datatype).or_default().push(a);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Type_get_attr(datatype: MPI_Datatype, type_keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let flag = out(flag, "flag")?;
        let mut t = m.type_attrs.borrow_mut();
        let kv = t.keyval(type_keyval, true)?;
        let value = t.values.get(&datatype).and_then(|l| l.iter().find(|a| a.kv.id == kv.id)).map(|a| a.value);
        *flag = value.is_some() as c_int;
        if let Some(v) = value {
            *out(attribute_val as *mut usize, "attribute_val")? = v;
        }
        Ok(())
    }
}

mpi_fn! {
    safe fn MPI_Type_delete_attr(datatype: MPI_Datatype, type_keyval: c_int) {
        let m = mpi()?;
        m.datatype(datatype)?;
        let kv = m.type_attrs.borrow_mut().keyval(type_keyval, true)?;
        remove(m, datatype, &kv)
    }
}
