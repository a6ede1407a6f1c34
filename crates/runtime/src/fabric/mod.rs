//! The transports' wire-up, one folder each: how a lane to a peer is set up over TCP
//! (with relays, hole punching and WAN streams), shared memory and raw Ethernet, and why
//! a transport could not carry a peer's lanes ([`Refusal`]). A fabric never names the
//! event loop: it is asked to dial and to make progress, and hands back lanes that came
//! up and refusals.

pub mod eth;
pub mod shm;
pub mod tcp;

/// A fresh random nonce for one handshake.
pub(crate) fn nonce() -> [u8; 16] {
    let mut n = [0u8; 16];
    getrandom::fill(&mut n).expect("the OS provides randomness");
    n
}
