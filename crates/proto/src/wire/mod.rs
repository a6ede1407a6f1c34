//! Wire formats. Every format is a zero-copy view checked once by `new_checked`
//! (after which no accessor can panic) plus a `Repr` with `parse` and `emit`.
//! All integers are little-endian.

/// A one-byte wire enum: its variants and their values written once, and `from_u8`,
/// which refuses a value no variant has with `$unknown` (a fn from the byte to the
/// `WireError`).
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident refusing($unknown:expr) {
            $($(#[$vmeta:meta])* $variant:ident = $value:literal,)+
        }
    ) => {
        $(#[$meta])*
        #[repr(u8)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $value,)+
        }

        impl $name {
            /// The variant `v` stands for.
            pub fn from_u8(v: u8) -> Result<Self, $crate::wire::WireError> {
                match v {
                    $($value => Ok(Self::$variant),)+
                    other => Err(($unknown)(other)),
                }
            }
        }
    };
}

pub mod data;
pub mod eth;
pub mod handshake;
pub mod relay;
pub mod srun_key;

use core::net::{IpAddr, Ipv6Addr, SocketAddr};
pub use data::{DataHeader, DataRepr, Kind, PunchMsg, PunchStep};

pub use handshake::{HandshakeFrame, HandshakeKind, HandshakeRepr, HandshakeStatus};

/// Why bytes from the network were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("bad magic: not a pontoon peer")]
    BadMagic,
    #[error("unsupported protocol version {0}")]
    Version(u16),
    #[error("reserved field is not zero")]
    Reserved,
    #[error("field {0} out of range")]
    Field(&'static str),
}

pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
// Inlined, with one bounds check each: a header's fields are read on every message.
#[inline]
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}
#[inline]
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
// Inlined too: every small message's send writes a header.
#[inline]
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// The address at `at` (16 bytes) with its port at `port_at`.
pub(crate) fn get_addr(b: &[u8], at: usize, port_at: usize) -> SocketAddr {
    let ip: [u8; 16] = b[at..at + 16].try_into().expect("16 bytes");
    let ip = Ipv6Addr::from(ip);
    let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
    SocketAddr::new(ip, get_u16(b, port_at))
}

pub(crate) fn put_addr(b: &mut [u8], at: usize, port_at: usize, addr: SocketAddr) {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    b[at..at + 16].copy_from_slice(&ip.octets());
    put_u16(b, port_at, addr.port());
}
