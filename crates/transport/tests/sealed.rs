//! Sealed (encrypted) stream lanes: frames of any size arrive whole and in order through
//! a pipe that takes a few bytes at a time; what travels holds none of the plaintext;
//! a record altered, dropped, replayed or sealed with another key is refused.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::fd::BorrowedFd;
use std::rc::Rc;

use pontoon_transport::sealed::{LaneKeys, Sealed};
use pontoon_transport::stream::{Pipe, StreamLink};
use pontoon_transport::{Buffer, Link, LinkError, Placement, Sink};
use proto::wire::data::{DataRepr, HeaderBytes};
use proto::Caps;

/// One direction of an in-memory byte stream that takes at most `room` bytes at a time
/// and holds at most `cap`: a socket whose buffer fills.
#[derive(Clone)]
struct Wire {
    bytes: Rc<RefCell<VecDeque<u8>>>,
    cap: usize,
}

/// A pipe writing into one wire and reading from another.
struct MemPipe {
    out: Wire,
    inn: Wire,
}

impl Pipe for MemPipe {
    fn write(&mut self, iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        let mut q = self.out.bytes.borrow_mut();
        let mut n = 0;
        for s in iov {
            let take = s.len().min(self.out.cap.saturating_sub(q.len()));
            q.extend(&s[..take]);
            n += take;
            if take < s.len() {
                break;
            }
        }
        Ok(n)
    }
    fn read(&mut self, dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        let mut q = self.inn.bytes.borrow_mut();
        if q.is_empty() {
            return Ok(None);
        }
        let n = dst.len().min(q.len()).min(1000);
        for (d, b) in dst.iter_mut().zip(q.drain(..n)) {
            *d = b;
        }
        Ok(Some(n))
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn polled(&self) -> bool {
        true
    }
    fn arm_wakeup(&mut self) -> bool {
        true
    }
}

#[derive(Default)]
struct Collect(Vec<(DataRepr, Vec<u8>)>);

impl Sink for Collect {
    type Token = DataRepr;
    fn on_header(&mut self, repr: &DataRepr) -> Result<(Placement, DataRepr), String> {
        Ok((Placement::Engine(vec![0; repr.payload_len() as usize]), *repr))
    }
    fn on_payload(&mut self, token: DataRepr, buf: Option<Vec<u8>>) -> Result<(), String> {
        self.0.push((token, buf.unwrap_or_default()));
        Ok(())
    }
}

fn caps() -> Caps {
    Caps {
        latency_ns: 1,
        bandwidth: 1,
        max_frame: 1 << 30,
        reliable: true,
        ordered: true,
        node_local: false,
        relayed: false,
        raw: false,
        datagram: 0,
        single_copy: false,
    }
}

type Lane = StreamLink<Sealed<MemPipe>, DataRepr>;

/// Two sealed lane ends over wires of `cap` bytes; the wire from a to b is returned too.
fn pair(cap: usize, key_a: [u8; 32], key_b: [u8; 32]) -> (Lane, Lane, Wire) {
    let wire = || Wire {
        bytes: Rc::default(),
        cap,
    };
    let (ab, ba) = (wire(), wire());
    let a = MemPipe {
        out: ab.clone(),
        inn: ba.clone(),
    };
    let b = MemPipe {
        out: ba,
        inn: ab.clone(),
    };
    let a = StreamLink::new(Sealed::new(a, &LaneKeys::new(&key_a, true)), caps(), 4096);
    let b = StreamLink::new(Sealed::new(b, &LaneKeys::new(&key_b, false)), caps(), 4096);
    (a, b, ab)
}

fn frame(i: u32, len: usize) -> (HeaderBytes, Vec<u8>) {
    let repr = DataRepr::Frag {
        recv_id: u64::from(i),
        offset: 0,
        len: len as u32,
    };
    let payload = (0..len).map(|x| (x as u32 * 31 + i) as u8).collect();
    (HeaderBytes::new(&repr), payload)
}

/// Sends `frames` from a to b, moving bytes as the wire takes them; what b got.
fn transfer(a: &mut Lane, b: &mut Lane, frames: &[(HeaderBytes, Vec<u8>)]) -> Result<Collect, LinkError> {
    let mut got = Collect::default();
    let mut done = Vec::new();
    for (h, p) in frames {
        let len = p.len() as u64;
        a.send(h, Some((&Buffer::owned(p.clone()), 0, len)), 1)?;
        // Keep it flowing: the wire is small.
        while a.tx_queued() > 0 {
            a.flush(&mut done)?;
            b.recv(&mut got)?;
        }
    }
    for _ in 0..1000 {
        a.flush(&mut done)?;
        if !b.recv(&mut got)? && a.tx_queued() == 0 {
            break;
        }
    }
    Ok(got)
}

#[test]
fn frames_of_any_size_arrive_whole_and_in_order_and_the_wire_holds_no_plaintext() {
    let mut rng = proto::sim::Rng::new(7);
    let frames: Vec<_> = (0..300)
        .map(|i| {
            let len = match rng.range(0, 9) {
                0 => rng.range(16 << 10, 300 << 10),
                1 => 0,
                _ => rng.range(1, 2000),
            } as usize;
            frame(i, len)
        })
        .collect();
    let (mut a, mut b, _) = pair(7000, [3; 32], [3; 32]);
    let got = transfer(&mut a, &mut b, &frames).expect("the transfer");
    assert_eq!(got.0.len(), frames.len());
    for (i, ((h, p), (repr, data))) in frames.iter().zip(&got.0).enumerate() {
        assert_eq!(HeaderBytes::new(repr).as_slice(), h.as_slice(), "frame {i}");
        assert_eq!(data, p, "frame {i}");
    }
    // What the wire carries: sealed, no run of the plaintext in it.
    let (mut a, _, wire) = pair(1 << 20, [3; 32], [3; 32]);
    let plain = vec![0x5a; 4096];
    let (h, _) = frame(1, plain.len());
    a.send_copy(&h, &plain).unwrap();
    let sent: Vec<u8> = wire.bytes.borrow().iter().copied().collect();
    assert!(sent.len() > plain.len());
    assert!(
        !sent.windows(16).any(|w| w == &plain[..16]),
        "plaintext on the wire"
    );
}

#[test]
fn records_altered_lost_replayed_or_under_another_key_are_refused() {
    let frames: Vec<_> = (0..8).map(|i| frame(i, 3000)).collect();
    // Another key: the first record fails.
    let (mut a, mut b, _) = pair(1 << 20, [1; 32], [2; 32]);
    assert!(matches!(
        transfer(&mut a, &mut b, &frames),
        Err(LinkError::Protocol(_))
    ));
    // Capture the records of the eight frames, then play them to fresh receivers with
    // one changed.
    let capture = || {
        let (mut a, _, wire) = pair(1 << 20, [9; 32], [9; 32]);
        for (h, p) in &frames {
            a.send_copy(h, p).unwrap();
        }
        let bytes: Vec<u8> = wire.bytes.borrow().iter().copied().collect();
        bytes
    };
    let sent = capture();
    assert_eq!(
        sent,
        capture(),
        "same key, same records: the nonces start over per lane key"
    );
    let records = {
        let mut v = Vec::new();
        let mut at = 0;
        while at < sent.len() {
            let len = u32::from_be_bytes(sent[at..at + 4].try_into().unwrap()) as usize;
            v.push(sent[at..at + 4 + len].to_vec());
            at += 4 + len;
        }
        v
    };
    assert!(records.len() >= 2);
    let play = |bytes: Vec<u8>| -> Result<usize, LinkError> {
        let pipe = MemPipe {
            out: Wire {
                bytes: Rc::default(),
                cap: 1 << 20,
            },
            inn: Wire {
                bytes: Rc::new(RefCell::new(bytes.into_iter().collect())),
                cap: 1 << 20,
            },
        };
        let mut b: Lane = StreamLink::new(Sealed::new(pipe, &LaneKeys::new(&[9; 32], false)), caps(), 4096);
        let mut got = Collect::default();
        while b.recv(&mut got)? {}
        Ok(got.0.len())
    };
    assert_eq!(play(sent.clone()).unwrap(), frames.len(), "untouched");
    let mut flipped = sent.clone();
    flipped[records[0].len() + 10] ^= 1;
    assert!(play(flipped).is_err(), "a bit flipped");
    let dropped = [records[0].clone(), records[2..].concat()].concat();
    assert!(play(dropped).is_err(), "a record left out");
    let replayed = [records[0].clone(), records[0].clone(), records[1..].concat()].concat();
    assert!(play(replayed).is_err(), "a record played twice");
    let mut huge = sent;
    huge[..4].copy_from_slice(&(1u32 << 30).to_be_bytes());
    assert!(play(huge).is_err(), "a record longer than any sent");
}
