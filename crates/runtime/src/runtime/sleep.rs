//! Where a rank's links are watched with epoll, and how it sleeps (see `waiter.rs` for why a
//! link is in one epoll set at most, and a rank's only link in none while it busy-polls).

use std::time::Duration;

use proto::PayloadToken;
use transport::tcp::TcpLink;
use transport::Link;

use super::Runtime;

/// A link's name in the ready set, and back.
pub(super) fn link_key(peer: usize, lane: usize) -> u64 {
    (peer as u64) << 16 | lane as u64
}
pub(super) fn peer_lane(key: u64) -> (usize, usize) {
    ((key >> 16) as usize, (key & 0xffff) as usize)
}

impl Runtime {
    /// Sleeps until a socket is ready or `max` passed.
    pub(super) fn sleep(&mut self, max: Duration) {
        // Outgoing connects are short-lived: wake up often while they run.
        let max = if self.outgoing.is_empty() {
            max
        } else {
            Duration::from_millis(1)
        };
        // A link blocked on a full send buffer wakes the rank when there is room again
        // (`watch_links` registers those for writing itself).
        let temporary = !self.links_watched;
        let mut blocked = Vec::new();
        let watched = if temporary {
            self.watch_links()
        } else {
            blocked.extend(self.link_keys().filter(|&k| self.link(k).tx_queued() > 0));
            blocked
                .iter()
                .try_for_each(|&k| self.ready.set_writable(self.link(k).fd(), k, true))
        };
        // Without every link in the set, sleep briefly: a message would not wake us.
        let max = if watched.is_ok() {
            max
        } else {
            max.min(Duration::from_millis(1))
        };
        self.ready.wait(max, &mut [0; 1]);
        if temporary {
            self.link_keys()
                .for_each(|k| self.ready.unwatch(self.link(k).fd()));
        } else {
            for &k in &blocked {
                let _ = self.ready.set_writable(self.link(k).fd(), k, false);
            }
        }
        self.polls = 1023; // look at wire-up and the coordinator on the next pass
    }

    /// Adds every link to the ready set (all or none; blocked ones also for writing).
    pub(super) fn watch_links(&self) -> std::io::Result<()> {
        let keys: Vec<u64> = self.link_keys().collect();
        for (i, &k) in keys.iter().enumerate() {
            let link = self.link(k);
            if let Err(e) = self.ready.watch(link.fd(), k, link.tx_queued() > 0) {
                keys[..i]
                    .iter()
                    .for_each(|&k| self.ready.unwatch(self.link(k).fd()));
                return Err(e);
            }
        }
        Ok(())
    }

    fn link_keys(&self) -> impl Iterator<Item = u64> + '_ {
        let lanes =
            |(p, l): (usize, &Vec<TcpLink<PayloadToken>>)| (0..l.len()).map(move |lane| link_key(p, lane));
        self.links.iter().enumerate().flat_map(lanes)
    }

    fn link(&self, key: u64) -> &TcpLink<PayloadToken> {
        let (peer, lane) = peer_lane(key);
        &self.links[peer][lane]
    }
}
