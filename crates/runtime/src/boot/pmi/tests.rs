//! The client against a small PMI server speaking both wire protocols the way Slurm
//! and Hydra answered them (their answers were recorded from the real servers).

use super::*;
use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};

/// A PMI server for `size` ranks: one thread per rank's socket, a shared key-value
/// space, values at most `vallen` long.
struct FakeServer {
    kvs: Arc<Mutex<HashMap<String, String>>>,
    fence: Arc<Barrier>,
    vallen: usize,
}

impl FakeServer {
    fn serve(&self, mut s: UnixStream, rank: u32, size: u32) -> std::thread::JoinHandle<()> {
        let (kvs, fence, vallen) = (self.kvs.clone(), self.fence.clone(), self.vallen);
        std::thread::spawn(move || {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let init = Answer::parse_v1(&line);
            let v2 = init.get("pmi_version") == Some("2");
            let version = if v2 { "2" } else { "1" };
            writeln!(
                s,
                "cmd=response_to_init rc=0 pmi_version={version} pmi_subversion=0"
            )
            .unwrap();
            loop {
                let req = if v2 {
                    let mut len = [0u8; 6];
                    if r.read_exact(&mut len).is_err() {
                        return;
                    }
                    let mut body = vec![0u8; std::str::from_utf8(&len).unwrap().trim().parse().unwrap()];
                    r.read_exact(&mut body).unwrap();
                    Answer::parse_v2(&String::from_utf8(body).unwrap())
                } else {
                    line.clear();
                    if r.read_line(&mut line).unwrap() == 0 {
                        return;
                    }
                    Answer::parse_v1(&line)
                };
                let cmd = req.get("cmd").unwrap().to_string();
                let key = req.get("key").unwrap_or_default().to_string();
                let lookup = |k: &str| {
                    if k == "PMI_process_mapping" {
                        Some(format!("(vector,(0,{},1))", size / 2))
                    } else {
                        kvs.lock().unwrap().get(k).cloned()
                    }
                };
                let answer: Vec<u8> = match cmd.as_str() {
                    "fullinit" => {
                        assert_eq!(req.get("pmirank"), Some(rank.to_string().as_str()));
                        format_v2(
                            "fullinit-response",
                            &[
                                ("rc", "0"),
                                ("rank", &rank.to_string()),
                                ("size", &size.to_string()),
                            ],
                        )
                    }
                    "job-getid" => format_v2("job-getid-response", &[("rc", "0"), ("jobid", "7.0")]),
                    "get_maxes" => {
                        format!("cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max={vallen}\n").into()
                    }
                    "get_my_kvsname" => b"cmd=my_kvsname rc=0 kvsname=kvs_7\n".to_vec(),
                    "kvs-put" | "put" => {
                        let value = req.get("value").unwrap().to_string();
                        assert!(value.len() <= vallen, "a value of {} > {vallen}", value.len());
                        kvs.lock().unwrap().insert(key, value);
                        if v2 {
                            format_v2("kvs-put-response", &[("rc", "0")])
                        } else {
                            b"cmd=put_result rc=0\n".to_vec()
                        }
                    }
                    "kvs-get" => match lookup(&key) {
                        Some(v) => format_v2(
                            "kvs-get-response",
                            &[("rc", "0"), ("found", "TRUE"), ("value", &v)],
                        ),
                        None => format_v2("kvs-get-response", &[("rc", "0"), ("found", "FALSE")]),
                    },
                    "info-getjobattr" => match lookup(&key) {
                        Some(v) => format_v2(
                            "info-getjobattr-response",
                            &[("rc", "0"), ("found", "TRUE"), ("value", &v)],
                        ),
                        None => format_v2("info-getjobattr-response", &[("rc", "0"), ("found", "FALSE")]),
                    },
                    "get" => match lookup(&key) {
                        Some(v) => format!("cmd=get_result rc=0 msg=success value={v}\n").into(),
                        None => b"cmd=get_result rc=-1 msg=key_not_found value=unknown\n".to_vec(),
                    },
                    "kvs-fence" | "barrier_in" => {
                        fence.wait();
                        if v2 {
                            format_v2("kvs-fence-response", &[("rc", "0")])
                        } else {
                            b"cmd=barrier_out\n".to_vec()
                        }
                    }
                    "finalize" => {
                        let a = if v2 {
                            format_v2("finalize-response", &[("rc", "0")])
                        } else {
                            b"cmd=finalize_ack\n".to_vec()
                        };
                        s.write_all(&a).unwrap();
                        return;
                    }
                    other => panic!("unexpected command {other}"),
                };
                s.write_all(&answer).unwrap();
            }
        })
    }
}

/// Every rank of a job of `size` puts a value of `len` bytes, fences and reads all.
fn exchange(size: u32, len: usize, v1_only: bool, vallen: usize) {
    let server = FakeServer {
        kvs: Default::default(),
        fence: Arc::new(Barrier::new(size as usize)),
        vallen,
    };
    let mut threads = Vec::new();
    for rank in 0..size {
        let (ours, theirs) = UnixStream::pair().unwrap();
        threads.push(server.serve(theirs, rank, size));
        threads.push(std::thread::spawn(move || {
            let (r, s) = (rank.to_string(), size.to_string());
            let mut c = PmiClient::start(ours, Some(&r), Some(&s), Some("7.0"), v1_only).unwrap();
            assert_eq!((c.rank, c.size, c.is_v2()), (rank, size, !v1_only));
            let value = |r: u32| (0..len).map(|i| (i as u32 * 7 + r) as u8).collect::<Vec<u8>>();
            c.put(&format!("card/{rank}"), &value(rank)).unwrap();
            c.fence().unwrap();
            for peer in 0..size {
                assert_eq!(
                    c.get(&format!("card/{peer}")).unwrap(),
                    Some(value(peer)),
                    "rank {rank} reading {peer}"
                );
            }
            assert_eq!(c.get("nobody/put/this").unwrap(), None);
            let mapping =
                ProcessMapping::parse(&c.job_attr("PMI_process_mapping").unwrap().unwrap()).unwrap();
            // (0,size/2,1) repeated: two ranks on each node, rank r on node r % (size/2).
            assert_eq!(mapping.local(rank, size), (rank / (size / 2), 2));
            // A fence asked for is reached only once every rank asked.
            c.start_fence().unwrap();
            while !c.fence_reached().unwrap() {
                std::thread::yield_now();
            }
            c.finalize().unwrap();
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn ranks_exchange_values_larger_than_one_pmi2_value() {
    exchange(4, 3000, false, 1024);
    exchange(4, 0, false, 1024);
}

#[test]
fn pmi1_values_are_split_to_the_servers_limit() {
    exchange(4, 700, true, 64);
    exchange(4, 5, true, 1024);
}

#[test]
fn process_mappings_of_slurm_and_hydra_give_each_rank_its_node() {
    let m = ProcessMapping::parse("(vector,(0,2,1))").unwrap();
    assert_eq!(m.nodes(4), [0, 1, 0, 1]);
    let m = ProcessMapping::parse("(vector,(0,4,2))").unwrap();
    assert_eq!(m.nodes(8), [0, 0, 1, 1, 2, 2, 3, 3]);
    assert_eq!(m.local(5, 8), (1, 2));
    let m = ProcessMapping::parse("(vector,(0,1,1))").unwrap();
    assert_eq!(m.local(3, 4), (3, 4));
    let m = ProcessMapping::parse("(vector,(0,2,3),(2,1,1))").unwrap();
    assert_eq!(m.nodes(7), [0, 0, 0, 1, 1, 1, 2]);
    for bad in [
        "",
        "(vector,)",
        "(vector,(0,0,1))",
        "(vector,(0,1))",
        "(hybrid,(0,1,1))",
        "(vector,(a,1,1))",
    ] {
        assert_eq!(ProcessMapping::parse(bad), None, "{bad:?}");
    }
}

#[test]
fn pmi2_fields_come_in_any_order_and_values_carry_no_semicolon() {
    let a = Answer::parse_v2("cmd=kvs-get-response;found=TRUE;value=a;;b;rc=0;");
    assert_eq!(a.get("value"), Some("a;b"));
    assert!(a.ok());
    let body = format_v2("abort", &[("msg", "x;y")]);
    assert_eq!(&body[..6], b"18    ");
    assert_eq!(
        Answer::parse_v2(std::str::from_utf8(&body[6..]).unwrap()).get("msg"),
        Some("x,y")
    );
    assert!(!Answer::parse_v1("cmd=get_result rc=-1 msg=key_not_found value=unknown").ok());
    assert!(Answer::parse_v1("cmd=barrier_out").ok());
}

#[test]
fn a_server_that_goes_away_is_an_error_not_a_hang() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    drop(theirs);
    let err = PmiClient::start(ours, Some("0"), Some("1"), None, false).unwrap_err();
    assert!(matches!(err, PmiError::Closed | PmiError::Io(_)), "{err}");
}

#[test]
fn a_fence_some_rank_never_reaches_ends_the_job_after_the_timeout() {
    let (ours, mut theirs) = UnixStream::pair().unwrap();
    // A server that answers init and fullinit, then never answers the fence: what it
    // gets after the fence must be the abort.
    let server = std::thread::spawn(move || {
        let mut r = BufReader::new(theirs.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        writeln!(theirs, "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0").unwrap();
        let mut read_v2 = || {
            let mut len = [0u8; 6];
            r.read_exact(&mut len).unwrap();
            let mut body = vec![0u8; std::str::from_utf8(&len).unwrap().trim().parse().unwrap()];
            r.read_exact(&mut body).unwrap();
            Answer::parse_v2(&String::from_utf8(body).unwrap())
        };
        assert_eq!(read_v2().get("cmd"), Some("fullinit"));
        let answer = format_v2("fullinit-response", &[("rc", "0"), ("rank", "0"), ("size", "2")]);
        theirs.write_all(&answer).unwrap();
        let answer = format_v2("job-getid-response", &[("rc", "0"), ("jobid", "9.0")]);
        assert_eq!(read_v2().get("cmd"), Some("job-getid"));
        theirs.write_all(&answer).unwrap();
        assert_eq!(read_v2().get("cmd"), Some("kvs-fence"));
        read_v2()
    });
    let mut c = PmiClient::start(ours, Some("0"), Some("2"), Some("9.0"), false).unwrap();
    c.fence_timeout = std::time::Duration::from_millis(200);
    let start = std::time::Instant::now();
    let err = c.fence().unwrap_err();
    assert!(matches!(err, PmiError::FenceTimeout(_)), "{err}");
    assert!(start.elapsed() >= c.fence_timeout);
    assert!(err.to_string().contains("PONTOON_PMI_FENCE_TIMEOUT_S"), "{err}");
    let abort = server.join().unwrap();
    assert_eq!(
        (abort.get("cmd"), abort.get("isworld")),
        (Some("abort"), Some("TRUE"))
    );
}
