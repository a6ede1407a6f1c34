//! One copy between the ranks of a node: the receiver of a large message reads it straight
//! out of the sender's memory with `process_vm_readv` (cross-memory attach, CMA), where
//! a ring would copy it twice (in, then out). The kernel allows it between processes of
//! one user when ptrace would be allowed (Yama's `ptrace_scope` 0, or the capability),
//! and containers often forbid it (seccomp); pid namespaces make a peer's pid mean
//! another process. So it is used only between ranks that showed at start-up that it
//! works ([`crate::shm::ShmNode::reads_from`]: a token read from the peer's memory is
//! the one the peer published), and a read that fails later falls back to the ring.

use std::io;

use crate::Buffer;

/// Reads `len` bytes at address `at` in process `pid` into the start of `dst` (a
/// writable buffer of at least `len` bytes).
pub fn read_into(pid: u32, at: u64, dst: &Buffer, len: u64) -> io::Result<()> {
    let dst = dst.slice_mut(0, len);
    if (dst.len() as u64) < len {
        return Err(io::Error::other(
            "the receive buffer is shorter than the message read",
        ));
    }
    read(pid, at, dst)
}

/// Most messages read with one system call (the kernel's `UIO_MAXIOV`).
const BATCH: usize = 1024;

/// Reads several messages out of process `pid` with one system call for up to
/// [`BATCH`] of them: each part `(dst, at, len)` is `len` bytes at address `at` into the
/// start of `dst`. A window of receives pays one call's fixed cost (pinning, mapping:
/// about 5 µs of the 6 a 64 KiB read took here, `bench/sock`'s CMA figures in
/// docs/perf.md) instead of one each. Returns how many parts, from the first, were read
/// whole; the caller reads the rest one by one ([`read_into`]), which says why one
/// fails. (The kernel never splits one part: a read stops at a part it cannot read.)
pub fn read_many(pid: u32, parts: &[(&Buffer, u64, u64)]) -> usize {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return 0;
    };
    let mut done = 0;
    for chunk in parts.chunks(BATCH) {
        let mut local = Vec::with_capacity(chunk.len());
        let mut remote = Vec::with_capacity(chunk.len());
        for &(dst, at, len) in chunk {
            let dst = dst.slice_mut(0, len);
            if (dst.len() as u64) < len {
                break; // a short or read-only buffer: read_into says so
            }
            local.push(libc::iovec {
                iov_base: dst.as_mut_ptr().cast(),
                iov_len: dst.len(),
            });
            remote.push(libc::iovec {
                iov_base: at as usize as *mut libc::c_void,
                iov_len: dst.len(),
            });
        }
        // SAFETY: each local iovec describes a distinct receive buffer of this process,
        // writable for its length (checked above) and lent to the engine while the
        // receive is in flight; `remote` is only read by the kernel, which checks it
        // against the other process's mappings.
        let n = unsafe {
            libc::process_vm_readv(
                pid,
                local.as_ptr(),
                local.len() as _,
                remote.as_ptr(),
                remote.len() as _,
                0,
            )
        };
        let mut left = u64::try_from(n).unwrap_or(0);
        let whole = local.len();
        for iov in &local {
            if left < iov.iov_len as u64 {
                return done;
            }
            left -= iov.iov_len as u64;
            done += 1;
        }
        if whole < chunk.len() {
            return done;
        }
    }
    done
}

/// Reads `dst.len()` bytes at address `at` in process `pid`.
pub fn read(pid: u32, at: u64, dst: &mut [u8]) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("no such pid"))?;
    let mut done = 0usize;
    while done < dst.len() {
        let rest = &mut dst[done..];
        let local = libc::iovec {
            iov_base: rest.as_mut_ptr().cast(),
            iov_len: rest.len(),
        };
        let remote = libc::iovec {
            iov_base: (at as usize).wrapping_add(done) as *mut libc::c_void,
            iov_len: rest.len(),
        };
        // SAFETY: `local` describes `rest`, memory of this process writable for its
        // length and borrowed mutably for the call; `remote` is only read by the kernel,
        // which checks it against the other process's mappings (EFAULT if not mapped).
        let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(io::Error::other("process_vm_readv read nothing")),
            _ => return Err(io::Error::last_os_error()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_many_parts_in_one_call_up_to_the_first_that_fails() {
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 11) as u8).collect();
        let dsts: Vec<Buffer> = (0..3).map(|_| Buffer::owned(vec![0; 100_000])).collect();
        let me = std::process::id();
        let at = |i: usize| src.as_ptr() as u64 + (i * 100_000) as u64;
        let parts: Vec<_> = (0..3).map(|i| (&dsts[i], at(i), 100_000)).collect();
        assert_eq!(read_many(me, &parts), 3);
        for (i, d) in dsts.iter().enumerate() {
            assert_eq!(d.slice(0, 100_000), &src[i * 100_000..(i + 1) * 100_000]);
        }
        // Page zero in the middle: the first part only; too long a part: none after it.
        let bad = [
            (&dsts[0], at(0), 100_000),
            (&dsts[1], 8, 100),
            (&dsts[2], at(2), 100),
        ];
        assert_eq!(read_many(me, &bad), 1);
        let long = [(&dsts[0], at(0), 100), (&dsts[1], at(1), 200_000)];
        assert_eq!(read_many(me, &long), 1);
        assert_eq!(read_many(me, &[]), 0);
    }

    #[test]
    fn reads_memory_of_a_process_and_refuses_what_is_not_mapped() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let dst = Buffer::owned(vec![0; src.len()]);
        read_into(std::process::id(), src.as_ptr() as u64, &dst, src.len() as u64).unwrap();
        assert_eq!(dst.slice(0, src.len() as u64), &src[..]);
        let mut one = [0u8; 8];
        assert!(
            read(std::process::id(), 8, &mut one).is_err(),
            "page zero is never mapped"
        );
    }
}
