//! What a lane can do, as reported by its transport, and the one scoring function
//! that turns capabilities into protocol choices.

/// Capabilities of one lane (a connected link to one peer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// Typical one-way latency in nanoseconds.
    pub latency_ns: u64,
    /// Typical bandwidth in bytes per second.
    pub bandwidth: u64,
    /// Largest payload one frame may carry on this lane.
    pub max_frame: u32,
    /// Messages up to this size go eagerly (payload inline); larger ones use rendezvous.
    pub max_eager: u32,
    pub reliable: bool,
    pub ordered: bool,
    pub node_local: bool,
}

impl Caps {
    /// Score for small messages: lower is better.
    pub fn latency_score(&self) -> u64 {
        self.latency_ns
    }
}

/// Index of the lane with the lowest latency, the lane for eager messages and control frames.
pub fn best_latency_lane(lanes: &[Caps]) -> Option<usize> {
    lanes
        .iter()
        .enumerate()
        .min_by_key(|(_, c)| c.latency_score())
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(latency_ns: u64) -> Caps {
        Caps {
            latency_ns,
            bandwidth: 1,
            max_frame: 1 << 20,
            max_eager: 1 << 16,
            reliable: true,
            ordered: true,
            node_local: false,
        }
    }

    #[test]
    fn best_latency_lane_is_the_fastest_and_the_first_on_ties() {
        assert_eq!(best_latency_lane(&[]), None);
        assert_eq!(best_latency_lane(&[lane(30), lane(10), lane(20)]), Some(1));
        assert_eq!(best_latency_lane(&[lane(10), lane(10)]), Some(0));
    }
}
