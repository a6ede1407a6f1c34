//! Arbitrary bytes from a peer as a stream lane receives them (a TCP socket or a
//! shared-memory ring: `transport::stream` frames both), cut into pieces anywhere.
//!
//! The reader never panics; it hands out no more payload bytes than arrived; and the
//! frames it delivers do not depend on how the bytes were cut: reading them in pieces
//! gives the same headers and payloads, and the same verdict, as reading them at once.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pontoon_fuzz::Feed;
use proto::wire::data::DataRepr;
use proto::Caps;
use transport::stream::StreamLink;
use transport::{Link, Placement, Sink};

/// Takes payloads up to 64 KiB, as an engine with that eager limit would; refuses larger.
#[derive(Default)]
struct Collect {
    frames: Vec<(DataRepr, Vec<u8>)>,
}

impl Sink for Collect {
    type Token = DataRepr;
    fn on_header(&mut self, repr: &DataRepr) -> Result<(Placement, DataRepr), String> {
        let len = repr.payload_len() as usize;
        if len > 64 << 10 {
            return Err(format!("payload of {len} bytes"));
        }
        Ok((Placement::Engine(vec![0; len]), *repr))
    }
    fn on_payload(&mut self, token: DataRepr, buf: Option<Vec<u8>>) -> Result<(), String> {
        self.frames.push((token, buf.unwrap_or_default()));
        Ok(())
    }
}

fn caps() -> Caps {
    Caps {
        latency_ns: 1,
        bandwidth: 1,
        max_frame: 1 << 20,
        reliable: true,
        ordered: true,
        node_local: true,
        relayed: false,
        raw: false,
        datagram: 0,
        single_copy: false,
    }
}

/// Reads everything; the frames delivered and whether the stream was refused.
fn read_all(bytes: &[u8], pieces: Vec<usize>) -> (Vec<(DataRepr, Vec<u8>)>, bool) {
    let mut link: StreamLink<Feed, DataRepr> = StreamLink::new(Feed::new(bytes, pieces), caps(), 4096);
    let mut sink = Collect::default();
    let mut refused = false;
    for _ in 0..=bytes.len() + 1 {
        match link.recv(&mut sink) {
            Ok(true) => continue,
            Ok(false) => break,
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    (sink.frames, refused)
}

fuzz_target!(|data: &[u8]| {
    // The first bytes choose the piece sizes; the rest is the stream.
    let (cut, bytes) = data.split_at(data.len().min(16));
    let pieces: Vec<usize> = cut.iter().map(|b| usize::from(*b) + 1).collect();
    let (whole, whole_refused) = read_all(bytes, Vec::new());
    let (cut_up, cut_refused) = read_all(bytes, pieces);
    let delivered: usize = whole.iter().map(|(_, p)| p.len()).sum();
    assert!(delivered <= bytes.len());
    assert_eq!(whole, cut_up, "frames depend on how the bytes were cut");
    assert_eq!(whole_refused, cut_refused);
});
