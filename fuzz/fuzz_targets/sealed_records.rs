//! Arbitrary bytes arriving on a sealed (encrypted) lane, cut into pieces anywhere: the
//! reader never panics and never hands out a byte, since nobody without the lane's key
//! can make a record that passes its check.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pontoon_fuzz::Feed;
use transport::sealed::{LaneKeys, Sealed};
use transport::stream::Pipe;

fuzz_target!(|data: &[u8]| {
    let (cut, bytes) = data.split_at(data.len().min(8));
    let feed = Feed::new(bytes, cut.iter().map(|b| usize::from(*b) * 64 + 1).collect());
    let mut sealed = Sealed::new(feed, &LaneKeys::new(&[7; 32], false));
    let mut dst = [0u8; 4096];
    for _ in 0..=bytes.len() {
        match sealed.read(&mut dst) {
            Ok(Some(n)) => panic!("{n} bytes passed a record check without the key"),
            Ok(None) | Err(_) => break,
        }
    }
});
