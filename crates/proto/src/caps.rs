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

/// Splits `len` bytes into fragments of at most `frag` bytes spread over `lanes` in
/// proportion to their bandwidth: each fragment goes to the lane that would finish
/// its share soonest. Returns (lane, offset, length) in offset order.
pub fn stripe(lanes: &[Caps], len: u64, frag: u64) -> Vec<(usize, u64, u64)> {
    let frag = frag.max(1);
    let mut out = Vec::with_capacity(len.div_ceil(frag) as usize);
    let mut queued = vec![0u128; lanes.len().max(1)];
    let mut offset = 0;
    while offset < len {
        let chunk = frag.min(len - offset);
        let lane = if lanes.len() <= 1 {
            0
        } else {
            // Finish time of the lane's queue after this chunk, in bytes / (bytes per second).
            (0..lanes.len())
                .min_by_key(|&i| {
                    (queued[i] + u128::from(chunk)) * 1_000_000 / u128::from(lanes[i].bandwidth.max(1))
                })
                .unwrap_or(0)
        };
        queued[lane] += u128::from(chunk);
        out.push((lane, offset, chunk));
        offset += chunk;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(bw: u64) -> Caps {
        Caps {
            latency_ns: 1,
            bandwidth: bw,
            max_frame: 1 << 20,
            max_eager: 1 << 16,
            reliable: true,
            ordered: true,
            node_local: false,
        }
    }

    #[test]
    fn stripe_covers_everything_in_proportion() {
        let plan = stripe(&[lane(1000), lane(3000)], 400 << 10, 1 << 10);
        let mut next = 0;
        let mut per_lane = [0u64; 2];
        for (l, off, len) in &plan {
            assert_eq!(*off, next);
            next += len;
            per_lane[*l] += len;
        }
        assert_eq!(next, 400 << 10);
        assert_eq!(per_lane[1] / (per_lane[0] / 100), 300); // 3:1 split
    }

    #[test]
    fn stripe_of_nothing_is_empty_and_single_lane_is_lane_zero() {
        assert!(stripe(&[lane(1)], 0, 10).is_empty());
        assert!(stripe(&[lane(1)], 25, 10).iter().all(|(l, _, _)| *l == 0));
        assert_eq!(stripe(&[], 25, 10).len(), 3);
    }
}
