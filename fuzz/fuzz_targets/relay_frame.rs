//! Arbitrary bytes as a relay frame (what a relay reads from anyone who connects, and a
//! rank from a relay).
//!
//! `RelayFrame::new_checked` never panics and refuses short input as truncated; an
//! accepted frame parses, re-emits byte for byte, and parses back to the same repr.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::relay::{RelayFrame, RelayRepr, FRAME_LEN};
use proto::wire::WireError;

fuzz_target!(|data: &[u8]| {
    match RelayFrame::new_checked(data) {
        Ok(f) => {
            let repr = RelayRepr::parse(&f);
            let bytes = repr.emit();
            assert_eq!(
                &bytes[..],
                &data[..FRAME_LEN],
                "an accepted frame re-emits differently"
            );
            let g = RelayFrame::new_checked(&bytes[..]).expect("an emitted frame is accepted");
            assert_eq!(RelayRepr::parse(&g), repr);
        }
        Err(WireError::Truncated { need, have }) => {
            assert_eq!((need, have), (FRAME_LEN, data.len()));
        }
        Err(_) => assert!(data.len() >= FRAME_LEN),
    }
});
