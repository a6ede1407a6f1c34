//! The control channel's stream decoder, for `ToCoordinator` messages (see `pontoon_fuzz::control_stream`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::control::ToCoordinator;

fuzz_target!(|data: &[u8]| pontoon_fuzz::control_stream::<ToCoordinator>(data));
