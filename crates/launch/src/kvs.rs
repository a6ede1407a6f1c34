//! The coordinator's job state, without any I/O: key-value store, fences and
//! finalize. Fed with authenticated messages, it says what to send to whom.

use proto::control::{FromCoordinator, MAX_MESSAGE};
use std::collections::BTreeMap;

/// A rank broke the protocol; the job cannot go on (the message says why).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rank {rank} {why}")]
pub struct ProtocolError {
    pub rank: u32,
    pub why: String,
}

pub struct KvState {
    kv: BTreeMap<String, Vec<u8>>,
    kv_bytes: usize,
    /// Epoch each rank is waiting in, if any.
    waiting: Vec<Option<u32>>,
    /// Last completed fence epoch (0: none yet).
    done_epoch: u32,
    finalized: Vec<bool>,
}

impl KvState {
    pub fn new(n: u32) -> KvState {
        KvState {
            kv: BTreeMap::new(),
            kv_bytes: 0,
            waiting: vec![None; n as usize],
            done_epoch: 0,
            finalized: vec![false; n as usize],
        }
    }

    pub fn finalized(&self, rank: u32) -> bool {
        self.finalized.get(rank as usize).copied().unwrap_or(false)
    }

    pub fn put(&mut self, rank: u32, key: String, value: Vec<u8>) -> Result<(), ProtocolError> {
        let add = key.len() + value.len() + 16;
        // A fence answer carries the whole store; refuse what could never be delivered.
        if self.kv_bytes + add > MAX_MESSAGE - 1024 {
            return Err(ProtocolError {
                rank,
                why: format!("put key {key:?}: the key-value store would exceed {MAX_MESSAGE} bytes"),
            });
        }
        self.kv_bytes += add;
        let key_len = key.len();
        if let Some(old) = self.kv.insert(key, value) {
            self.kv_bytes -= old.len() + key_len + 16;
        }
        Ok(())
    }

    /// `rank` waits in fence `epoch`; returns the answer for every rank once all are there.
    pub fn fence(&mut self, rank: u32, epoch: u32) -> Result<Option<FromCoordinator>, ProtocolError> {
        let err = |why: String| ProtocolError { rank, why };
        if let Some(e) = self.waiting[rank as usize] {
            return Err(err(format!(
                "entered fence {epoch} while still waiting in fence {e}"
            )));
        }
        if epoch <= self.done_epoch {
            return Err(err(format!(
                "entered fence {epoch}, but fence {} is already done",
                self.done_epoch
            )));
        }
        if let Some(other) = self.waiting.iter().flatten().find(|&&e| e != epoch) {
            return Err(err(format!(
                "entered fence {epoch} while other ranks wait in fence {other}"
            )));
        }
        self.waiting[rank as usize] = Some(epoch);
        if self.waiting.iter().all(Option::is_some) {
            self.waiting.iter_mut().for_each(|w| *w = None);
            self.done_epoch = epoch;
            let kvs = self.kv.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            return Ok(Some(FromCoordinator::FenceDone { epoch, kvs }));
        }
        Ok(None)
    }

    /// `rank` finalizes; returns `FinalizeDone` for every rank once all have.
    pub fn finalize(&mut self, rank: u32) -> Option<FromCoordinator> {
        let first_time = !std::mem::replace(&mut self.finalized[rank as usize], true);
        (first_time && self.finalized.iter().all(|&f| f)).then_some(FromCoordinator::FinalizeDone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fence_completes_when_every_rank_arrives_with_the_whole_store() {
        let mut s = KvState::new(3);
        s.put(0, "a".into(), vec![0]).unwrap();
        assert_eq!(s.fence(0, 1).unwrap(), None);
        s.put(1, "b".into(), vec![1]).unwrap();
        s.put(1, "a".into(), vec![9]).unwrap();
        assert_eq!(s.fence(1, 1).unwrap(), None);
        s.put(2, "c".into(), vec![2]).unwrap();
        let msg = s.fence(2, 1).unwrap().unwrap();
        assert_eq!(
            msg,
            FromCoordinator::FenceDone {
                epoch: 1,
                kvs: vec![
                    ("a".into(), vec![9]),
                    ("b".into(), vec![1]),
                    ("c".into(), vec![2])
                ]
            }
        );
        // The next fence needs everyone again.
        assert_eq!(s.fence(2, 2).unwrap(), None);
    }

    #[test]
    fn protocol_errors_name_the_rank() {
        let mut s = KvState::new(2);
        s.fence(0, 1).unwrap();
        assert!(s
            .fence(0, 1)
            .unwrap_err()
            .to_string()
            .starts_with("rank 0 entered fence 1 while still"));
        assert!(s
            .fence(1, 2)
            .unwrap_err()
            .to_string()
            .contains("other ranks wait in fence 1"));
        s.fence(1, 1).unwrap().unwrap();
        assert!(s.fence(1, 1).unwrap_err().to_string().contains("already done"));
        let big = vec![0u8; MAX_MESSAGE / 2];
        s.put(1, "x".into(), big.clone()).unwrap();
        assert!(s.put(1, "y".into(), big).is_err());
    }

    #[test]
    fn finalize_done_once_every_rank_finalized() {
        let mut s = KvState::new(2);
        assert_eq!(s.finalize(1), None);
        assert_eq!(s.finalize(1), None);
        assert!(s.finalized(1) && !s.finalized(0));
        assert_eq!(s.finalize(0), Some(FromCoordinator::FinalizeDone));
    }
}
