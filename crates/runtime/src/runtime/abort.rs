//! MPI_Abort. Under `pontoon run` (and srun without PMI) the coordinator ends the job
//! and every rank exits with the abort's code. A PMI process manager can only kill the
//! other tasks, and srun then reports the highest status of its tasks: 137 for the
//! killed ones, not the code. So under PMI the ranks pass the abort on among themselves
//! (ABORT frames over their lanes, each rank to all of its peers) and each exits with
//! the code; only ranks that no frame reached within [`ORIGIN_WAITS`] are killed by the
//! process manager.

use super::Runtime;
use proto::Rank;
use std::time::{Duration, Instant};

/// How long the aborting rank waits for its peers to go before it asks the process
/// manager to kill whoever is left.
const ORIGIN_WAITS: Duration = Duration::from_secs(1);
/// How long a rank that heard of the abort tries to pass it on before it exits.
const PASS_ON_WITHIN: Duration = Duration::from_millis(500);

impl Runtime {
    /// MPI_Abort: asks the launcher (or the process manager) to end the job with `code`,
    /// then exits with it.
    pub fn abort(&mut self, code: i32, message: &str) -> ! {
        if self.job.rendezvous.as_ref().is_some_and(|r| r.is_pmi()) {
            eprintln!(
                "pontoon: rank {}: abort (code {code}): {message}",
                self.job.id.rank
            );
            if self.pass_abort_on(self.job.id.rank, code, ORIGIN_WAITS, true) {
                // Every other rank is gone, each with the code: nobody is left to kill.
                std::process::exit(code)
            }
        }
        let told = self
            .job
            .rendezvous
            .as_mut()
            .is_some_and(|r| r.abort(code, message));
        if !told && !self.life.aborting {
            eprintln!("pontoon: abort (code {code}): {message}");
        }
        std::process::exit(code)
    }

    /// A peer says rank `origin` aborted the job: pass it on, exit with its code.
    pub(super) fn heard_abort(&mut self, peer: Rank, origin: Rank, code: i32) {
        if self.life.aborting {
            return; // passed on already (a peer echoes it back)
        }
        tracing::info!(
            "rank {}: rank {origin} aborted the job with code {code} (heard from rank {peer})",
            self.job.id.rank
        );
        self.pass_abort_on(origin, code, PASS_ON_WITHIN, false);
        std::process::exit(code)
    }

    /// Sends ABORT to every connected peer and serves the lanes until the frames are
    /// out (and, with `wait_for_peers`, until every other rank is gone) or `within`
    /// passes. Returns whether every other rank is gone.
    fn pass_abort_on(&mut self, origin: Rank, code: i32, within: Duration, wait_for_peers: bool) -> bool {
        self.life.aborting = true;
        self.ep.abort_job(origin, code);
        self.drive_outputs();
        let deadline = Instant::now() + within;
        let me = self.job.id.rank;
        loop {
            let all_gone = (0..self.job.id.size)
                .filter(|&r| r != me)
                .all(|r| self.ep.peer_failure(r).is_some());
            let sent = !self.lanes.any_queued();
            if all_gone || (sent && !wait_for_peers) || Instant::now() >= deadline {
                return all_gone;
            }
            if !self.progress() {
                self.sleep(Duration::from_millis(1));
            }
        }
    }
}
