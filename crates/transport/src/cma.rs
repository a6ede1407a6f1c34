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
