//! Finalize: a goodbye frame to each peer reached over the network, none to peers
//! reached only over node-local lanes, whose node says instead that this rank finalized.

mod common;

use common::{engine, KERNEL_LANE};
use pontoon_proto::wire::data::{DataHeader, Kind};
use pontoon_proto::{Caps, LaneLoss, Output};

const SHM_LANE: Caps = Caps {
    node_local: true,
    ..KERNEL_LANE
};

/// The peers that `outputs` send a goodbye to.
fn goodbyes(ep: &mut pontoon_proto::Endpoint) -> Vec<u32> {
    let mut to = Vec::new();
    while let Some(out) = ep.poll() {
        if let Output::Transmit { peer, header, .. } = out {
            let view = DataHeader::new_checked(header.as_slice()).expect("a header");
            if view.kind() == Kind::Bye {
                to.push(peer);
            }
        }
    }
    to
}

#[test]
fn node_local_peers_get_no_goodbye_and_their_end_after_finalizing_is_no_failure() {
    let mut ep = engine(0, 4, 1 << 20);
    let network = ep.handle_lane_up(1, KERNEL_LANE).unwrap();
    let local = ep.handle_lane_up(2, SHM_LANE).unwrap();
    let also_local = ep.handle_lane_up(3, SHM_LANE).unwrap();
    goodbyes(&mut ep);
    ep.finalize();
    assert_eq!(goodbyes(&mut ep), [1], "a goodbye on the network lane only");

    // Rank 2's node said it finalized before its process ended: closing, not failed.
    ep.handle_peer_finalized(2);
    assert_eq!(ep.handle_lane_down(2, local, "gone", false), LaneLoss::Closing);
    assert_eq!(ep.peer_failure(2), None);
    // Rank 3 ended without finalizing: a failure.
    assert_eq!(
        ep.handle_lane_down(3, also_local, "gone", false),
        LaneLoss::PeerFailed
    );
    assert!(ep.peer_failure(3).is_some());
    // Rank 1 has not said goodbye yet: its lane breaking is a failure too.
    assert_eq!(
        ep.handle_lane_down(1, network, "reset", false),
        LaneLoss::PeerFailed
    );
}
