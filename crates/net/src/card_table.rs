//! Every rank's endpoint card, as a rank receives them at start-up: the head of each
//! card (node, site, what the coordinator saw) read at once, the rest decoded when the
//! rank first needs it, to dial that peer.
//!
//! Why lazily: every rank receives every card, so decoding them all costs each rank time
//! in proportion to the job, and the job time in proportion to its square. Decoding a
//! card (its interfaces, their names and addresses) took 1.2 µs, 0.3 ms per rank at 256
//! ranks, while the ranks of one node never dial each other and read only the nodes.

use crate::card::{check_site, EndpointCard};
use serde::Deserialize;
use std::net::IpAddr;
use std::sync::OnceLock;

/// The fields every rank reads of every card: the first of [`EndpointCard`]'s, in its
/// order, so that they are a prefix of its postcard form.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct CardHead {
    pub node: u64,
    pub site: Option<String>,
    pub seen_from: Option<IpAddr>,
    pub control_rtt_us: Option<u32>,
}

impl CardHead {
    /// The head of an encoded card; never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<CardHead, String> {
        let (head, _): (CardHead, _) =
            postcard::take_from_bytes(bytes).map_err(|e| format!("malformed endpoint card: {e}"))?;
        check_site(head.site.as_deref())?;
        Ok(head)
    }
}

/// The cards of ranks `0..len()`, by rank.
#[derive(Debug, Default)]
pub struct CardTable {
    heads: Vec<CardHead>,
    /// The cards as they came, decoded when first used.
    encoded: Vec<Vec<u8>>,
    /// `Err` inside: why the card is malformed beyond its head. Boxed: most are never
    /// decoded, and an empty cell is small.
    decoded: Vec<OnceLock<Result<Box<EndpointCard>, String>>>,
}

impl CardTable {
    /// The cards as the rendezvous gave them, by rank: fails if a head is malformed.
    pub fn from_encoded(encoded: Vec<Vec<u8>>) -> Result<CardTable, String> {
        let heads = encoded
            .iter()
            .enumerate()
            .map(|(r, bytes)| CardHead::decode(bytes).map_err(|e| format!("rank {r}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let decoded = encoded.iter().map(|_| OnceLock::new()).collect();
        Ok(CardTable {
            heads,
            encoded,
            decoded,
        })
    }

    pub fn len(&self) -> usize {
        self.heads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heads.is_empty()
    }

    pub fn head(&self, rank: u32) -> Option<&CardHead> {
        self.heads.get(rank as usize)
    }

    pub fn heads(&self) -> &[CardHead] {
        &self.heads
    }

    /// `rank`'s whole card, decoded on first use; `None` for a rank out of range or a
    /// card malformed beyond its head ([`CardTable::fault`] says how).
    pub fn get(&self, rank: u32) -> Option<&EndpointCard> {
        self.decode(rank)?.as_deref().ok()
    }

    /// Why `rank`'s card cannot be used, if it cannot.
    pub fn fault(&self, rank: u32) -> Option<String> {
        match self.decode(rank) {
            None => Some(format!("no rank {rank} among the {} cards", self.len())),
            Some(Err(e)) => Some(e.clone()),
            Some(Ok(_)) => None,
        }
    }

    fn decode(&self, rank: u32) -> Option<&Result<Box<EndpointCard>, String>> {
        let r = rank as usize;
        let bytes = self.encoded.get(r).map_or(&[][..], Vec::as_slice);
        Some(
            self.decoded
                .get(r)?
                .get_or_init(|| EndpointCard::decode(bytes).map(Box::new)),
        )
    }

    /// Whether the cards of `a` and `b` name the same node.
    pub fn same_node(&self, a: u32, b: u32) -> bool {
        match (self.head(a), self.head(b)) {
            (Some(a), Some(b)) => a.node == b.node,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::card::{CardIface, MAX_NAME};
    use proptest::prelude::*;

    fn head_of(card: &EndpointCard) -> CardHead {
        CardHead {
            node: card.node,
            site: card.site.clone(),
            seen_from: card.seen_from,
            control_rtt_us: card.control_rtt_us,
        }
    }

    fn card(node: u64, site: Option<String>, seen_from: Option<IpAddr>, rtt: Option<u32>) -> EndpointCard {
        EndpointCard {
            node,
            site,
            seen_from,
            control_rtt_us: rtt,
            port4: 4000,
            port6: 0,
            ifaces: vec![CardIface {
                index: 2,
                name: "eth0".into(),
                mac: Some([2, 0, 0, 0, 0, 1]),
                mtu: 1500,
                bridge: false,
                loopback: false,
                addrs: vec!["10.0.0.1".parse().unwrap()],
                raw_eth: false,
            }],
            relays: Vec::new(),
        }
    }

    proptest! {
        /// The head is a prefix of the card's postcard form: it reads what the whole
        /// decode reads, whatever the values.
        #[test]
        fn the_head_reads_what_the_whole_card_says(
            node: u64,
            site in proptest::option::of("[a-z]{0,12}"),
            seen_from: Option<std::net::Ipv6Addr>,
            rtt: Option<u32>,
        ) {
            let c = card(node, site, seen_from.map(IpAddr::V6), rtt);
            let table = CardTable::from_encoded(vec![c.encode()]).unwrap();
            prop_assert_eq!(table.head(0).unwrap(), &head_of(&c));
            prop_assert_eq!(table.get(0).unwrap(), &c);
        }
    }

    #[test]
    fn a_card_malformed_beyond_its_head_is_found_when_used_and_not_before() {
        let good = card(7, None, None, Some(40)).encode();
        let mut cut = card(8, Some("east".into()), None, None).encode();
        cut.truncate(cut.len() - 3);
        let table = CardTable::from_encoded(vec![good, cut]).unwrap();
        assert!(table.same_node(0, 0) && !table.same_node(0, 1));
        assert_eq!(table.head(1).unwrap().site.as_deref(), Some("east"));
        assert!(table.get(0).is_some());
        assert!(table.get(1).is_none(), "its interfaces are cut off");
        assert!(table.fault(1).unwrap().contains("malformed endpoint card"));
        assert_eq!(table.fault(0), None);
        assert!(table.get(2).is_none(), "no such rank");
        assert!(table.fault(2).unwrap().contains("no rank 2"));
    }

    #[test]
    fn a_malformed_head_fails_the_table_and_names_the_rank() {
        let e = CardTable::from_encoded(vec![card(1, None, None, None).encode(), vec![0xff]]).unwrap_err();
        assert!(e.starts_with("rank 1: malformed endpoint card"), "{e}");
        let long = card(1, Some("x".repeat(MAX_NAME + 1)), None, None).encode();
        assert!(CardTable::from_encoded(vec![long])
            .unwrap_err()
            .contains("site name too long"));
    }
}
