//! The reachability matrix: from every host, connect to every address of the testbed
//! and record which host answered. That shows what routing and NAT really do —
//! including the traps, e.g. that 10.0.0.12 from cluster a reaches a's node, never b's.
//!
//! Each host runs a small TCP server (in a thread moved into the host's network
//! namespace) that answers with the host's name; each probe is a thread in the source
//! host's namespace.

use crate::Testbed;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

/// The port the name servers listen on inside the hosts.
const PORT: u16 = 7;
const TIMEOUT: Duration = Duration::from_millis(1500);

/// What a connection attempt to one address found.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Answer {
    Host(String),
    Refused,
    Unreachable,
    TimedOut,
    Other(String),
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Host(h) => write!(f, "{h}"),
            Answer::Refused => write!(f, "refused"),
            Answer::Unreachable => write!(f, "unreachable"),
            Answer::TimedOut => write!(f, "timeout"),
            Answer::Other(e) => write!(f, "error: {e}"),
        }
    }
}

/// (from host, to address) → answer, for every host and every address of the testbed.
pub type Matrix = BTreeMap<(String, IpAddr), Answer>;

fn enter_netns(holder: u32) -> Result<(), String> {
    let ns = File::open(format!("/proc/{holder}/ns/net")).map_err(|e| e.to_string())?;
    rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
        .map_err(|e| format!("entering the network namespace of pid {holder}: {e}"))
}

/// Sets the flag when dropped: the name servers stop however `matrix` returns.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

pub fn matrix(testbed: &Testbed) -> Result<Matrix, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let _stop_servers = StopOnDrop(stop.clone());
    let mut servers = Vec::new();
    let (ready_tx, ready_rx) = mpsc::channel();
    for host in testbed.host_names() {
        let holder = testbed.holder(&host)?;
        let (stop, ready) = (stop.clone(), ready_tx.clone());
        servers.push(thread::spawn(move || serve_name(holder, host, stop, ready)));
    }
    drop(ready_tx);
    for result in ready_rx.iter().take(servers.len()) {
        result?;
    }
    let addresses: Vec<IpAddr> = testbed.topology.address_owners().into_keys().collect();
    let mut probes = Vec::new();
    for host in testbed.host_names() {
        let holder = testbed.holder(&host)?;
        for &addr in &addresses {
            let from = host.clone();
            probes.push(thread::spawn(move || {
                let answer = match enter_netns(holder) {
                    Ok(()) => ask_name(addr),
                    Err(e) => Answer::Other(e),
                };
                ((from, addr), answer)
            }));
        }
    }
    let matrix = probes
        .into_iter()
        .map(|p| p.join().expect("probe threads do not panic"))
        .collect();
    drop(_stop_servers);
    for s in servers {
        let _ = s.join();
    }
    Ok(matrix)
}

fn serve_name(holder: u32, name: String, stop: Arc<AtomicBool>, ready: mpsc::Sender<Result<(), String>>) {
    let listener = enter_netns(holder).and_then(|()| {
        let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, PORT)))
            .map_err(|e| format!("host {name}: listening on port {PORT}: {e}"))?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        Ok(l)
    });
    let listener = match listener {
        Ok(l) => {
            let _ = ready.send(Ok(()));
            l
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((mut conn, _)) => {
                let _ = conn.set_nonblocking(false);
                let _ = conn.write_all(name.as_bytes());
            }
            Err(_) => thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn ask_name(addr: IpAddr) -> Answer {
    let mut conn = match TcpStream::connect_timeout(&SocketAddr::new(addr, PORT), TIMEOUT) {
        Ok(c) => c,
        Err(e) => {
            return match e.kind() {
                std::io::ErrorKind::ConnectionRefused => Answer::Refused,
                std::io::ErrorKind::TimedOut => Answer::TimedOut,
                std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => {
                    Answer::Unreachable
                }
                _ => Answer::Other(e.to_string()),
            }
        }
    };
    let _ = conn.set_read_timeout(Some(TIMEOUT));
    let mut name = String::new();
    match conn.read_to_string(&mut name) {
        Ok(_) if !name.is_empty() => Answer::Host(name),
        Ok(_) => Answer::Other("closed without a name".into()),
        Err(e) => Answer::Other(e.to_string()),
    }
}

/// The matrix as a table: one row per source host, one column per address.
pub fn render(matrix: &Matrix) -> String {
    let mut rows: BTreeMap<&str, Vec<(IpAddr, &Answer)>> = BTreeMap::new();
    for ((from, to), answer) in matrix {
        rows.entry(from).or_default().push((*to, answer));
    }
    let mut out = String::new();
    for (from, cells) in rows {
        out.push_str(&format!("from {from}:\n"));
        for (to, answer) in cells {
            out.push_str(&format!("  {to:<22} -> {answer}\n"));
        }
    }
    out
}
