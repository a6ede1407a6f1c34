//! The srun key lines: request, answer, the credential's grant, and task 0's order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::srun_key::{KeyAnswer, KeyGrant, KeyRequest, RendezvousOrder};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = KeyRequest::parse(data) {
        assert_eq!(KeyRequest::parse(r.encode().as_bytes()), Ok(r));
    }
    if let Ok(a) = KeyAnswer::parse(data) {
        assert_eq!(KeyAnswer::parse(a.encode().as_bytes()), Ok(a));
    }
    if let Ok(g) = KeyGrant::parse(data) {
        assert_eq!(KeyGrant::parse(g.encode().as_bytes()), Ok(g));
    }
    if let Ok(o) = RendezvousOrder::parse(data) {
        assert_eq!(RendezvousOrder::parse(o.encode().as_bytes()), Ok(o));
    }
});
