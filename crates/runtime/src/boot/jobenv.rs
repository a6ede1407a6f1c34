//! What the launcher tells a rank through its environment.
//!
//! `pontoon run` (and later its remote agents) set these variables for every rank;
//! [`ENV_VARS`] lists them for `pontoon info`. A process started without the launcher
//! has no `PONTOON_RANK` and runs as a singleton.

use net::ConnEntry;

/// Every variable the launcher sets for a rank, with its meaning.
pub const ENV_VARS: &[(&str, &str)] = &[
    ("PONTOON_RANK", "rank of this process in the job (0-based)"),
    ("PONTOON_SIZE", "number of ranks in the job"),
    (
        "PONTOON_COORD",
        "connection string of the launcher's coordinator (tcp://…;tcp6://[…]:…)",
    ),
    ("PONTOON_JOB_ID", "job id, 32 hex digits"),
    (
        "PONTOON_JOB_SECRET",
        "job secret, 64 hex digits; removed from the environment as soon as it is read so \
         children do not inherit it",
    ),
    ("PONTOON_LOCAL_RANK", "rank among the ranks on this node"),
    ("PONTOON_LOCAL_SIZE", "number of ranks on this node"),
    ("PONTOON_NODE", "name of the node (host name) the rank runs on"),
];

/// The job as seen by one rank.
#[derive(Clone, PartialEq, Eq)]
pub struct JobEnv {
    pub rank: u32,
    pub size: u32,
    pub job_id: [u8; 16],
    /// Keys every MAC of the job. Never print it: `Debug` redacts it.
    pub secret: [u8; 32],
    pub coord: Vec<ConnEntry>,
    pub local_rank: u32,
    pub local_size: u32,
    pub node: String,
}

impl std::fmt::Debug for JobEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobEnv")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("job_id", &hex(&self.job_id))
            .field("secret", &"<redacted>")
            .field("coord", &net::connstr::format(&self.coord))
            .field("local_rank", &self.local_rank)
            .field("local_size", &self.local_size)
            .field("node", &self.node)
            .finish()
    }
}

/// A variable is missing or malformed. The message names the variable and never
/// contains the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name} {why}; pontoon run sets it for every rank (was this process started by `pontoon run`?)")]
pub struct JobEnvError {
    pub name: &'static str,
    pub why: String,
}

fn err(name: &'static str, why: impl Into<String>) -> JobEnvError {
    JobEnvError {
        name,
        why: why.into(),
    }
}

pub use proto::hex::{hex, unhex, unhex_any};

type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

fn required(env: Lookup, name: &'static str) -> Result<String, JobEnvError> {
    env(name).ok_or_else(|| err(name, "is not set"))
}

fn number(env: Lookup, name: &'static str) -> Result<u32, JobEnvError> {
    let v = required(env, name)?;
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err(name, format!("is {v:?}, not a non-negative integer")));
    }
    v.parse().map_err(|_| err(name, format!("is {v:?}, too large")))
}

impl JobEnv {
    /// Reads the job from the process environment; `Ok(None)` when `PONTOON_RANK` is
    /// unset (a singleton run). Removes `PONTOON_JOB_SECRET` from the environment in
    /// any case, so programs this rank starts never see it. Call it before starting
    /// threads: changing the environment races with other threads reading it.
    pub fn from_env() -> Result<Option<JobEnv>, JobEnvError> {
        let r = Self::from_lookup(&|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()));
        std::env::remove_var("PONTOON_JOB_SECRET");
        r
    }

    /// Reads the job through `env` (tests pass a map); does not touch the environment.
    pub fn from_lookup(env: Lookup) -> Result<Option<JobEnv>, JobEnvError> {
        if env("PONTOON_RANK").is_none() {
            return Ok(None);
        }
        let rank = number(env, "PONTOON_RANK")?;
        let size = number(env, "PONTOON_SIZE")?;
        if size == 0 {
            return Err(err("PONTOON_SIZE", "is 0; a job has at least one rank"));
        }
        if rank >= size {
            return Err(err(
                "PONTOON_RANK",
                format!("is {rank}, not below PONTOON_SIZE={size}"),
            ));
        }
        let id = required(env, "PONTOON_JOB_ID")?;
        let job_id =
            unhex::<16>(&id).ok_or_else(|| err("PONTOON_JOB_ID", format!("is {id:?}, not 32 hex digits")))?;
        // The value is never echoed back: an error message must not leak the secret.
        let secret = unhex::<32>(&required(env, "PONTOON_JOB_SECRET")?)
            .ok_or_else(|| err("PONTOON_JOB_SECRET", "is not 64 hex digits"))?;
        let c = required(env, "PONTOON_COORD")?;
        let coord =
            net::connstr::parse(&c).map_err(|e| err("PONTOON_COORD", format!("is not valid: {e}")))?;
        let local_rank = number(env, "PONTOON_LOCAL_RANK")?;
        let local_size = number(env, "PONTOON_LOCAL_SIZE")?;
        if local_rank >= local_size || local_size > size {
            return Err(err(
                "PONTOON_LOCAL_RANK",
                format!("is {local_rank} with PONTOON_LOCAL_SIZE={local_size} and PONTOON_SIZE={size}: inconsistent"),
            ));
        }
        let node = required(env, "PONTOON_NODE")?;
        if node.is_empty() {
            return Err(err("PONTOON_NODE", "is empty"));
        }
        Ok(Some(JobEnv {
            rank,
            size,
            job_id,
            secret,
            coord,
            local_rank,
            local_size,
            node,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";

    fn good() -> HashMap<&'static str, String> {
        [
            ("PONTOON_RANK", "1"),
            ("PONTOON_SIZE", "4"),
            ("PONTOON_COORD", "tcp://192.0.2.1:57990;tcp://127.0.0.1:57990"),
            ("PONTOON_JOB_ID", "0123456789abcdef0123456789abcdef"),
            ("PONTOON_JOB_SECRET", SECRET),
            ("PONTOON_LOCAL_RANK", "1"),
            ("PONTOON_LOCAL_SIZE", "4"),
            ("PONTOON_NODE", "node7"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_string()))
        .collect()
    }

    fn read(m: &HashMap<&'static str, String>) -> Result<Option<JobEnv>, JobEnvError> {
        JobEnv::from_lookup(&|k| m.get(k).cloned())
    }

    #[test]
    fn reads_a_complete_environment() {
        let e = read(&good()).unwrap().unwrap();
        assert_eq!((e.rank, e.size, e.local_rank, e.local_size), (1, 4, 1, 4));
        assert_eq!(e.job_id[0], 0x01);
        assert_eq!(e.secret[31], 0xff);
        assert_eq!(e.coord.len(), 2);
        assert_eq!(e.node, "node7");
    }

    #[test]
    fn no_rank_means_singleton() {
        let mut m = good();
        m.remove("PONTOON_RANK");
        assert_eq!(read(&m).unwrap(), None);
    }

    #[test]
    fn errors_name_the_variable_and_never_show_the_secret() {
        let cases: &[(&str, Option<&str>)] = &[
            ("PONTOON_SIZE", Some("four")),
            ("PONTOON_SIZE", Some("0")),
            ("PONTOON_SIZE", None),
            ("PONTOON_RANK", Some("4")),
            ("PONTOON_RANK", Some("-1")),
            ("PONTOON_RANK", Some("99999999999")),
            ("PONTOON_JOB_ID", Some("0123")),
            ("PONTOON_JOB_SECRET", Some(&SECRET[..63])),
            (
                "PONTOON_JOB_SECRET",
                Some("zz112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
            ),
            ("PONTOON_JOB_SECRET", None),
            ("PONTOON_COORD", Some("tcp://nowhere")),
            ("PONTOON_LOCAL_RANK", Some("5")),
            ("PONTOON_LOCAL_SIZE", None),
            ("PONTOON_NODE", Some("")),
        ];
        for (name, value) in cases {
            let mut m = good();
            match value {
                Some(v) => m.insert(name, v.to_string()),
                None => m.remove(name),
            };
            let e = read(&m).expect_err(name);
            let msg = e.to_string();
            let expect = if *name == "PONTOON_LOCAL_SIZE" && value.is_some() {
                "PONTOON_LOCAL_RANK"
            } else {
                name
            };
            assert!(msg.starts_with(expect), "{name}: {msg}");
            assert!(
                !msg.to_lowercase().contains(&SECRET[..16].to_lowercase()),
                "{msg}"
            );
        }
    }

    #[test]
    fn debug_redacts_the_secret() {
        let e = read(&good()).unwrap().unwrap();
        let d = format!("{e:?}");
        assert!(d.contains("<redacted>") && !d.contains("00112233"), "{d}");
    }

    #[test]
    fn hex_round_trip() {
        let b: [u8; 16] = core::array::from_fn(|i| i as u8 * 17);
        assert_eq!(unhex::<16>(&hex(&b)), Some(b));
        assert_eq!(unhex::<2>("é1"), None);
        assert_eq!(unhex::<1>("+1"), None);
    }
}
