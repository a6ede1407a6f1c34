//! MPI_Abort passed on among the ranks (ABORT frames): what one engine sends and hears.

mod common;

use common::{engine, KERNEL_LANE};
use pontoon_proto::wire::data::{DataHeader, DataRepr};
use pontoon_proto::{Endpoint, Output};

/// Rank 1 of 3, with a lane to rank 0 only.
fn rank_one() -> Endpoint {
    let mut ep = engine(1, 3, 1 << 20);
    ep.handle_lane_up(0, KERNEL_LANE).unwrap();
    ep
}

fn outputs(ep: &mut Endpoint) -> Vec<Output> {
    std::iter::from_fn(|| ep.poll()).collect()
}

#[test]
fn an_abort_goes_to_every_connected_peer_and_no_one_else() {
    let mut ep = rank_one();
    outputs(&mut ep);
    ep.abort_job(1, 5);
    let sent: Vec<(u32, DataRepr)> = outputs(&mut ep)
        .into_iter()
        .filter_map(|o| match o {
            Output::Transmit { peer, header, .. } => {
                let h = DataHeader::new_checked(header.as_slice()).expect("a valid header");
                Some((peer, DataRepr::parse(&h)))
            }
            _ => None,
        })
        .collect();
    // Rank 2 has no lane: it is not connected for an abort, and hears of it from others.
    assert_eq!(sent, [(0, DataRepr::Abort { code: 5, origin: 1 })]);
}

#[test]
fn a_heard_abort_is_reported_and_one_from_an_impossible_rank_is_a_violation() {
    let mut ep = rank_one();
    outputs(&mut ep);
    ep.handle_header(0, &DataRepr::Abort { code: -3, origin: 2 })
        .unwrap();
    assert!(outputs(&mut ep).iter().any(|o| matches!(
        o,
        Output::JobAborted {
            peer: 0,
            origin: 2,
            code: -3
        }
    )));
    let e = ep
        .handle_header(0, &DataRepr::Abort { code: 1, origin: 3 })
        .unwrap_err();
    assert!(e.to_string().contains("abort from impossible rank 3"), "{e}");
}
