//! Emit-then-parse round trip for every data-frame repr a sender may emit.
//!
//! The repr is built from the fuzz input within the sender's contract (an eager
//! MATCH and a FRAG carry at most `MAX_FRAME_PAYLOAD` bytes, a BATCH at most `MAX_BATCH`); its emitted header,
//! written over a dirty buffer, must be accepted and parse back to the same repr.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use proto::wire::data::{
    DataHeader, DataRepr, Envelope, HeaderBytes, MAX_BATCH, MAX_FRAME_PAYLOAD, MAX_HEADER_LEN,
};

fn envelope(u: &mut Unstructured, max_len: u64) -> Result<Envelope> {
    Ok(Envelope {
        ctx: u.arbitrary()?,
        src: u.arbitrary()?,
        tag: u.arbitrary()?,
        seq: u.arbitrary()?,
        msg_len: u.int_in_range(0..=max_len)?,
    })
}

fn repr(u: &mut Unstructured) -> Result<DataRepr> {
    Ok(match u.int_in_range(0u8..=6)? {
        0 => DataRepr::Match {
            env: envelope(u, u64::from(MAX_FRAME_PAYLOAD))?,
        },
        1 => DataRepr::Rts {
            env: envelope(u, u64::MAX)?,
            send_id: u.arbitrary()?,
        },
        2 => DataRepr::Cts {
            send_id: u.arbitrary()?,
            recv_id: u.arbitrary()?,
            accept_len: u.arbitrary()?,
        },
        3 => DataRepr::Frag {
            recv_id: u.arbitrary()?,
            offset: u.arbitrary()?,
            len: u.int_in_range(0..=MAX_FRAME_PAYLOAD)?,
        },
        4 => DataRepr::Fin {
            send_id: u.arbitrary()?,
        },
        5 => DataRepr::Batch {
            messages: u.int_in_range(1..=u32::MAX)?,
            len: u.int_in_range(1..=MAX_BATCH)?,
        },
        _ => DataRepr::Bye,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(repr) = repr(&mut u) else { return };
    let mut out = [0u8; MAX_HEADER_LEN];
    for b in out.iter_mut() {
        *b = u.arbitrary().unwrap_or(0xFF);
    }
    let n = repr.emit(&mut out);
    assert_eq!(n, repr.header_len());
    assert_eq!(HeaderBytes::new(&repr).as_slice(), &out[..n]);
    let h = DataHeader::new_checked(&out[..n])
        .unwrap_or_else(|e| panic!("{repr:?} emitted a refused header: {e}"));
    assert_eq!(h.kind(), repr.kind());
    assert_eq!(h.header_len(), n);
    assert_eq!(h.payload_len(), repr.payload_len());
    assert_eq!(DataRepr::parse(&h), repr);
});
