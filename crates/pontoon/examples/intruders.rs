//! Test program: rank 1 first plays intruder against rank 0's data port (a HELLO
//! signed with a wrong secret, a HELLO for the wrong job, plain garbage), then the
//! two ranks exchange messages normally: the intruders are refused and the job is
//! unaffected.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use proto::handshake::{Identity, Initiator};

fn knock(addr: std::net::SocketAddr, bytes: &[u8]) -> String {
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_secs(2)) else {
        return "no connect".into();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(3)));
    let _ = s.write_all(bytes);
    let mut ack = [0u8; 96];
    match s.read(&mut ack) {
        Ok(0) => "closed".into(),
        Ok(n) => format!("answered {n} bytes"),
        Err(e) => format!("read error: {e}"),
    }
}

fn main() -> Result<(), pontoon::Error> {
    let universe = pontoon::init()?;
    let world = universe.world();
    if world.rank() == 1 {
        let addr = *universe
            .diag()
            .peer_addresses(0)
            .iter()
            .find(|a| a.ip().is_loopback())
            .expect("rank 0 listens on loopback");
        let forger = Identity {
            job_id: [0; 16],
            secret: [7; 32],
            rank: 1,
            size: world.size(),
        };
        let (_, hello) = Initiator::new(forger, 0, [1; 16]);
        println!("wrong job/secret: {}", knock(addr, &hello));
        println!("garbage: {}", knock(addr, b"GET / HTTP/1.0\r\n\r\n this is not pontoon at all, padding padding padding padding padding padding"));
        world.send(&[42u32], 0, 5)?;
        let mut back = [0u32];
        world.recv(&mut back, Some(0), 6)?;
        println!("rank 1: exchange after intruders ok: {}", back[0]);
    } else if world.rank() == 0 {
        let mut v = [0u32];
        world.recv(&mut v, Some(1), 5)?;
        world.send(&[v[0] + 1], 1, 6)?;
    }
    universe.finalize()
}
