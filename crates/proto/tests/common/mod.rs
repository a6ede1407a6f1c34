//! What the engine tests that drive one `Endpoint` by hand share.
#![allow(dead_code)] // each test binary uses its part

use pontoon_proto::sim::{Completion, Rng, Sim};
use pontoon_proto::{Caps, Endpoint, EngineConfig, Status};

/// A kernel TCP lane as the engine sees it.
pub const KERNEL_LANE: Caps = Caps {
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

/// Rank `rank` of `size`, eager up to 4 KiB, holding at most `unexpected_cap` bytes of
/// unexpected eager messages; no lanes yet.
pub fn engine(rank: u32, size: u32, unexpected_cap: u64) -> Endpoint {
    Endpoint::new(
        rank,
        size,
        EngineConfig {
            eager_limit: 4096,
            wan_eager_limit: 4096,
            frag_size: 1 << 16,
            lane_queue: 1 << 17,
            unexpected_cap,
            coalesce_delay_ns: 0,
            coalesce_bytes: 16 << 10,
            single_copy: Default::default(),
        },
    )
}

/// `len` pseudo-random bytes from `seed`: a message whose every byte can be checked.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng::new(seed);
    (0..len).map(|_| r.next_u64() as u8).collect()
}

/// The status of receive `req` of `rank`, which must have completed well.
pub fn received(sim: &Sim, rank: u32, req: u64) -> Status {
    match sim.completion(rank, req) {
        Some(Completion::Received(Ok(st))) => *st,
        other => panic!("receive {req} on rank {rank}: {other:?}"),
    }
}
