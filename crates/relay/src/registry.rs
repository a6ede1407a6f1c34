//! Who a relay forwards to: the jobs whose ranks registered here, each with its relay
//! key, and the address of every registered rank. Pure bookkeeping, no I/O: every
//! security decision of the relay is made here and tested here.

use std::collections::HashMap;
use std::net::SocketAddr;

use proto::wire::handshake::mac_eq;
use proto::wire::relay::{connect_proof, RelayStatus};

/// How much one relay holds for others.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Jobs registered at once.
    pub jobs: usize,
    /// Registered ranks per job.
    pub ranks_per_job: usize,
    /// Streams forwarded at once per job.
    pub streams_per_job: usize,
    /// Connections still in their first exchange (challenge, request, verdict).
    pub handshakes: usize,
    /// Of those, from one address: one flooding host cannot take every slot.
    pub handshakes_per_host: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            jobs: 1024,
            ranks_per_job: 4096,
            streams_per_job: 16384,
            handshakes: 256,
            handshakes_per_host: 32,
        }
    }
}

/// A refusal: the status for the VERDICT and its reason in words.
pub type Refusal = (RelayStatus, String);

struct Job {
    relay_key: [u8; 32],
    /// Rank → (where it accepts relayed streams, the registration's token).
    ranks: HashMap<u32, (SocketAddr, u64)>,
    streams: usize,
}

#[derive(Default)]
pub struct Registry {
    jobs: HashMap<[u8; 16], Job>,
    next_token: u64,
}

impl Registry {
    /// Registers `rank` of the job `tag` at `addr`; returns the registration's token
    /// (for [`Registry::unregister`] when its connection closes).
    pub fn register(
        &mut self,
        tag: [u8; 16],
        rank: u32,
        relay_key: [u8; 32],
        addr: SocketAddr,
        limits: &Limits,
    ) -> Result<u64, Refusal> {
        if !self.jobs.contains_key(&tag) && self.jobs.len() >= limits.jobs {
            return Err((
                RelayStatus::Busy,
                format!("this relay serves {} jobs already", limits.jobs),
            ));
        }
        let job = self.jobs.entry(tag).or_insert_with(|| Job {
            relay_key,
            ranks: HashMap::new(),
            streams: 0,
        });
        if !mac_eq(&job.relay_key, &relay_key) {
            let refusal = (
                RelayStatus::BadProof,
                "another relay key is registered for this job".to_string(),
            );
            self.drop_if_empty(&tag);
            return Err(refusal);
        }
        if job.ranks.contains_key(&rank) {
            return Err((
                RelayStatus::Conflict,
                format!("rank {rank} is registered already"),
            ));
        }
        if job.ranks.len() >= limits.ranks_per_job {
            return Err((
                RelayStatus::Busy,
                format!(
                    "{} ranks of this job are registered already",
                    limits.ranks_per_job
                ),
            ));
        }
        self.next_token += 1;
        job.ranks.insert(rank, (addr, self.next_token));
        Ok(self.next_token)
    }

    /// Ends a registration (its connection closed). A job with no rank left is forgotten.
    pub fn unregister(&mut self, tag: &[u8; 16], rank: u32, token: u64) {
        if let Some(job) = self.jobs.get_mut(tag) {
            if job.ranks.get(&rank).is_some_and(|(_, t)| *t == token) {
                job.ranks.remove(&rank);
            }
        }
        self.drop_if_empty(tag);
    }

    fn drop_if_empty(&mut self, tag: &[u8; 16]) {
        if self
            .jobs
            .get(tag)
            .is_some_and(|j| j.ranks.is_empty() && j.streams == 0)
        {
            self.jobs.remove(tag);
        }
    }

    /// Where to forward a request for `rank` of job `tag` that answered the challenge
    /// `nonce` with `proof`; takes one of the job's stream slots (give it back with
    /// [`Registry::stream_closed`]). Ranks are only named to requesters with a valid proof.
    pub fn open_stream(
        &mut self,
        tag: &[u8; 16],
        rank: u32,
        nonce: &[u8; 32],
        proof: &[u8; 32],
        limits: &Limits,
    ) -> Result<SocketAddr, Refusal> {
        let job = self.admit(tag, rank, nonce, proof)?;
        let Some((addr, _)) = job.ranks.get(&rank) else {
            return Err((
                RelayStatus::UnknownRank,
                format!("rank {rank} of this job is not registered here"),
            ));
        };
        let addr = *addr;
        Self::take_slot(job, limits)?;
        Ok(addr)
    }

    /// The job's relay key, for passing a request for `rank` on to the relay at `next`
    /// (two-proxy): only for a requester with a valid proof, only to a globally unique
    /// address (never into this relay's own private networks); takes a stream slot like
    /// [`Registry::open_stream`].
    pub fn open_forward(
        &mut self,
        tag: &[u8; 16],
        rank: u32,
        nonce: &[u8; 32],
        proof: &[u8; 32],
        next: SocketAddr,
        limits: &Limits,
    ) -> Result<[u8; 32], Refusal> {
        let job = self.admit(tag, rank, nonce, proof)?;
        if !net::card::globally_unique(next.ip()) || next.port() == 0 {
            return Err((
                RelayStatus::Forbidden,
                format!("this relay forwards only to public addresses, not {next}"),
            ));
        }
        let key = job.relay_key;
        Self::take_slot(job, limits)?;
        Ok(key)
    }

    /// The job `tag`, if the proof for `rank` under `nonce` holds.
    fn admit(
        &mut self,
        tag: &[u8; 16],
        rank: u32,
        nonce: &[u8; 32],
        proof: &[u8; 32],
    ) -> Result<&mut Job, Refusal> {
        let Some(job) = self.jobs.get_mut(tag) else {
            return Err((
                RelayStatus::UnknownJob,
                "no rank of this job is registered here".into(),
            ));
        };
        if !mac_eq(proof, &connect_proof(&job.relay_key, nonce, tag, rank)) {
            return Err((
                RelayStatus::BadProof,
                "the proof does not match this job's relay key".into(),
            ));
        }
        Ok(job)
    }

    fn take_slot(job: &mut Job, limits: &Limits) -> Result<(), Refusal> {
        if job.streams >= limits.streams_per_job {
            return Err((
                RelayStatus::Busy,
                format!("{} streams of this job are open already", limits.streams_per_job),
            ));
        }
        job.streams += 1;
        Ok(())
    }

    pub fn stream_closed(&mut self, tag: &[u8; 16]) {
        if let Some(job) = self.jobs.get_mut(tag) {
            job.streams = job.streams.saturating_sub(1);
        }
        self.drop_if_empty(tag);
    }

    /// (jobs, registered ranks, open streams), for the relay's status line.
    pub fn counts(&self) -> (usize, usize, usize) {
        let ranks = self.jobs.values().map(|j| j.ranks.len()).sum();
        let streams = self.jobs.values().map(|j| j.streams).sum();
        (self.jobs.len(), ranks, streams)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proto::wire::relay::{job_tag, relay_key};

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 5], port))
    }

    #[test]
    fn a_forward_needs_the_proof_and_a_public_next_hop() {
        let limits = Limits::default();
        let secret = [7u8; 32];
        let (tag, key) = (job_tag(&secret), relay_key(&secret));
        let mut r = Registry::default();
        let nonce = [1u8; 32];
        let proof = connect_proof(&key, &nonce, &tag, 9);
        let public: SocketAddr = "198.51.100.2:7426".parse().unwrap();
        let status = |res: Result<[u8; 32], Refusal>| res.err().map(|e| e.0);
        assert_eq!(
            status(r.open_forward(&tag, 9, &nonce, &proof, public, &limits)),
            Some(RelayStatus::UnknownJob),
            "a job with nobody here is nobody's to forward for"
        );
        r.register(tag, 3, key, addr(4000), &limits).unwrap();
        assert_eq!(r.open_forward(&tag, 9, &nonce, &proof, public, &limits), Ok(key));
        assert_eq!(
            status(r.open_forward(&tag, 9, &[2; 32], &proof, public, &limits)),
            Some(RelayStatus::BadProof)
        );
        for inside in [
            "10.0.0.12:22",
            "127.0.0.1:7426",
            "[fd00::1]:7426",
            "198.51.100.2:0",
        ] {
            assert_eq!(
                status(r.open_forward(&tag, 9, &nonce, &proof, inside.parse().unwrap(), &limits)),
                Some(RelayStatus::Forbidden),
                "{inside}"
            );
        }
        assert_eq!(r.counts().2, 1, "only the accepted forward holds a slot");
    }

    #[test]
    fn only_a_requester_with_the_proof_reaches_a_registered_rank() {
        let limits = Limits::default();
        let secret = [7u8; 32];
        let (tag, key) = (job_tag(&secret), relay_key(&secret));
        let mut r = Registry::default();
        let token = r.register(tag, 3, key, addr(4000), &limits).unwrap();
        let nonce = [1u8; 32];
        let proof = connect_proof(&key, &nonce, &tag, 3);
        assert_eq!(r.open_stream(&tag, 3, &nonce, &proof, &limits), Ok(addr(4000)));
        // Replayed on another challenge, turned to another rank, or forged: refused.
        let status = |res: Result<SocketAddr, Refusal>| res.err().map(|e| e.0);
        assert_eq!(
            status(r.open_stream(&tag, 3, &[2; 32], &proof, &limits)),
            Some(RelayStatus::BadProof)
        );
        assert_eq!(
            status(r.open_stream(&tag, 4, &nonce, &proof, &limits)),
            Some(RelayStatus::BadProof)
        );
        let other = connect_proof(&relay_key(&[8; 32]), &nonce, &tag, 3);
        assert_eq!(
            status(r.open_stream(&tag, 3, &nonce, &other, &limits)),
            Some(RelayStatus::BadProof)
        );
        // A member asking for a rank that is not here learns that; a stranger does not.
        let p4 = connect_proof(&key, &nonce, &tag, 4);
        assert_eq!(
            status(r.open_stream(&tag, 4, &nonce, &p4, &limits)),
            Some(RelayStatus::UnknownRank)
        );
        assert_eq!(
            status(r.open_stream(&[9; 16], 3, &nonce, &proof, &limits)),
            Some(RelayStatus::UnknownJob)
        );
        r.stream_closed(&tag);
        r.unregister(&tag, 3, token);
        assert_eq!(r.counts(), (0, 0, 0), "a job with nothing left is forgotten");
        assert_eq!(
            status(r.open_stream(&tag, 3, &nonce, &proof, &limits)),
            Some(RelayStatus::UnknownJob)
        );
    }

    #[test]
    fn registrations_cannot_take_over_a_rank_or_a_job() {
        let limits = Limits::default();
        let secret = [7u8; 32];
        let (tag, key) = (job_tag(&secret), relay_key(&secret));
        let mut r = Registry::default();
        let first = r.register(tag, 3, key, addr(4000), &limits).unwrap();
        let err = r.register(tag, 3, key, addr(5000), &limits).unwrap_err();
        assert_eq!(err.0, RelayStatus::Conflict);
        let err = r.register(tag, 4, [0; 32], addr(5000), &limits).unwrap_err();
        assert_eq!(err.0, RelayStatus::BadProof, "{}", err.1);
        // A stale token (an old registration's connection closing late) removes nothing.
        r.unregister(&tag, 3, first + 100);
        assert_eq!(r.counts(), (1, 1, 0));
        // Another job registers beside it.
        assert!(r.register([5; 16], 0, key, addr(1), &limits).is_ok());
        assert_eq!(r.counts().0, 2);
    }

    #[test]
    fn limits_hold() {
        let limits = Limits {
            jobs: 1,
            ranks_per_job: 2,
            streams_per_job: 1,
            handshakes: 1,
            handshakes_per_host: 1,
        };
        let (tag, key) = (job_tag(&[1; 32]), relay_key(&[1; 32]));
        let mut r = Registry::default();
        r.register(tag, 0, key, addr(1), &limits).unwrap();
        r.register(tag, 1, key, addr(2), &limits).unwrap();
        assert_eq!(
            r.register(tag, 2, key, addr(3), &limits).unwrap_err().0,
            RelayStatus::Busy
        );
        let other = job_tag(&[2; 32]);
        assert_eq!(
            r.register(other, 0, key, addr(1), &limits).unwrap_err().0,
            RelayStatus::Busy
        );
        let nonce = [0u8; 32];
        let proof = connect_proof(&key, &nonce, &tag, 0);
        assert!(r.open_stream(&tag, 0, &nonce, &proof, &limits).is_ok());
        assert_eq!(
            r.open_stream(&tag, 0, &nonce, &proof, &limits).unwrap_err().0,
            RelayStatus::Busy
        );
        r.stream_closed(&tag);
        assert!(r.open_stream(&tag, 0, &nonce, &proof, &limits).is_ok());
    }
}
