//! The relay client: how ranks and the launcher's coordinator register with relays
//! (`pontoon relay`; `docs/relay.md`), and how a requester asks one for a stream.
//!
//! At start-up, before its endpoint card goes out, a rank registers with every relay
//! that sees it under one of its own addresses: nothing translates between them, so the
//! relay can connect back to the rank's listener. A relay that sees another address
//! (the rank's NAT) could not reach it; that registration is dropped. The card then
//! lists the relays the rank is registered with, and a requester that cannot reach the
//! rank directly asks one of them for a stream ([`RelayDial`], driven by wire-up), or
//! asks its own relay to pass the request on (two-proxy). The coordinator registers the
//! same way, as rank [`COORDINATOR`], for ranks with no way out but their relay.
//!
//! Only a relay's globally unique addresses are used: with duplicated private subnets,
//! a relay's private address at one site is another host at the next.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use net::card::globally_unique;
pub use proto::wire::relay::COORDINATOR;
use proto::wire::relay::{self as wire, FRAME_LEN};
use proto::Rank;

/// A registration with one relay: lives as long as its connection.
pub struct Registration {
    /// Every address of the relay, as `PONTOON_RELAYS` gave them.
    pub addrs: Vec<SocketAddr>,
    /// The relay address the registration went to.
    pub via: SocketAddr,
    _conn: TcpStream,
}

impl Registration {
    /// What goes on the card: the relay's globally unique addresses.
    pub fn card_entry(&self) -> net::CardRelay {
        net::CardRelay {
            addrs: self
                .addrs
                .iter()
                .copied()
                .filter(|a| globally_unique(a.ip()))
                .collect(),
        }
    }
}

/// Where a relay saw one of this rank's connections come from, when that was a globally
/// unique address: the rank's address outside its NAT (or its own, with no NAT), as
/// STUN would tell it. Hole punching predicts its NAT's mapping from these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reflection {
    pub relay: SocketAddr,
    /// The connection's local address (its port is what a port-keeping NAT keeps).
    pub local: SocketAddr,
    pub seen: SocketAddr,
}

/// What registering with a job's relays came to.
#[derive(Default)]
pub struct Registered {
    pub registrations: Vec<Registration>,
    /// For every relay not registered with, why not.
    pub refused: Vec<String>,
    pub reflections: Vec<Reflection>,
}

/// Reads one relay frame within the socket's timeout.
fn read_frame(sock: &mut TcpStream) -> io::Result<[u8; FRAME_LEN]> {
    let mut b = [0u8; FRAME_LEN];
    sock.read_exact(&mut b)?;
    Ok(b)
}

/// A stream to `peer` (a rank, or [`COORDINATOR`]) through the relay at `relay` (and on
/// through `next`), blocking up to `timeout`: for the control connection, before the
/// event loop exists.
pub fn dial(
    relay: SocketAddr,
    next: Option<SocketAddr>,
    secret: &[u8; 32],
    peer: Rank,
    timeout: Duration,
) -> Result<TcpStream, String> {
    let mut sock = TcpStream::connect_timeout(&relay, timeout).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    // On a blocking socket one poll goes through the whole exchange.
    match RelayDial::new(next).poll(&mut sock, secret, peer) {
        RelayStep::Joined => {
            sock.set_read_timeout(None).map_err(|e| e.to_string())?;
            Ok(sock)
        }
        RelayStep::Failed(e) => Err(e),
        // A blocking socket only says "would block" when its timeout passed.
        RelayStep::Pending => Err(format!("the relay did not answer within {timeout:?}")),
    }
}

/// Registers at `addr`; `Ok(seen)` with the address the relay saw us come from.
fn register_at(
    addr: SocketAddr,
    secret: &[u8; 32],
    rank: Rank,
    port: u16,
    timeout: Duration,
) -> Result<(TcpStream, Option<SocketAddr>), String> {
    let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    // Checked for the version; a registration answers no challenge (it carries the
    // relay key itself).
    wire::challenge_nonce(&read_frame(&mut sock).map_err(|e| e.to_string())?)?;
    sock.write_all(&wire::register_request(secret, rank, port))
        .map_err(|e| e.to_string())?;
    let seen = wire::verdict(&read_frame(&mut sock).map_err(|e| e.to_string())?)?;
    Ok((sock, seen))
}

/// Registers with one relay through the first of its globally unique addresses that
/// sees us as ourselves. `Err` says, per address, why not. Every globally unique
/// address a relay saw us as is noted in `reflections`.
fn register_one(
    addrs: &[SocketAddr],
    secret: &[u8; 32],
    rank: Rank,
    ports: (u16, u16),
    own: &[IpAddr],
    timeout: Duration,
    reflections: &mut Vec<Reflection>,
) -> Result<Registration, String> {
    let mut why = Vec::new();
    for &addr in addrs.iter().filter(|a| globally_unique(a.ip())) {
        let port = if addr.is_ipv4() { ports.0 } else { ports.1 };
        if port == 0 {
            why.push(format!("{addr}: this rank has no listener of that family"));
            continue;
        }
        let attempt = register_at(addr, secret, rank, port, timeout);
        if let Ok((conn, Some(seen))) = &attempt {
            if let (true, Ok(local)) = (globally_unique(seen.ip()), conn.local_addr()) {
                reflections.push(Reflection {
                    relay: addr,
                    local,
                    seen: *seen,
                });
            }
        }
        match attempt {
            Ok((conn, Some(seen))) if own.contains(&seen.ip()) => {
                return Ok(Registration {
                    addrs: addrs.to_vec(),
                    via: addr,
                    _conn: conn,
                })
            }
            Ok((_, Some(seen))) => why.push(format!(
                "{addr} sees this rank as {} (a NAT in between): it could not forward to it",
                seen.ip()
            )),
            Ok((_, None)) => why.push(format!("{addr}: the relay did not say where it saw us")),
            Err(e) => why.push(format!("{addr}: {e}")),
        }
    }
    if why.is_empty() {
        why.push("no globally unique address (IPv4 public or IPv6 global)".into());
    }
    Err(why.join("; "))
}

/// Registers `rank` (or [`COORDINATOR`]) with every relay that can reach it back, all
/// relays at once: relayed streams come to `ports` (IPv4, IPv6; 0: no listener of that
/// family).
pub fn register_all(
    relays: &[Vec<SocketAddr>],
    secret: &[u8; 32],
    rank: Rank,
    ports: (u16, u16),
    own: &[IpAddr],
    timeout: Duration,
) -> Registered {
    let results: Vec<_> = thread::scope(|s| {
        let tries: Vec<_> = relays
            .iter()
            .map(|addrs| {
                s.spawn(move || {
                    let mut seen = Vec::new();
                    let r = register_one(addrs, secret, rank, ports, own, timeout, &mut seen);
                    (r, seen)
                })
            })
            .collect();
        tries
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| (Err("registration panicked".into()), Vec::new()))
            })
            .collect()
    });
    let mut out = Registered::default();
    for (addrs, (r, seen)) in relays.iter().zip(results) {
        out.reflections.extend(seen);
        match r {
            Ok(reg) => out.registrations.push(reg),
            Err(why) => {
                let first = addrs.first().map_or_else(String::new, |a| a.to_string());
                out.refused.push(format!("relay {first}: {why}"));
            }
        }
    }
    out
}

/// The requester's side of a relay, after the TCP connect: read the CHALLENGE, send a
/// CONNECT for the peer (or a FORWARD through the relay at `next`), read the VERDICT.
/// Non-blocking, driven by wire-up's polls.
#[derive(Default)]
pub struct RelayDial {
    buf: Vec<u8>,
    /// The request is out; the next frame is the verdict.
    asked: bool,
    /// Two-proxy: the relay at the peer's site, which ours passes the request on to.
    next: Option<SocketAddr>,
}

/// Where a relay exchange stands after a poll.
pub enum RelayStep {
    Pending,
    /// The stream is joined to the peer; the job's handshake may begin.
    Joined,
    Failed(String),
}

impl RelayDial {
    /// A dial for a path through the relay connected to, and on through `next` if given.
    pub fn new(next: Option<SocketAddr>) -> RelayDial {
        RelayDial {
            next,
            ..RelayDial::default()
        }
    }

    pub fn poll(&mut self, sock: &mut TcpStream, secret: &[u8; 32], peer: Rank) -> RelayStep {
        loop {
            let mut tmp = [0u8; FRAME_LEN];
            match sock.read(&mut tmp[..FRAME_LEN - self.buf.len()]) {
                Ok(0) => return RelayStep::Failed("the relay closed the connection".into()),
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return RelayStep::Pending,
                Err(e) => return RelayStep::Failed(e.to_string()),
            }
            if self.buf.len() < FRAME_LEN {
                continue;
            }
            let frame = std::mem::take(&mut self.buf);
            if self.asked {
                return match wire::verdict(&frame) {
                    Ok(_) => RelayStep::Joined,
                    Err(e) => RelayStep::Failed(e),
                };
            }
            let nonce = match wire::challenge_nonce(&frame) {
                Ok(n) => n,
                Err(e) => return RelayStep::Failed(e),
            };
            let request = match self.next {
                None => wire::connect_request(secret, &nonce, peer),
                Some(next) => wire::forward_request(secret, &nonce, peer, next),
            };
            // A fresh socket's send buffer always takes one frame.
            match sock.write(&request) {
                Ok(FRAME_LEN) => self.asked = true,
                Ok(_) => return RelayStep::Failed("short write to the relay".into()),
                Err(e) => return RelayStep::Failed(e.to_string()),
            }
        }
    }
}

/// For tests of other crates: a registration at a relay on loopback, whose address no
/// rank would register through.
#[doc(hidden)]
pub fn register_unchecked(
    relay: SocketAddr,
    secret: &[u8; 32],
    rank: Rank,
    port: u16,
) -> Result<(TcpStream, Option<SocketAddr>), String> {
    register_at(relay, secret, rank, port, Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    //! Against a real relay on loopback. Loopback is neither public nor global, so these
    //! drive `register_at` and `RelayDial` directly, not the address filter.
    use super::*;
    use std::net::TcpListener;

    const SECRET: [u8; 32] = [3; 32];

    fn relay() -> pontoon_relay::RelayHandle {
        pontoon_relay::Relay::bind(
            &["127.0.0.1:0".parse().unwrap()],
            pontoon_relay::Limits::default(),
        )
        .unwrap()
        .spawn()
    }

    #[test]
    fn a_registered_rank_is_reached_through_the_relay() {
        let relay = relay();
        let at = relay.addrs()[0];
        let rank_listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = rank_listener.local_addr().unwrap().port();
        let (_reg, seen) = register_at(at, &SECRET, 5, port, Duration::from_secs(5)).unwrap();
        assert_eq!(seen.map(|s| s.ip()), Some("127.0.0.1".parse().unwrap()));
        let mut sock = TcpStream::connect(at).unwrap();
        sock.set_nonblocking(true).unwrap();
        let mut dial = RelayDial::new(None);
        let joined = (0..5000).find_map(|_| match dial.poll(&mut sock, &SECRET, 5) {
            RelayStep::Pending => {
                thread::sleep(Duration::from_millis(1));
                None
            }
            RelayStep::Joined => Some(Ok(())),
            RelayStep::Failed(e) => Some(Err(e)),
        });
        assert_eq!(joined, Some(Ok(())));
        let (mut inside, _) = rank_listener.accept().unwrap();
        sock.set_nonblocking(false).unwrap();
        sock.write_all(b"hello").unwrap();
        let mut got = [0u8; 5];
        inside.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
    }

    #[test]
    fn a_rank_not_registered_is_refused_with_the_reason() {
        let relay = relay();
        let mut sock = TcpStream::connect(relay.addrs()[0]).unwrap();
        sock.set_nonblocking(true).unwrap();
        let mut dial = RelayDial::new(None);
        let failed = (0..5000).find_map(|_| match dial.poll(&mut sock, &SECRET, 9) {
            RelayStep::Pending => {
                thread::sleep(Duration::from_millis(1));
                None
            }
            RelayStep::Joined => Some(String::from("joined")),
            RelayStep::Failed(e) => Some(e),
        });
        let failed = failed.unwrap();
        assert!(failed.contains("UnknownJob"), "{failed}");
    }

    #[test]
    fn a_relay_seen_only_through_private_addresses_is_not_registered_with() {
        let relay = relay();
        let Registered {
            registrations: regs,
            refused: why,
            ..
        } = register_all(
            &[relay.addrs().to_vec()],
            &SECRET,
            1,
            (1, 1),
            &["127.0.0.1".parse().unwrap()],
            Duration::from_secs(1),
        );
        assert!(regs.is_empty());
        assert!(why[0].contains("no globally unique address"), "{why:?}");
    }
}
