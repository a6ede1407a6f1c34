//! Arbitrary bytes as a data-frame header (what a lane's stream reader sees).
//!
//! `DataHeader::new_checked` never panics; a header it accepts parses, is accepted
//! from its own bytes alone, and emitting the parsed repr gives back exactly those
//! bytes (the format has one encoding per repr), which parse to the same repr. The
//! small-message receive's MATCH parser (`DataRepr::parse_match`) agrees with it on
//! every MATCH header: the same repr, or a refusal of both.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::wire::data::{
    DataHeader, DataRepr, HeaderBytes, Kind, MATCH_HEADER_LEN, MAX_HEADER_LEN, PREFIX_LEN,
};
use proto::wire::WireError;

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data
        .first_chunk::<MATCH_HEADER_LEN>()
        .filter(|h| h[0] == Kind::Match as u8)
    {
        let general = DataHeader::new_checked(data).map(|h| DataRepr::parse(&h));
        assert_eq!(DataRepr::parse_match(h).ok(), general.ok());
    }
    match DataHeader::new_checked(data) {
        Ok(h) => {
            let n = h.header_len();
            assert!((PREFIX_LEN..=MAX_HEADER_LEN).contains(&n) && n <= data.len());
            let repr = DataRepr::parse(&h);
            assert_eq!(repr.kind(), h.kind());
            assert_eq!(repr.header_len(), n);
            assert_eq!(repr.payload_len(), h.payload_len());

            let alone = DataHeader::new_checked(&data[..n]).expect("the header's own bytes are accepted");
            assert_eq!(DataRepr::parse(&alone), repr);

            let mut out = [0xA5u8; MAX_HEADER_LEN];
            assert_eq!(repr.emit(&mut out), n);
            assert_eq!(&out[..n], &data[..n], "an accepted header re-emits differently");
            assert_eq!(HeaderBytes::new(&repr).as_slice(), &data[..n]);
            let again = DataHeader::new_checked(&out[..n]).expect("an emitted header is accepted");
            assert_eq!(DataRepr::parse(&again), repr);
        }
        Err(WireError::Truncated { need, have }) => {
            assert_eq!(have, data.len());
            // A reader holding MAX_HEADER_LEN bytes can always decide.
            assert!(have < need && need <= MAX_HEADER_LEN, "need {need}, have {have}");
        }
        Err(_) => assert!(data.len() >= PREFIX_LEN),
    }
});
