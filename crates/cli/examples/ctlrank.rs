//! A minimal rank for the launcher's tests, speaking the control protocol through
//! `runtime::control` (no MPI). Run it under `pontoon run`:
//!
//! - `kv`: Hello → Put → Fence → checks every rank's key → Fence → Finalize.
//! - `nofinalize`: Hello, then exit 0 without finalizing.
//! - `abort`: rank 1 aborts with code 7; the others wait for the end.
//! - `die`: rank 1 SIGKILLs itself after Hello; the others report `PeerFailed`.
//! - `intruder`: rank 0 first attacks the coordinator (wrong secret, garbage, a
//!   silent connection, a second Hello as itself, a rank out of range), then all do `kv`.

use runtime::control::ControlClient;
use runtime::jobenv::JobEnv;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::exit;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(5);

fn fail(msg: String) -> ! {
    eprintln!("ctlrank: {msg}");
    exit(3)
}

fn kv(env: &JobEnv, c: &mut ControlClient) {
    let r = env.rank;
    c.put(&format!("rank/{r}"), format!("hello from {r}").as_bytes())
        .unwrap_or_else(|e| fail(e.to_string()));
    let kvs = c.fence(1).unwrap_or_else(|e| fail(e.to_string()));
    for other in 0..env.size {
        let want = format!("hello from {other}");
        if kvs.get(&format!("rank/{other}")).map(Vec::as_slice) != Some(want.as_bytes()) {
            fail(format!(
                "rank {r}: key rank/{other} missing after the fence: {kvs:?}"
            ));
        }
    }
    println!("rank {r} saw {} keys", kvs.len());
    c.fence(2).unwrap_or_else(|e| fail(e.to_string()));
    c.finalize().unwrap_or_else(|e| fail(e.to_string()));
    println!("rank {r} finalized");
}

/// Prints events until the launcher ends the job or goes away.
fn wait_for_the_end(c: &mut ControlClient, rank: u32) -> i32 {
    let end = Instant::now() + Duration::from_secs(20);
    while Instant::now() < end {
        match c.poll_event() {
            Ok(Some(proto::control::FromCoordinator::PeerFailed { rank: p, cause })) => {
                println!("rank {rank}: peer {p} failed: {cause}");
                return 1;
            }
            Ok(Some(ev)) => println!("rank {rank}: {ev:?}"),
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => {
                println!("rank {rank}: {e}");
                return 1;
            }
        }
    }
    fail("nothing ended the job".into())
}

fn intrude(env: &JobEnv) -> TcpStream {
    let mut bad = env.clone();
    bad.secret[0] ^= 1;
    match ControlClient::connect(&bad, T) {
        Ok(_) => fail("a wrong secret was accepted".into()),
        Err(e) => println!("intruder: wrong secret refused: {e}"),
    }
    let mut garbage = env
        .coord
        .iter()
        .find_map(|e| TcpStream::connect_timeout(&e.addr, T).ok())
        .unwrap();
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    garbage.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    match garbage.read(&mut [0u8; 64]) {
        Ok(0) | Err(_) => println!("intruder: garbage connection closed"),
        Ok(_) => fail("garbage got an answer".into()),
    }
    // Kept open and silent for the whole job: it must not hold anything up.
    let silent = env
        .coord
        .iter()
        .find_map(|e| TcpStream::connect_timeout(&e.addr, T).ok())
        .unwrap();
    let mut outside = env.clone();
    outside.rank = env.size + 3;
    match ControlClient::connect(&outside, T) {
        Ok(_) => fail("a rank out of range was accepted".into()),
        Err(e) => println!("intruder: rank out of range refused: {e}"),
    }
    silent
}

fn main() {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "kv".into());
    let env = match JobEnv::from_env() {
        Ok(Some(env)) => env,
        Ok(None) => fail("not started by pontoon run".into()),
        Err(e) => fail(e.to_string()),
    };
    if std::env::var_os("PONTOON_JOB_SECRET").is_some() {
        fail("the secret is still in the environment".into());
    }
    let _silent = (mode == "intruder" && env.rank == 0).then(|| intrude(&env));
    let mut c = ControlClient::connect(&env, T).unwrap_or_else(|e| fail(e.to_string()));
    let r = env.rank;
    match mode.as_str() {
        "kv" => kv(&env, &mut c),
        "intruder" => {
            if r == 0 {
                match ControlClient::connect(&env, T) {
                    Ok(_) => fail("a second Hello as rank 0 was accepted".into()),
                    Err(e) => println!("intruder: duplicate rank refused: {e}"),
                }
            }
            kv(&env, &mut c)
        }
        "nofinalize" => println!("rank {r} leaves without finalizing"),
        "abort" if r == 1 => {
            c.abort(7, "giving up").unwrap_or_else(|e| fail(e.to_string()));
            exit(7)
        }
        "die" if r == 1 => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &std::process::id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(10));
        }
        "abort" | "die" => exit(wait_for_the_end(&mut c, r)),
        other => fail(format!("unknown mode {other}")),
    }
}
