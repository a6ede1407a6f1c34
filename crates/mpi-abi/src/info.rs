//! Info objects: ordered (key, value) strings. pontoon reads no hints yet, so the
//! functions that take an info accept any and the ones that return one give an empty
//! one (`MPI_INFO_ENV` holds what the launcher knows).
//!
//! MPI-4 lets a program use the `MPI_Info_*` functions before `MPI_Init` and after
//! `MPI_Finalize` (to prepare hints for the session it starts), so the objects live in a
//! table of the process, not in the state `MPI_Init` makes.

use std::ffi::c_char;
use std::os::raw::c_int;
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::abi::*;
use crate::boundary::{fail, Fail, Res};
use crate::cargs::{In, Out};
use crate::handles::{Kind, Slab};
use crate::mpi_fn;

pub type InfoEntries = Vec<(String, String)>;

static INFOS: LazyLock<Mutex<Slab<InfoEntries>>> = LazyLock::new(|| Mutex::new(Slab::new(Kind::Info)));

/// The process's info objects (a panic elsewhere cannot leave the table unusable:
/// each change is one call on it).
fn infos() -> MutexGuard<'static, Slab<InfoEntries>> {
    INFOS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

const MAX_KEY: usize = 255;

fn key_arg(p: In<c_char>) -> Result<String, Fail> {
    let k = p.str("key")?;
    if k.is_empty() || k.len() > MAX_KEY {
        return fail(
            MPI_ERR_INFO_KEY,
            format!("info key {k:?} is empty or longer than {MAX_KEY} bytes"),
        );
    }
    Ok(k.to_string())
}

/// The entries of an info handle (a copy).
pub fn entries(h: MPI_Info) -> Result<InfoEntries, Fail> {
    match h {
        MPI_INFO_ENV => Ok(env_entries()),
        _ => infos()
            .get(h)
            .cloned()
            .ok_or_else(|| Fail::new(MPI_ERR_INFO, format!("{h:#x} is not an info object"))),
    }
}

/// Checks an info argument that is only accepted (hints pontoon does not read).
pub fn accepted(h: MPI_Info) -> Res {
    if h != MPI_INFO_NULL {
        entries(h)?;
    }
    Ok(())
}

/// A new info handle holding `e`.
pub fn add(e: InfoEntries) -> Result<MPI_Info, Fail> {
    infos()
        .insert(e)
        .ok_or_else(|| Fail::new(MPI_ERR_NO_MEM, "too many info objects"))
}

/// The variables that give the job's size, read at every call: MPI_Info_create_env gives
/// the same before MPI_Init, between Init and Finalize and after (MPI-4.0 §11.2.1):
/// pontoon's launcher, a PMI process manager (Hydra), srun.
const SIZE_VARIABLES: [&str; 3] = ["PONTOON_SIZE", "PMI_SIZE", "SLURM_NTASKS"];

/// What MPI_INFO_ENV holds: the same whenever it is asked.
fn env_entries() -> InfoEntries {
    let mut e = vec![("thread_level".to_string(), "MPI_THREAD_FUNNELED".to_string())];
    let size = SIZE_VARIABLES
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse::<u32>().ok());
    if let Some(n) = size {
        e.insert(0, ("maxprocs".to_string(), n.to_string()));
    }
    if let Ok(d) = std::env::current_dir() {
        e.push(("wdir".into(), d.to_string_lossy().into_owned()));
    }
    if let Ok(cmd) = std::env::current_exe() {
        e.push(("command".into(), cmd.to_string_lossy().into_owned()));
    }
    e
}

fn with_entries<R>(h: MPI_Info, f: impl FnOnce(&mut InfoEntries) -> Result<R, Fail>) -> Result<R, Fail> {
    if h == MPI_INFO_ENV {
        return fail(MPI_ERR_INFO, "MPI_INFO_ENV cannot be changed");
    }
    let mut t = infos();
    let e = t
        .get_mut(h)
        .ok_or_else(|| Fail::new(MPI_ERR_INFO, format!("{h:#x} is not an info object")))?;
    f(e)
}

mpi_fn! {
    fn MPI_Info_create(info: Out<MPI_Info>) {
        info.set("info", add(Vec::new())?)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Info_free(info: Out<MPI_Info>) {
        let h = info.place("info")?;
        if infos().remove(*h).is_none() {
            return fail(MPI_ERR_INFO, format!("{:#x} is not an info object that can be freed", *h));
        }
        *h = MPI_INFO_NULL;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Info_dup(info: MPI_Info, newinfo: Out<MPI_Info>) {
        let e = entries(info)?;
        newinfo.set("newinfo", add(e)?)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Info_set(info: MPI_Info, key: In<c_char>, value: In<c_char>) {
        let k = key_arg(key)?;
        let v = value.str("value")?;
        if info == MPI_INFO_ENV {
            return fail(MPI_ERR_INFO, "MPI_INFO_ENV cannot be changed");
        }
        set(info, &k, v)
    }
}

mpi_fn! {
    fn MPI_Info_delete(info: MPI_Info, key: In<c_char>) {
        let k = key_arg(key)?;
        with_entries(info, |e| {
            let before = e.len();
            e.retain(|(ek, _)| *ek != k);
            if e.len() == before {
                return fail(MPI_ERR_INFO_NOKEY, format!("info key {k:?} is not set"));
            }
            Ok(())
        })
    }
}

mpi_fn! {
    fn MPI_Info_get_nkeys(info: MPI_Info, nkeys: Out<c_int>) {
        nkeys.set("nkeys", entries(info)?.len() as c_int)?;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Info_get_nthkey(info: MPI_Info, n: c_int, key: Out<c_char>) {
        let e = entries(info)?;
        let Some((k, _)) = usize::try_from(n).ok().and_then(|i| e.get(i)) else {
            return fail(MPI_ERR_ARG, format!("key number {n} of an info with {} keys", e.len()));
        };
        key.put_str(MAX_KEY + 1, k, &Out::absent())
    }
}

mpi_fn! {
    /// `*buflen` in: the buffer's size; out: the value's length + 1.
    fn MPI_Info_get_string(info: MPI_Info, key: In<c_char>, buflen: Out<c_int>, value: Out<c_char>, flag: Out<c_int>) {
        let k = key_arg(key)?;
        let e = entries(info)?;
        let (buflen, flag) = (buflen.place("buflen")?, flag.place("flag")?);
        let Some((_, v)) = e.iter().find(|(ek, _)| *ek == k) else {
            *flag = 0;
            return Ok(());
        };
        *flag = 1;
        let cap = usize::try_from(*buflen).unwrap_or(0);
        if cap > 0 {
            value.put_str(cap, v, &Out::absent())?;
        }
        *buflen = v.len() as c_int + 1;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Info_get(info: MPI_Info, key: In<c_char>, valuelen: c_int, value: Out<c_char>, flag: Out<c_int>) {
        let k = key_arg(key)?;
        let e = entries(info)?;
        let flag = flag.place("flag")?;
        match e.iter().find(|(ek, _)| *ek == k) {
            Some((_, v)) => {
                *flag = 1;
                value.put_str(usize::try_from(valuelen).unwrap_or(0) + 1, v, &Out::absent())
            }
            None => {
                *flag = 0;
                Ok(())
            }
        }
    }
}

mpi_fn! {
    fn MPI_Info_get_valuelen(info: MPI_Info, key: In<c_char>, valuelen: Out<c_int>, flag: Out<c_int>) {
        let k = key_arg(key)?;
        let e = entries(info)?;
        let (valuelen, flag) = (valuelen.place("valuelen")?, flag.place("flag")?);
        match e.iter().find(|(ek, _)| *ek == k) {
            Some((_, v)) => {
                *flag = 1;
                *valuelen = v.len() as c_int;
            }
            None => *flag = 0,
        }
        Ok(())
    }
}

mpi_fn! {
    /// A new info with what MPI_INFO_ENV holds.
    fn MPI_Info_create_env(argc: c_int, argv: *mut *mut c_char, info: Out<MPI_Info>) {
        let _ = (argc, argv);
        info.set("info", add(env_entries())?)?;
        Ok(())
    }
}

mpi_fn! {
    /// pontoon describes no hardware resources yet: an empty info.
    fn MPI_Get_hw_resource_info(hw_info: Out<MPI_Info>) {
        hw_info.set("hw_info", add(Vec::new())?)?;
        Ok(())
    }
}

/// Sets `key` in a program's info object (MPI_Comm_split_type reports what it used).
pub fn set(h: MPI_Info, key: &str, value: &str) -> Res {
    let mut t = infos();
    let e = t
        .get_mut(h)
        .ok_or_else(|| Fail::new(MPI_ERR_INFO, format!("{h:#x} is not an info object")))?;
    match e.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value.to_string(),
        None => e.push((key.to_string(), value.to_string())),
    }
    Ok(())
}
