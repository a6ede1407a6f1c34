//! Raw Ethernet between ranks of one LAN segment: ports, handshakes and the probe.

pub(crate) mod wireup;
