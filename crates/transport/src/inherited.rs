//! A socket a process manager passed down by number (Slurm's and Hydra's `PMI_FD`).

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Takes ownership of descriptor `fd`, inherited from the parent, as a stream socket.
/// It must be open and a socket; it is made close-on-exec, so that programs this process
/// starts do not inherit it. Call it once per descriptor.
pub fn adopt_socket(fd: RawFd) -> io::Result<UnixStream> {
    let not = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("descriptor {fd} {why}"));
    if fd < 0 {
        return Err(not("is negative"));
    }
    // Checked on a borrowed view first: adopting a closed or foreign descriptor would
    // close someone else's file when it is dropped.
    // SAFETY: fcntl(F_GETFD) on any number is harmless; it fails with EBADF if unused.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(not("is not open"));
    }
    // SAFETY: `libc::stat` is plain integers, for which all zeroes is a valid value.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open (checked above); `stat` is a valid place for fstat to write.
    if unsafe { libc::fstat(fd, &mut stat) } < 0 {
        return Err(io::Error::last_os_error());
    }
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(not("is not a socket"));
    }
    // SAFETY: `fd` is an open socket that the caller hands over to us (see the doc).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC)?;
    Ok(UnixStream::from(owned))
}
