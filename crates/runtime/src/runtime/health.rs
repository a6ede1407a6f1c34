//! The health of network lanes, from the kernel's view of each connection: a lane
//! whose path has acknowledged nothing for `PONTOON_LANE_TIMEOUT_MS` while data waited
//! (a NIC taken down, a route gone) is closed like a broken connection, so its
//! fragments fail over to the peer's other lanes, or the peer fails with the reason,
//! instead of TCP retrying for a quarter of an hour. The same look measures each
//! lane's round trip and delivery rate for the engine's lane plan.

use std::time::{Duration, Instant};

use transport::Link;

use crate::fabric::tcp::progress::measured;

use super::Runtime;

/// How often the lanes are looked at (on the rarely busy passes).
pub(super) const CHECK_EVERY: Duration = Duration::from_millis(200);

impl Runtime {
    /// Looks at every lane once `CHECK_EVERY` has passed since the last look.
    pub(super) fn check_lanes(&mut self) {
        let now = Instant::now();
        if now < self.passes.next_lane_check {
            return;
        }
        self.passes.next_lane_check = now + CHECK_EVERY;
        let stall_ms = self.cfg.lane_timeout.as_millis().min(u128::from(u32::MAX)) as u32;
        let all: Vec<proto::LaneId> = self.lanes.iter().map(|l| l.info.lane).collect();
        for lane in all {
            let Some(l) = self.lanes.get(lane) else { continue };
            match l.link.check_path(stall_ms) {
                Ok(Some(figures)) => {
                    let (peer, before) = (l.peer, l.link.caps());
                    let caps = measured(before, figures);
                    if caps != before {
                        if let Some(l) = self.lanes.get_mut(lane) {
                            l.link.set_caps(caps);
                        }
                        self.ep.handle_lane_caps(peer, lane, caps);
                    }
                }
                Ok(None) => {}
                Err(e) => self.lane_down(lane, e),
            }
        }
    }
}
