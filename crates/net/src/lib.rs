//! Address classes, interface discovery, connection strings and candidate paths.
//!
//! Pure functions wherever possible: only [`iface::interfaces`],
//! [`iface::local_addresses`], [`card::node_id`] and [`policy::IfPolicy::from_env`] look
//! at the host.
#![forbid(unsafe_code)]

pub mod card;
pub mod card_table;
pub mod class;
pub mod connstr;
pub mod iface;
pub mod listen;
#[cfg(target_os = "linux")]
mod netlink;
pub mod paths;
pub mod policy;
pub mod sites;

pub use card::{node_id, CardRelay, EndpointCard};
pub use card_table::{CardHead, CardTable};
pub use class::{classify, AddrClass};
pub use connstr::{client_order, ConnEntry, ParseError};
pub use iface::{interfaces, local_addresses, Interface};
pub use paths::{candidates, Candidate, PathKind};
pub use policy::IfPolicy;
