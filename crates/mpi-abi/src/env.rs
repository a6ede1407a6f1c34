//! The environment: init and finalize, versions, the clock, names, abort, and the
//! handle-to-integer conversions.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::Instant;

use crate::abi::*;
use crate::boundary::{fail, Res};
use crate::callbacks::Opaque;
use crate::cargs::Out;
use crate::mpi_fn;
use crate::state::{
    mpi, phase, set_phase, set_thread_level, start_locking, start_progress_thread, stop_progress_thread,
    thread_level, Mpi, AFTER, BEFORE, MOST_THREADS, RUNNING,
};

static MAIN_THREAD: OnceLock<std::thread::ThreadId> = OnceLock::new();

fn init() -> Res {
    match phase() {
        BEFORE => {}
        RUNNING => {
            return fail(
                MPI_ERR_OTHER,
                "MPI is initialized already (MPI_Init called twice)",
            )
        }
        _ => return fail(MPI_ERR_OTHER, "MPI was finalized and cannot be initialized again"),
    }
    clock();
    let several_threads = thread_level() == MPI_THREAD_MULTIPLE;
    let u = pontoon::init_threaded(several_threads)?;
    let progress_thread = u.wants_progress_thread()?;
    let m = Mpi::install(Box::leak(Box::new(u)));
    if several_threads || progress_thread {
        m.u.share(crate::state::gate())?;
        start_locking();
    }
    if progress_thread {
        start_progress_thread().map_err(|e| crate::boundary::Fail::new(MPI_ERR_OTHER, e))?;
    }
    let _ = MAIN_THREAD.set(std::thread::current().id());
    set_phase(RUNNING);
    Ok(())
}

mpi_fn! {
    fn MPI_Init(argc: Out<c_int>, argv: Out<*mut *mut c_char>) {
        let _ = (argc, argv);
        init()
    }
}

mpi_fn! {
    /// Every level is given: at MPI_THREAD_MULTIPLE any thread may call any function at
    /// any time.
    fn MPI_Init_thread(argc: Out<c_int>, argv: Out<*mut *mut c_char>, required: c_int, provided: Out<c_int>) {
        let _ = (argc, argv);
        let provided = provided.place("provided")?;
        let level = required.clamp(MPI_THREAD_SINGLE, MOST_THREADS);
        if phase() == BEFORE {
            set_thread_level(level);
        }
        init()?;
        *provided = level;
        Ok(())
    }
}

mpi_fn! {
    any thread fn MPI_Initialized(flag: Out<c_int>) {
        flag.set("flag", (phase() != BEFORE) as c_int)
    }
}

mpi_fn! {
    any thread fn MPI_Finalized(flag: Out<c_int>) {
        flag.set("flag", (phase() == AFTER) as c_int)
    }
}

mpi_fn! {
    fn MPI_Finalize() {
        let m = mpi()?;
        stop_progress_thread(m.u);
        let r = m.u.finalize();
        set_phase(AFTER);
        Ok(r?)
    }
}

mpi_fn! {
    any thread fn MPI_Query_thread(provided: Out<c_int>) {
        if phase() != RUNNING {
            return fail(MPI_ERR_OTHER, "MPI_Query_thread is for between MPI_Init and MPI_Finalize");
        }
        provided.set("provided", thread_level())
    }
}

mpi_fn! {
    any thread fn MPI_Is_thread_main(flag: Out<c_int>) {
        let flag = flag.place("flag")?;
        *flag = (MAIN_THREAD.get() == Some(&std::thread::current().id())) as c_int;
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Abort(comm: MPI_Comm, errorcode: c_int) on comm {
        let m = mpi()?;
        let rank = m.u.world().rank();
        m.u.abort(errorcode, &format!("MPI_Abort called by rank {rank} with error code {errorcode}"))
    }
}

mpi_fn! {
    any thread fn MPI_Get_version(version: Out<c_int>, subversion: Out<c_int>) {
        version.set("version", MPI_VERSION)?;
        subversion.set("subversion", MPI_SUBVERSION)
    }
}

mpi_fn! {
    any thread fn MPI_Abi_get_version(abi_major: Out<c_int>, abi_minor: Out<c_int>) {
        abi_major.set("abi_major", MPI_ABI_VERSION)?;
        abi_minor.set("abi_minor", MPI_ABI_SUBVERSION)
    }
}

/// What MPI_Get_library_version says.
pub fn library_version() -> String {
    format!(
        "pontoon {} (MPI {MPI_VERSION}.{MPI_SUBVERSION}, standard ABI {MPI_ABI_VERSION}.{MPI_ABI_SUBVERSION})",
        env!("CARGO_PKG_VERSION")
    )
}

mpi_fn! {
    any thread fn MPI_Get_library_version(version: Out<c_char>, resultlen: Out<c_int>) {
        version.put_str(MPI_MAX_LIBRARY_VERSION_STRING, &library_version(), &resultlen)
    }
}

mpi_fn! {
    fn MPI_Get_processor_name(name: Out<c_char>, resultlen: Out<c_int>) {
        // Under a testbed the launcher names the host; otherwise the kernel does.
        let host = std::env::var("PONTOON_NODE").ok().filter(|h| !h.is_empty()).unwrap_or_else(host_name);
        name.put_str(MPI_MAX_PROCESSOR_NAME, &host, &resultlen)
    }
}

/// This host's name as the kernel has it.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it
    // or truncates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    if rc == 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "localhost".into()
    }
}

/// The clock behind MPI_Wtime: its own, so a user function called inside a reduction
/// can read it while the engine is busy.
fn clock() -> Instant {
    *CLOCK.get_or_init(Instant::now)
}
static CLOCK: OnceLock<Instant> = OnceLock::new();

#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    clock().elapsed().as_secs_f64()
}
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> f64 {
    MPI_Wtime()
}

#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    1e-9
}
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> f64 {
    MPI_Wtick()
}

/// `MPI_<Kind>_toint` / `_fromint`: a handle is its integer value (created handles fit
/// in a positive `int`, see handles.rs).
macro_rules! int_conversions {
    ($($to:ident $pto:ident $from:ident $pfrom:ident;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $to(h: Handle) -> c_int {
            h as c_int
        }
        #[no_mangle]
        pub extern "C" fn $pto(h: Handle) -> c_int {
            h as c_int
        }
        #[no_mangle]
        pub extern "C" fn $from(i: c_int) -> Handle {
            i as u32 as Handle
        }
        #[no_mangle]
        pub extern "C" fn $pfrom(i: c_int) -> Handle {
            i as u32 as Handle
        }
    )*};
}

int_conversions! {
    MPI_Comm_toint PMPI_Comm_toint MPI_Comm_fromint PMPI_Comm_fromint;
    MPI_Errhandler_toint PMPI_Errhandler_toint MPI_Errhandler_fromint PMPI_Errhandler_fromint;
    MPI_Group_toint PMPI_Group_toint MPI_Group_fromint PMPI_Group_fromint;
    MPI_Info_toint PMPI_Info_toint MPI_Info_fromint PMPI_Info_fromint;
    MPI_Message_toint PMPI_Message_toint MPI_Message_fromint PMPI_Message_fromint;
    MPI_Op_toint PMPI_Op_toint MPI_Op_fromint PMPI_Op_fromint;
    MPI_Request_toint PMPI_Request_toint MPI_Request_fromint PMPI_Request_fromint;
    MPI_Type_toint PMPI_Type_toint MPI_Type_fromint PMPI_Type_fromint;
}

/// Memory MPI_Alloc_mem gave the program, by address, until MPI_Free_mem: 16-byte
/// aligned, as malloc's, and never read or written by pontoon itself.
static ALLOCATED: Mutex<BTreeMap<usize, Vec<MaybeUninit<u128>>>> = Mutex::new(BTreeMap::new());

fn allocated() -> std::sync::MutexGuard<'static, BTreeMap<usize, Vec<MaybeUninit<u128>>>> {
    ALLOCATED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

mpi_fn! {
    /// Heap memory: pontoon has no memory the network card must register.
    fn MPI_Alloc_mem(size: MPI_Aint, info: MPI_Info, baseptr: Out<*mut c_void>) {
        crate::info::accepted(info)?;
        let Ok(n) = usize::try_from(size) else {
            return fail(MPI_ERR_ARG, format!("size {size} is negative"));
        };
        let words = n.div_ceil(16).max(1);
        let mut block: Vec<MaybeUninit<u128>> = Vec::new();
        if block.try_reserve_exact(words).is_err() {
            return fail(MPI_ERR_NO_MEM, format!("cannot allocate {n} bytes"));
        }
        block.resize_with(words, MaybeUninit::uninit);
        let p = block.as_mut_ptr() as *mut c_void;
        baseptr.set("baseptr", p)?;
        allocated().insert(p as usize, block);
        Ok(())
    }
}

mpi_fn! {
    fn MPI_Free_mem(base: Opaque) {
        if base.bits() != 0 && allocated().remove(&base.bits()).is_none() {
            return fail(MPI_ERR_BASE, format!("{:#x} is not memory from MPI_Alloc_mem (freed already?)", base.bits()));
        }
        Ok(())
    }
}

#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    MPI_Aint_add(base, disp)
}
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    addr1.wrapping_sub(addr2)
}
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(addr1: MPI_Aint, addr2: MPI_Aint) -> MPI_Aint {
    MPI_Aint_diff(addr1, addr2)
}

/// Profiling control: pontoon has no built-in profiler, so every level is accepted and
/// ignored, as the standard allows. C declares it variadic (`int MPI_Pcontrol(const int
/// level, ...)`); on the x86-64 and AArch64 Linux calling conventions a callee that reads
/// only the first, fixed argument is called correctly that way.
#[no_mangle]
pub unsafe extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}
#[no_mangle]
pub unsafe extern "C" fn PMPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}
