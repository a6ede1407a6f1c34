//! Interface discovery on Linux over rtnetlink: one dump of the links and one of the
//! addresses, read into a 32 KiB buffer. `netdev` also dumps the routes (into 1 MiB
//! buffers it zeroes) and reads sysfs for every interface, none of which a rank needs:
//! that was a fifth of a rank's CPU in `MPI_Init`, paid by every rank of a node.
//! Any error here falls back to `netdev` (`iface::interfaces`).
//!
//! The kernel's bytes are parsed like a peer's: every length is checked before it is
//! used ([`Messages`], [`Attrs`]), and a message that does not parse is skipped.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::sockopt::Timeout;
use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType};

use crate::iface::Interface;

/// How long one `recv` of a dump may wait for the kernel.
const RECV_TIMEOUT: Duration = Duration::from_secs(1);
const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const RTM_NEWLINK: u16 = 16;
const RTM_GETLINK: u16 = 18;
const RTM_NEWADDR: u16 = 20;
const RTM_GETADDR: u16 = 22;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
/// `struct ifinfomsg` and `struct ifaddrmsg`.
const IFINFOMSG: usize = 16;
const IFADDRMSG: usize = 8;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFF_UP: u32 = 1;
const IFF_LOOPBACK: u32 = 8;
const IFA_F_DADFAILED: u32 = 0x08;
const IFA_F_TENTATIVE: u32 = 0x40;
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// Every interface of this host (its network namespace), in kernel index order.
pub(crate) fn interfaces() -> io::Result<Vec<Interface>> {
    let fd = open()?;
    let mut buf = vec![0u8; 32 << 10];
    let mut ifaces: Vec<Interface> = Vec::new();
    dump(&fd, RTM_GETLINK, IFINFOMSG, 1, &mut buf, |kind, body| {
        if let Some(i) = (kind == RTM_NEWLINK).then(|| link(body)).flatten() {
            ifaces.push(i);
        }
    })?;
    dump(&fd, RTM_GETADDR, IFADDRMSG, 2, &mut buf, |kind, body| {
        if let Some((index, addr)) = (kind == RTM_NEWADDR).then(|| address(body)).flatten() {
            if let Some(i) = ifaces.iter_mut().find(|i| i.index == index) {
                i.addrs.push(addr);
            }
        }
    })?;
    ifaces.sort_by_key(|i| i.index);
    Ok(ifaces)
}

fn open() -> io::Result<OwnedFd> {
    let fd = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::RAW,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // The kernel answers a dump at once; a socket that stays silent (a seccomp filter,
    // an odd sandbox) must not hold up `MPI_Init`: the caller falls back to `netdev`.
    rustix::net::sockopt::set_socket_timeout(&fd, Timeout::Recv, Some(RECV_TIMEOUT))?;
    Ok(fd)
}

/// Asks for a dump of `kind` (a request body of `body_len` zero bytes: every family,
/// every interface) and hands each message of the answer to `each`, until its end.
fn dump(
    fd: &OwnedFd,
    kind: u16,
    body_len: usize,
    seq: u32,
    buf: &mut [u8],
    mut each: impl FnMut(u16, &[u8]),
) -> io::Result<()> {
    let mut req = vec![0u8; NLMSG_HDR + body_len];
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&kind.to_ne_bytes());
    req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    req[8..12].copy_from_slice(&seq.to_ne_bytes());
    rustix::net::send(fd, &req, SendFlags::empty())?;
    loop {
        let (n, whole) = rustix::net::recv(fd, &mut *buf, RecvFlags::empty())?;
        if whole > n {
            return Err(io::Error::other("a netlink message larger than the buffer"));
        }
        for (kind, at_seq, body) in Messages(&buf[..n]) {
            if at_seq != seq {
                continue;
            }
            match kind {
                NLMSG_DONE => return Ok(()),
                NLMSG_ERROR => {
                    let code = body
                        .get(..4)
                        .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                    if code != 0 {
                        return Err(io::Error::from_raw_os_error(-code));
                    }
                }
                _ => each(kind, body),
            }
        }
    }
}

/// The messages of one datagram: `(type, sequence number, body)`; stops at the first
/// whose length does not fit.
struct Messages<'a>(&'a [u8]);

impl<'a> Iterator for Messages<'a> {
    type Item = (u16, u32, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        let len = u32::from_ne_bytes(b.get(0..4)?.try_into().ok()?) as usize;
        if len < NLMSG_HDR || len > b.len() {
            self.0 = &[];
            return None;
        }
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        let seq = u32::from_ne_bytes([b[8], b[9], b[10], b[11]]);
        self.0 = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((kind, seq, &b[NLMSG_HDR..len]))
    }
}

/// The attributes after a message's fixed part: `(type, payload)`; stops at the first
/// whose length does not fit.
struct Attrs<'a>(&'a [u8]);

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.0;
        let len = usize::from(u16::from_ne_bytes(b.get(0..2)?.try_into().ok()?));
        if len < 4 || len > b.len() {
            self.0 = &[];
            return None;
        }
        let kind = u16::from_ne_bytes([b[2], b[3]]) & 0x3fff; // without NLA_F_NESTED, NLA_F_NET_BYTEORDER
        self.0 = b.get(len.next_multiple_of(4)..).unwrap_or(&[]);
        Some((kind, &b[4..len]))
    }
}

/// An RTM_NEWLINK body: the interface, without addresses yet.
fn link(body: &[u8]) -> Option<Interface> {
    let fixed = body.get(..IFINFOMSG)?;
    let index = u32::from_ne_bytes(fixed[4..8].try_into().ok()?);
    let flags = u32::from_ne_bytes(fixed[8..12].try_into().ok()?);
    let (mut name, mut mac, mut mtu) = (None, None, None);
    for (kind, data) in Attrs(&body[IFINFOMSG..]) {
        match kind {
            IFLA_IFNAME => {
                let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
                name = std::str::from_utf8(&data[..end]).ok().map(str::to_string);
            }
            IFLA_ADDRESS => mac = <[u8; 6]>::try_from(data).ok().filter(|m| *m != [0; 6]),
            IFLA_MTU => mtu = data.try_into().ok().map(u32::from_ne_bytes),
            _ => {}
        }
    }
    Some(Interface {
        index,
        name: name?,
        mac,
        mtu,
        up: flags & IFF_UP != 0,
        loopback: flags & IFF_LOOPBACK != 0,
        addrs: Vec::new(),
    })
}

/// An RTM_NEWADDR body: the interface's index and the address, unless it cannot be
/// used (an IPv6 address still in duplicate address detection, or that failed it).
fn address(body: &[u8]) -> Option<(u32, IpAddr)> {
    let fixed = body.get(..IFADDRMSG)?;
    let (family, mut flags) = (fixed[0], u32::from(fixed[2]));
    let index = u32::from_ne_bytes(fixed[4..8].try_into().ok()?);
    let (mut address, mut local) = (None, None);
    for (kind, data) in Attrs(&body[IFADDRMSG..]) {
        let ip = match (family, data.len()) {
            (AF_INET, 4) => <[u8; 4]>::try_from(data)
                .ok()
                .map(|b| IpAddr::V4(Ipv4Addr::from(b))),
            (AF_INET6, 16) => <[u8; 16]>::try_from(data)
                .ok()
                .map(|b| IpAddr::V6(Ipv6Addr::from(b))),
            _ => None,
        };
        match kind {
            IFA_ADDRESS => address = ip,
            IFA_LOCAL => local = ip,
            IFA_FLAGS => flags = data.try_into().ok().map_or(flags, u32::from_ne_bytes),
            _ => {}
        }
    }
    if flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED) != 0 {
        return None;
    }
    // On a point-to-point link IFA_ADDRESS is the far end's; IFA_LOCAL is ours.
    Some((index, local.or(address)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_silent_kernel_cannot_hold_up_the_caller() {
        let fd = open().unwrap();
        let waits = rustix::net::sockopt::socket_timeout(&fd, Timeout::Recv).unwrap();
        assert_eq!(waits, Some(RECV_TIMEOUT));
        // Nothing was asked, so nothing comes: the recv gives up instead of blocking.
        let mut buf = [0u8; 64];
        let err = rustix::net::recv(&fd, &mut buf[..], RecvFlags::empty()).unwrap_err();
        assert_eq!(err, rustix::io::Errno::AGAIN);
    }

    #[test]
    fn the_same_interfaces_as_netdev_finds() {
        let ours = interfaces().expect("rtnetlink answers");
        let theirs = crate::iface::interfaces_by_netdev();
        assert_eq!(ours, theirs);
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = ((4 + data.len()) as u16).to_ne_bytes().to_vec();
        a.extend(kind.to_ne_bytes());
        a.extend(data);
        a.resize(a.len().next_multiple_of(4), 0);
        a
    }

    #[test]
    fn tentative_and_failed_ipv6_addresses_are_left_out_and_ipv4_takes_the_local_one() {
        let mut v6 = vec![AF_INET6, 64, 0, 0];
        v6.extend(7u32.to_ne_bytes());
        v6.extend(attr(IFA_ADDRESS, &Ipv6Addr::LOCALHOST.octets()));
        assert_eq!(address(&v6), Some((7, IpAddr::V6(Ipv6Addr::LOCALHOST))));
        let mut tentative = v6.clone();
        tentative.extend(attr(IFA_FLAGS, &IFA_F_TENTATIVE.to_ne_bytes()));
        assert_eq!(address(&tentative), None);
        let mut failed = v6.clone();
        failed[2] = IFA_F_DADFAILED as u8;
        assert_eq!(address(&failed), None);
        let mut p2p = vec![AF_INET, 32, 0, 0];
        p2p.extend(3u32.to_ne_bytes());
        p2p.extend(attr(IFA_ADDRESS, &[10, 0, 0, 2]));
        p2p.extend(attr(IFA_LOCAL, &[10, 0, 0, 1]));
        assert_eq!(address(&p2p), Some((3, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))));
    }

    proptest! {
        /// Whatever the bytes, parsing ends without a panic and reads nothing outside them.
        #[test]
        fn any_bytes_parse_or_are_skipped(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            for (kind, _, body) in Messages(&bytes) {
                let _ = (kind, link(body), address(body));
            }
            let _ = (link(&bytes), address(&bytes), Attrs(&bytes).count());
        }
    }
}
