//! Endpoint cards come from other ranks through the coordinator: decoding must never
//! panic, and whatever decodes must be safe to choose paths from.
#![no_main]

use libfuzzer_sys::fuzz_target;
use net::{candidates, EndpointCard, IfPolicy};

fuzz_target!(|data: &[u8]| {
    if let Ok(card) = EndpointCard::decode(data) {
        let local = EndpointCard::new(&[], &IfPolicy::default(), card.node ^ 1, None, (1, 1));
        let _ = candidates(&local, &card);
        let _ = candidates(&card, &card);
        assert_eq!(EndpointCard::decode(&card.encode()).ok(), Some(card.clone()));
    }
});
