//! How a rank meets the others before any lane exists: through the coordinator of
//! `pontoon run` (or the one task 0 starts under srun without PMI, `srun.rs`), or
//! through a PMI process manager (Slurm's `srun --mpi=pmi2`, Hydra's `mpiexec`). Both give a key-value fence, a finalize barrier and abort; only the
//! coordinator also says when a rank fails or the job is ended (under PMI, the process
//! manager signals the ranks itself).

use crate::boot::control::{ControlClient, ControlError, JobEnded};
use crate::boot::jobenv::JobEnv;
use crate::boot::pmi::{PmiClient, ProcessMapping};
use proto::control::FromCoordinator;
use std::os::fd::BorrowedFd;

pub(crate) enum Rendezvous {
    Launcher {
        client: ControlClient,
        /// The last key-value fence entered.
        epoch: u32,
        /// The coordinator's process, when this rank started it (task 0 under srun
        /// without PMI).
        _hosted: Option<crate::boot::srun::HostedRendezvous>,
    },
    Pmi(PmiClient),
}

/// Why finalize's barrier could not be entered.
pub(crate) enum NoFinalize {
    /// The job is being ended anyway.
    Shutdown(JobEnded),
    Lost(String),
}

/// What the rendezvous says while the job runs.
pub(crate) enum Event {
    PeerFailed {
        rank: u32,
        cause: String,
    },
    /// The job is being ended (abort elsewhere, a signal, a time limit).
    Shutdown(JobEnded),
    /// Every rank has finalized.
    FinalizeDone,
}

/// The values of the keys `{prefix}{rank}` among `entries`, by rank. Each key names its
/// rank: it is read, instead of formatting and looking up every rank's key (this runs on
/// every rank, over every rank's card).
fn by_rank(
    entries: Vec<(String, Vec<u8>)>,
    prefix: &str,
    size: u32,
    topic: &str,
) -> Result<Vec<Vec<u8>>, String> {
    let mut by_rank: Vec<Option<Vec<u8>>> = vec![None; size as usize];
    for (k, v) in entries {
        let r = k.strip_prefix(prefix).and_then(|r| r.parse::<usize>().ok());
        if let Some(slot) = r.and_then(|r| by_rank.get_mut(r)) {
            *slot = Some(v);
        }
    }
    by_rank
        .into_iter()
        .enumerate()
        .map(|(r, v)| v.ok_or_else(|| format!("rank {r} published no {topic}")))
        .collect()
}

impl Rendezvous {
    /// The socket to watch for events (`None`: nothing comes unasked).
    pub(crate) fn as_fd(&self) -> Option<BorrowedFd<'_>> {
        match self {
            Rendezvous::Launcher { client, .. } => Some(client.as_fd()),
            Rendezvous::Pmi(_) => None,
        }
    }

    /// Every rank publishes `value` under `topic`; returns all ranks' values by rank,
    /// once every rank has. Blocking and collective.
    pub(crate) fn exchange(
        &mut self,
        rank: u32,
        size: u32,
        topic: &str,
        value: &[u8],
    ) -> Result<Vec<Vec<u8>>, String> {
        let prefix = format!("pontoon/{topic}/");
        let key = |r: u32| format!("{prefix}{r}");
        match self {
            Rendezvous::Launcher { client, epoch, .. } => {
                *epoch += 1;
                client.put(&key(rank), value).map_err(|e| e.to_string())?;
                let all = client.fence_entries(*epoch).map_err(|e| e.to_string())?;
                by_rank(all, &prefix, size, topic)
            }
            Rendezvous::Pmi(pmi) => {
                pmi.put(&key(rank), value).map_err(|e| e.to_string())?;
                pmi.fence().map_err(|e| e.to_string())?;
                (0..size)
                    .map(|r| {
                        pmi.get(&key(r))
                            .map_err(|e| e.to_string())?
                            .ok_or_else(|| format!("rank {r} published no {topic}"))
                    })
                    .collect()
            }
        }
    }

    /// The next event, without blocking. An error means the rendezvous is lost.
    pub(crate) fn poll_event(&mut self) -> Result<Option<Event>, String> {
        match self {
            Rendezvous::Launcher { client, .. } => loop {
                let event = match client.poll_event().map_err(|e| e.to_string())? {
                    None => None,
                    Some(FromCoordinator::FinalizeDone) => Some(Event::FinalizeDone),
                    Some(FromCoordinator::PeerFailed { rank, cause }) => {
                        Some(Event::PeerFailed { rank, cause })
                    }
                    Some(FromCoordinator::Shutdown { reason, code }) => {
                        Some(Event::Shutdown(JobEnded { reason, code }))
                    }
                    Some(other) => {
                        tracing::debug!("ignoring control message {other:?}");
                        continue;
                    }
                };
                return Ok(event);
            },
            Rendezvous::Pmi(pmi) if !pmi.fence_pending() => Ok(None),
            // Only finalize's fence is ever pending while the job runs.
            Rendezvous::Pmi(pmi) => {
                if !pmi.fence_reached().map_err(|e| e.to_string())? {
                    return Ok(None);
                }
                pmi.finalize().map_err(|e| e.to_string())?;
                Ok(Some(Event::FinalizeDone))
            }
        }
    }

    /// This rank has entered finalize: `Event::FinalizeDone` follows once all have.
    pub(crate) fn start_finalize(&mut self) -> Result<(), NoFinalize> {
        match self {
            Rendezvous::Launcher { client, .. } => match client.start_finalize() {
                Ok(()) => Ok(()),
                Err(ControlError::Shutdown(ended)) => Err(NoFinalize::Shutdown(ended)),
                Err(e) => Err(NoFinalize::Lost(e.to_string())),
            },
            Rendezvous::Pmi(pmi) => pmi.start_fence().map_err(|e| NoFinalize::Lost(e.to_string())),
        }
    }

    /// Asks for the whole job to end with `code`; whether someone else says why.
    pub(crate) fn abort(&mut self, code: i32, message: &str) -> bool {
        match self {
            // The launcher says it, once for the whole job.
            Rendezvous::Launcher { client, .. } => client.abort(code, message).is_ok(),
            Rendezvous::Pmi(pmi) => {
                let _ = pmi.abort(code, message);
                false
            }
        }
    }

    /// Whether the process manager only ends the job by killing its tasks (PMI), so that
    /// the ranks must pass an abort's code on among themselves.
    pub(crate) fn is_pmi(&self) -> bool {
        matches!(self, Rendezvous::Pmi(_))
    }

    /// `peer`'s lanes broke before it finalized. The launcher saw it exit and ends the
    /// job. A PMI process manager waits for ranks that may wait for the dead one, and no
    /// one tells them: this rank ends the job instead, as `pontoon run` would.
    pub(crate) fn peer_died(&mut self, me: u32, peer: u32, cause: &str) {
        if let Rendezvous::Pmi(pmi) = self {
            let why = format!("rank {me}: rank {peer} is gone: {cause}; ending the job");
            eprintln!("pontoon: {why}");
            if let Err(e) = pmi.abort(1, &why) {
                eprintln!("pontoon: rank {me}: cannot ask the process manager to end the job: {e}");
            }
        }
    }

    /// Tells the others that this rank gave up on `peer` (only the coordinator passes
    /// it on; under PMI the peer finds out from its own lanes).
    pub(crate) fn unreachable(&mut self, peer: u32, cause: &str) -> Result<(), String> {
        match self {
            Rendezvous::Launcher { client, .. } => client.unreachable(peer, cause).map_err(|e| e.to_string()),
            Rendezvous::Pmi(_) => Ok(()),
        }
    }
}

/// The job as a PMI process manager describes it. The secret is not known yet: rank 0
/// draws it and publishes it through the key-value space (see [`share_secret`]).
pub(crate) fn pmi_job(pmi: &mut PmiClient) -> Result<JobEnv, String> {
    let (rank, size) = (pmi.rank, pmi.size);
    let mapping = pmi
        .job_attr("PMI_process_mapping")
        .map_err(|e| format!("reading PMI_process_mapping: {e}"))?;
    let (local_rank, local_size) = match mapping.as_deref().and_then(ProcessMapping::parse) {
        Some(m) => m.local(rank, size),
        None => {
            tracing::info!("rank {rank}: no usable PMI_process_mapping ({mapping:?}); counting this rank alone on its node");
            (0, 1)
        }
    };
    // The same on every rank of the job and different between jobs: the process
    // manager's name of it (Slurm's job and step, Hydra's key-value space), and the
    // cluster's, as Slurm job ids repeat across clusters.
    let cluster = std::env::var("SLURM_CLUSTER_NAME").unwrap_or_default();
    let digest = blake3::hash(format!("pontoon-pmi-job\0{cluster}\0{}", pmi.job_name).as_bytes());
    let mut job_id = [0u8; 16];
    job_id.copy_from_slice(&digest.as_bytes()[..16]);
    let node = rustix::system::uname().nodename().to_string_lossy().into_owned();
    Ok(JobEnv {
        rank,
        size,
        job_id,
        secret: [0; 32],
        coord: Vec::new(),
        local_rank,
        local_size,
        node,
    })
}

/// Rank 0 draws the job secret and the others read it, through the process manager's
/// key-value space, which only the job's own processes can reach.
pub(crate) fn share_secret(pmi: &mut PmiClient, env: &mut JobEnv) -> Result<(), String> {
    const KEY: &str = "pontoon/secret";
    if env.rank == 0 {
        getrandom::fill(&mut env.secret).map_err(|e| format!("no random numbers for the job secret: {e}"))?;
        pmi.put(KEY, &env.secret).map_err(|e| e.to_string())?;
    }
    pmi.fence().map_err(|e| e.to_string())?;
    if env.rank != 0 {
        let secret = pmi
            .get(KEY)
            .map_err(|e| e.to_string())?
            .ok_or("rank 0 published no job secret")?;
        env.secret = secret
            .try_into()
            .map_err(|_| "rank 0's job secret is not 32 bytes".to_string())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::by_rank;

    #[test]
    fn values_are_found_by_the_rank_their_key_names() {
        let entry = |k: &str, v: u8| (k.to_string(), vec![v]);
        let all = vec![
            entry("pontoon/card/1", 1),
            entry("pontoon/other/0", 9),
            entry("pontoon/card/0", 0),
            entry("pontoon/card/7", 7),
            entry("pontoon/cardx/2", 9),
        ];
        assert_eq!(
            by_rank(all.clone(), "pontoon/card/", 2, "card"),
            Ok(vec![vec![0], vec![1]])
        );
        assert_eq!(
            by_rank(all, "pontoon/card/", 3, "card"),
            Err("rank 2 published no card".to_string())
        );
    }
}
