//! Arbitrary bytes as the payload of a BATCH of coalesced messages from a peer: the
//! engine never panics and delivers no more bytes than arrived (what it refuses is in
//! `proto/tests/coalesce.rs`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::data::{DataRepr, MAX_BATCH};
use proto::{Caps, Endpoint, EngineConfig, Output};

fuzz_target!(|data: &[u8]| {
    let (count, bytes) = data.split_at(data.len().min(1));
    if bytes.is_empty() || bytes.len() > MAX_BATCH as usize {
        return;
    }
    let mut ep = Endpoint::new(
        1,
        3,
        EngineConfig {
            eager_limit: 4096,
            wan_eager_limit: 4096,
            frag_size: 1 << 16,
            lane_queue: 1 << 17,
            unexpected_cap: 1 << 20,
            coalesce_delay_ns: 0,
            coalesce_bytes: 16 << 10,
            single_copy: Default::default(),
        },
    );
    let caps = Caps {
        latency_ns: 1000,
        bandwidth: 1 << 30,
        max_frame: 1 << 16,
        reliable: true,
        ordered: true,
        node_local: false,
        relayed: false,
        raw: false,
        datagram: 0,
        single_copy: false,
    };
    ep.handle_lane_up(0, caps);
    // Some receives posted, some messages left unexpected.
    for req in 1..4 {
        ep.post_recv(req, 0, 0, -1, 64);
    }
    let repr = DataRepr::Batch {
        messages: u32::from(count.first().copied().unwrap_or(1)).max(1),
        len: bytes.len() as u32,
    };
    let Ok((_, token)) = ep.handle_header(0, &repr) else {
        return;
    };
    let _ = ep.payload_done(0, token, Some(bytes.to_vec()));
    let mut delivered = 0;
    while let Some(out) = ep.poll() {
        if let Output::Deliver { data, .. } = out {
            delivered += data.len();
        }
    }
    assert!(delivered <= bytes.len());
});
