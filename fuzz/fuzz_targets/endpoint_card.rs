//! Endpoint cards come from other ranks through the coordinator: decoding must never
//! panic (whole, or its head first as start-up reads it), and whatever decodes must be
//! safe to choose paths from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use net::{candidates, CardHead, CardTable, EndpointCard, IfPolicy, Interface};

/// A host with every class of address, so that every rule of `candidates` is reached.
fn local_iface() -> Interface {
    let addrs = [
        "10.0.0.1",
        "198.51.100.1",
        "2001:db8::1",
        "fd00::1",
        "127.0.0.1",
        "::1",
    ];
    Interface {
        index: 2,
        name: "eth0".into(),
        mac: None,
        mtu: Some(1500),
        up: true,
        loopback: false,
        addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
    }
}

fuzz_target!(|data: &[u8]| {
    // The head is a prefix of the card: a card that decodes has a head that does.
    let head = CardHead::decode(data);
    if let Ok(table) = CardTable::from_encoded(vec![data.to_vec()]) {
        let _ = (table.get(0), table.fault(0), table.same_node(0, 0));
    }
    if let Ok(card) = EndpointCard::decode(data) {
        assert_eq!(head.map(|h| h.node).ok(), Some(card.node));
        let local = EndpointCard::new(
            &[local_iface()],
            &IfPolicy::default(),
            card.node ^ 1,
            None,
            (1, 1),
        );
        let _ = candidates(&local, &card);
        let _ = candidates(&card, &card);
        assert_eq!(EndpointCard::decode(&card.encode()).ok(), Some(card.clone()));
    }
});
