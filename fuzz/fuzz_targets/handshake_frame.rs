//! Arbitrary bytes as a handshake frame (the first bytes on every new connection).
//!
//! `HandshakeFrame::new_checked` never panics and refuses short input as truncated;
//! an accepted frame parses, and emitting the parsed repr reproduces its MAC'd
//! transcript exactly and parses back to the same repr with a verifying MAC.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::handshake::{mac, mac_eq, HandshakeFrame, HandshakeRepr, FRAME_LEN};
use proto::wire::WireError;

const TRANSCRIPT_LEN: usize = 64;

fuzz_target!(|data: &[u8]| {
    if data.len() >= 64 {
        let a: [u8; 32] = data[..32].try_into().unwrap();
        let b: [u8; 32] = data[32..64].try_into().unwrap();
        assert_eq!(mac_eq(&a, &b), a == b);
    }
    match HandshakeFrame::new_checked(data) {
        Ok(f) => {
            assert!(data.len() >= FRAME_LEN);
            assert_eq!(f.transcript(), &data[..TRANSCRIPT_LEN]);
            assert_eq!(&f.mac()[..], &data[TRANSCRIPT_LEN..FRAME_LEN]);
            let repr = HandshakeRepr::parse(&f);

            let secret = [0x5A; 32];
            let bytes = repr.emit(&secret);
            assert_eq!(
                &bytes[..TRANSCRIPT_LEN],
                f.transcript(),
                "an accepted frame re-emits differently"
            );
            let g = HandshakeFrame::new_checked(&bytes[..]).expect("an emitted frame is accepted");
            assert_eq!(HandshakeRepr::parse(&g), repr);
            assert!(mac_eq(&g.mac(), &mac(&secret, g.transcript())));
        }
        Err(WireError::Truncated { need, have }) => {
            assert_eq!((need, have), (FRAME_LEN, data.len()));
            assert!(have < need);
        }
        Err(_) => assert!(data.len() >= FRAME_LEN),
    }
});
