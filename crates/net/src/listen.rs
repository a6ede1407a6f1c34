//! Listening the way seed 000 §3.1 asks: one TCP socket per address family (IPv4, and
//! IPv6 with `IPV6_V6ONLY`; IPv4-mapped addresses are switched off on some systems),
//! each on a port of its own, and the connection-string entries that announce them:
//! every usable local address with its family's port. Used by the launcher's
//! coordinator and by every rank for its data connections.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

use crate::{AddrClass, ConnEntry};

/// Listening sockets and the entries that announce them.
pub struct Listening {
    pub sockets: Vec<TcpListener>,
    pub entries: Vec<ConnEntry>,
}

/// Sets the kernel's send and receive buffer sizes when `sockbuf` > 0 (0 keeps
/// autotuning). Call it before connect or listen, so that window scaling sees it.
pub fn set_buffers(s: &Socket, sockbuf: usize) -> io::Result<()> {
    if sockbuf > 0 {
        s.set_send_buffer_size(sockbuf)?;
        s.set_recv_buffer_size(sockbuf)?;
    }
    Ok(())
}

/// A non-blocking listener on `addr` (IPv6 only for an IPv6 address).
pub fn listen_at(addr: SocketAddr, sockbuf: usize) -> io::Result<TcpListener> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    // Accepted connections inherit the listener's buffer sizes.
    set_buffers(&s, sockbuf)?;
    // A fixed port must be free again as soon as its last listener closed, whatever
    // connections of it linger in TIME_WAIT.
    if addr.port() != 0 {
        s.set_reuse_address(true)?;
    }
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Non-blocking listeners for every family that has an address in `local` (loopback if
/// discovery found nothing). `sockbuf` > 0 sets the kernel buffer sizes. Fails, naming
/// each family's error, only when no family works.
pub fn listen_all(local: &[(IpAddr, AddrClass, String)], sockbuf: usize) -> Result<Listening, String> {
    let loopback = [(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        AddrClass::Loopback,
        "lo".to_string(),
    )];
    let local = if local.is_empty() { &loopback[..] } else { local };
    let mut out = Listening {
        sockets: Vec::new(),
        entries: Vec::new(),
    };
    let mut errors = Vec::new();
    for any in [
        IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    ] {
        let addrs: Vec<IpAddr> = local
            .iter()
            .map(|a| a.0)
            .filter(|a| a.is_ipv4() == any.is_ipv4())
            .collect();
        if addrs.is_empty() {
            continue;
        }
        match listen_at(SocketAddr::new(any, 0), sockbuf).and_then(|l| Ok((l.local_addr()?.port(), l))) {
            Ok((port, l)) => {
                out.entries
                    .extend(addrs.iter().map(|a| ConnEntry::new(SocketAddr::new(*a, port))));
                out.sockets.push(l);
            }
            Err(e) => errors.push(format!("cannot listen on {any}: {e}")),
        }
    }
    if out.entries.is_empty() {
        return Err(errors.join("; "));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_listener_per_family_and_entries_carry_its_port() {
        let local = vec![
            (
                IpAddr::V4(Ipv4Addr::LOCALHOST),
                AddrClass::Loopback,
                "lo".to_string(),
            ),
            (
                IpAddr::V6(Ipv6Addr::LOCALHOST),
                AddrClass::Loopback,
                "lo".to_string(),
            ),
        ];
        let Ok(l) = listen_all(&local, 0) else { return }; // a host without IPv6 at all
        for e in &l.entries {
            let port = l
                .sockets
                .iter()
                .filter_map(|s| s.local_addr().ok())
                .find(|a| a.is_ipv4() == e.addr.is_ipv4());
            assert_eq!(port.map(|a| a.port()), Some(e.addr.port()), "{e}");
        }
        let v4 = l
            .sockets
            .iter()
            .filter(|s| s.local_addr().is_ok_and(|a| a.is_ipv4()))
            .count();
        assert_eq!(v4, 1);
    }
}
