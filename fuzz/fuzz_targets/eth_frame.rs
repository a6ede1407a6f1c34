//! Arbitrary bytes as a raw-Ethernet datagram (what any station on the segment can send
//! to a rank's `eth` lane).
//!
//! `EthFrame::new_checked` never panics; an accepted datagram parses, re-emits its
//! header byte for byte (the tag aside, which `seal` rewrites), and its tag check never
//! panics. A channel fed the parsed header refuses or accepts it without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::reliable::{Channel, ChannelConfig};
use proto::wire::eth::{EthFrame, EthRepr, FrameKey};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = EthFrame::new_checked(data) else {
        return;
    };
    let repr = EthRepr::parse(&f);
    let mut out = vec![0u8; repr.header_len()];
    assert_eq!(repr.emit(&mut out), repr.header_len());
    assert_eq!(&out[..24], &data[..24]);
    assert_eq!(&out[32..], &data[32..repr.header_len()]);
    assert!(f.len() <= data.len());
    let _ = f.verify(&FrameKey::new(&[0; 32]));
    let mut channel = Channel::new(ChannelConfig::default(), 1, 0);
    channel.queue(1 << 20);
    for now in 0..3 {
        let _ = channel.poll_transmit(now);
    }
    let _ = channel.handle_datagram(10, &repr, f.payload());
    while channel.take_ready().is_some() {}
    let _ = channel.handle_timeout(1 << 40);
    while channel.poll_transmit(1 << 40).is_some() {}
});
