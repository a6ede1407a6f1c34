//! The Unix sockets of a node: where a rank joins its node's segment (the leader's
//! listening socket, the segment's fd passed with `SCM_RIGHTS`) and each rank's bell.
//! Abstract names live in the network namespace, so ranks of different containers or
//! testbed hosts never meet here.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

/// The job id in hex, by table: a rank names the bell of every peer of its node (the
/// formatter's `{:02x}` per byte was a tenth of a first alltoall of 256 ranks).
pub(super) fn job_hex(job_id: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    job_id
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])
        .map(char::from)
        .collect()
}

/// The abstract socket name where `rank` of the job `job_id` admits the ranks of its
/// node to the segment (only the node's leader does). Abstract names live in the network
/// namespace: ranks in different namespaces (containers, testbed hosts) never meet here
/// and use TCP.
pub fn socket_name(job_id: &[u8; 16], rank: u32) -> Vec<u8> {
    format!("pontoon-{}-{rank}", job_hex(job_id)).into_bytes()
}

/// The abstract name of `rank`'s bell (see [`Bell`]).
pub fn bell_name(job_id: &[u8; 16], rank: u32) -> Vec<u8> {
    format!("pontoon-{}-{rank}-bell", job_hex(job_id)).into_bytes()
}

/// A non-blocking Unix socket of `kind` and the abstract address `name`.
fn unix_socket(kind: SocketType, name: &[u8]) -> io::Result<(OwnedFd, SocketAddrUnix)> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        kind,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    Ok((fd, SocketAddrUnix::new_abstract_name(name)?))
}

/// Listens for ranks joining the node's segment under [`socket_name`] (non-blocking).
pub fn listen(name: &[u8]) -> io::Result<UnixListener> {
    let (fd, addr) = unix_socket(SocketType::STREAM, name)?;
    rustix::net::bind(&fd, &addr)?;
    // Every other rank of the node joins at once, at start-up: the kernel caps this at
    // `net.core.somaxconn`.
    rustix::net::listen(&fd, 4096)?;
    Ok(UnixListener::from(fd))
}

/// Connects to the leader's socket (non-blocking; a Unix connect completes at once or
/// fails at once: nobody listens there, or its backlog is full).
pub fn connect(name: &[u8]) -> io::Result<UnixStream> {
    let (fd, addr) = unix_socket(SocketType::STREAM, name)?;
    rustix::net::connect(&fd, &addr)?;
    Ok(UnixStream::from(fd))
}

/// Writes `bytes` and, with the first of them, `fd` (`SCM_RIGHTS`). Returns the bytes
/// written (a fresh socket takes a handshake frame whole).
pub fn send_with_fd(sock: &UnixStream, bytes: &[u8], fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    control.push(SendAncillaryMessage::ScmRights(&fds));
    Ok(rustix::net::sendmsg(
        sock,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?)
}

/// Reads into `buf`, taking a file descriptor passed along (the first one, if several).
/// `Ok((0, _))` is the end of the stream; `WouldBlock` when nothing is there.
pub fn recv_with_fd(sock: &UnixStream, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = rustix::net::recvmsg(
        sock,
        &mut [IoSliceMut::new(buf)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    let mut fd = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for f in fds {
                fd.get_or_insert(f); // any further fds are closed as they drop
            }
        }
    }
    Ok((msg.bytes, fd))
}

/// The pid of the process at the other end of a Unix socket, as this process sees it.
pub fn peer_pid(sock: &UnixStream) -> io::Result<u32> {
    let cred = rustix::net::sockopt::socket_peercred(sock)?;
    Ok(cred.pid.as_raw_nonzero().get() as u32)
}

/// A rank's bell: a Unix datagram socket under [`bell_name`], watched by its epoll set.
/// A datagram wakes the rank; what it says does not matter. Anyone in the network
/// namespace can ring it, which costs the rank a wake-up and nothing else.
pub struct Bell {
    fd: OwnedFd,
}

impl Bell {
    pub fn bind(name: &[u8]) -> io::Result<Bell> {
        let (fd, addr) = unix_socket(SocketType::DGRAM, name)?;
        rustix::net::bind(&fd, &addr)?;
        Ok(Bell { fd })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Takes every datagram waiting: a full queue would refuse the next wake-up.
    pub fn drain(&self) {
        let mut buf = [0u8; 16];
        while let Ok((_, n)) = rustix::net::recv(&self.fd, &mut buf[..], RecvFlags::DONTWAIT) {
            if n == 0 {
                break;
            }
        }
    }
}
