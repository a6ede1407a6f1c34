//! The rank side of PMI: how a rank started by Slurm's `srun --mpi=pmi2` or by Hydra's
//! `mpiexec` (MPICH) finds its rank and exchanges endpoint cards, in place of
//! pontoon's coordinator. No libpmi is linked: the wire protocols are spoken here.
//!
//! The process manager passes a connected socket as `PMI_FD`. PMI-2's wire protocol is
//! tried first (a PMI-1 `init` asking for version 2, then length-prefixed `key=value;`
//! commands); a server that answers with version 1 is spoken to in PMI-1's
//! (`cmd=… key=value` lines). `PONTOON_PMI=1` asks for PMI-1 from the start.
//!
//! Values go as hex, so that no byte can clash with either protocol's separators, and a
//! value longer than the server's limit (`get_maxes`, or PMI-2's 1024) is split: key K
//! holds `N:` and the first piece, keys `K.1` … `K.N-1` the rest.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

mod mapping;
#[cfg(test)]
mod tests;

pub use mapping::ProcessMapping;

/// What a PMI process manager sets for every rank (read when `PONTOON_RANK` is not set).
pub const ENV_VARS: &[(&str, &str)] = &[
    (
        "PMI_FD",
        "the connected socket to the process manager's PMI server",
    ),
    (
        "PMI_RANK",
        "rank of this process (PMI-1; PMI-2 says it in fullinit's answer)",
    ),
    ("PMI_SIZE", "number of ranks (PMI-1)"),
    ("PMI_JOBID", "the job's name, which Slurm wants back in fullinit"),
];

/// PMI-2's limit on a value (`PMI2_MAX_VALLEN`); PMI-1 servers say theirs.
const PMI2_VALUE_MAX: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum PmiError {
    #[error("PMI_FD: {0}")]
    Socket(io::Error),
    #[error("the process manager's PMI socket failed: {0}")]
    Io(#[from] io::Error),
    #[error("the process manager closed its PMI socket (was the job step ended?)")]
    Closed,
    #[error("the process manager answered {command:?} with {answer:?}")]
    Refused { command: String, answer: String },
    #[error(
        "not every rank reached the PMI fence within {0:?} (PONTOON_PMI_FENCE_TIMEOUT_S): a rank \
         probably exited or crashed before it got there (the process manager's output says which); \
         ending the job"
    )]
    FenceTimeout(std::time::Duration),
    #[error("{0} is {1:?}, not a number")]
    BadNumber(&'static str, String),
    #[error("value of {key:?} is malformed: {why}")]
    BadValue { key: String, why: String },
}

/// Which wire protocol the server speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wire {
    /// PMI-1: lines of `cmd=… key=value`, keys in the named key-value space.
    V1 { kvsname: String },
    /// PMI-2: a 6-character decimal length, then `cmd=…;key=value;…`.
    V2,
}

/// A connection to the process manager's PMI server.
pub struct PmiClient {
    reader: BufReader<UnixStream>,
    wire: Wire,
    pub rank: u32,
    pub size: u32,
    /// The job as the process manager names it (`SLURM_JOB_ID.STEP`, Hydra's kvs name).
    pub job_name: String,
    /// Hex characters that fit in one value.
    piece: usize,
    /// A fence was asked for and its answer not read yet: until when it may take.
    fence_deadline: Option<std::time::Instant>,
    /// How long [`PmiClient::fence`] waits for every rank.
    pub fence_timeout: std::time::Duration,
}

impl std::fmt::Debug for PmiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PmiClient")
            .field("wire", &self.wire)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("job_name", &self.job_name)
            .finish()
    }
}

/// One answer: its `key=value` fields in order (the command too, as `cmd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer(Vec<(String, String)>);

impl Answer {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `rc=0`, or no `rc` at all (Hydra's `barrier_out` and `finalize_ack` have none).
    fn ok(&self) -> bool {
        self.get("rc").is_none_or(|rc| rc == "0")
    }

    /// A PMI-2 lookup's value, if it found one.
    fn found(&self) -> Option<String> {
        (self.get("found") == Some("TRUE")).then(|| self.get("value").unwrap_or_default().to_string())
    }

    /// Parses a PMI-1 line: words `key=value` separated by spaces.
    pub fn parse_v1(line: &str) -> Answer {
        Answer(
            line.split_ascii_whitespace()
                .filter_map(|w| w.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    /// Parses a PMI-2 body: `key=value;` pairs, `;;` standing for a `;` inside a value.
    pub fn parse_v2(body: &str) -> Answer {
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            if c == ';' {
                if chars.peek() == Some(&';') {
                    chars.next();
                    field.push(';');
                    continue;
                }
                if let Some((k, v)) = field.split_once('=') {
                    fields.push((k.to_string(), v.to_string()));
                }
                field.clear();
            } else {
                field.push(c);
            }
        }
        if let Some((k, v)) = field.split_once('=') {
            fields.push((k.to_string(), v.to_string()));
        }
        Answer(fields)
    }
}

/// A PMI-2 command: `cmd=NAME;` then the fields. PMI-2 escapes a `;` in a value as
/// `;;`, but Slurm does not unescape it, so values carry none (ours are hex; an abort's
/// message has its `;` turned into `,`).
fn format_v2(cmd: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut body = format!("cmd={cmd};");
    for (k, v) in fields {
        body.push_str(&format!("{k}={};", v.replace(';', ",")));
    }
    let mut out = format!("{:<6}", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

fn number(name: &'static str, s: Option<&str>) -> Result<u32, PmiError> {
    let s = s.unwrap_or_default();
    s.parse().map_err(|_| PmiError::BadNumber(name, s.to_string()))
}

impl PmiClient {
    /// Connects to the process manager named by the environment: `Ok(None)` when no
    /// `PMI_FD` is set (not started by a PMI process manager). `cfg` says which wire
    /// protocol to try first and how long a fence may take.
    pub fn from_env(cfg: &crate::boot::config::Config) -> Result<Option<PmiClient>, PmiError> {
        let Some(fd) = std::env::var_os("PMI_FD") else {
            return Ok(None);
        };
        let fd: i32 = fd
            .to_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| PmiError::BadNumber("PMI_FD", fd.to_string_lossy().into()))?;
        // Children must neither inherit the socket (it is close-on-exec) nor believe
        // they have one.
        std::env::remove_var("PMI_FD");
        let stream = transport::inherited::adopt_socket(fd).map_err(PmiError::Socket)?;
        let rank = std::env::var("PMI_RANK").ok();
        let size = std::env::var("PMI_SIZE").ok();
        let jobid = std::env::var("PMI_JOBID").ok();
        Self::start(
            stream,
            rank.as_deref(),
            size.as_deref(),
            jobid.as_deref(),
            cfg.pmi_v1_only,
        )
        .map(|client| {
            Some(PmiClient {
                fence_timeout: cfg.pmi_fence_timeout,
                ..client
            })
        })
    }

    /// Says `init` on `stream` and learns rank, size and the job's name. `rank`, `size`
    /// and `jobid` are what the environment said (`PMI_RANK`, `PMI_SIZE`, `PMI_JOBID`).
    pub fn start(
        stream: UnixStream,
        rank: Option<&str>,
        size: Option<&str>,
        jobid: Option<&str>,
        v1_only: bool,
    ) -> Result<PmiClient, PmiError> {
        let mut client = PmiClient {
            reader: BufReader::new(stream),
            wire: Wire::V1 {
                kvsname: String::new(),
            },
            rank: 0,
            size: 0,
            job_name: String::new(),
            piece: PMI2_VALUE_MAX - 2,
            fence_deadline: None,
            fence_timeout: std::time::Duration::from_secs(60),
        };
        let version = if v1_only { 1 } else { 2 };
        let init = format!("cmd=init pmi_version={version} pmi_subversion={}", 2 - version);
        let answer = client.ask_v1(&init, "response_to_init")?;
        if answer.get("pmi_version") == Some("2") && version == 2 {
            client.wire = Wire::V2;
            let mut fields = vec![("pmirank", rank.unwrap_or("0")), ("threaded", "FALSE")];
            // Slurm refuses a fullinit without the job id it gave.
            if let Some(j) = jobid {
                fields.insert(0, ("pmijobid", j));
            }
            let full = client.ask_v2("fullinit", &fields)?;
            client.rank = number("rank", full.get("rank"))?;
            client.size = number("size", full.get("size"))?;
            client.job_name = client
                .ask_v2("job-getid", &[])?
                .get("jobid")
                .unwrap_or_default()
                .into();
        } else {
            client.rank = number("PMI_RANK", rank)?;
            client.size = number("PMI_SIZE", size)?;
            let maxes = client.ask_v1("cmd=get_maxes", "maxes")?;
            let vallen = number("vallen_max", maxes.get("vallen_max"))? as usize;
            // Room for a C server's terminating NUL; an even count of hex digits.
            client.piece = (vallen.saturating_sub(2) & !1).max(16);
            let kvsname = client.ask_v1("cmd=get_my_kvsname", "my_kvsname")?;
            let kvsname = kvsname.get("kvsname").unwrap_or_default().to_string();
            client.job_name = kvsname.clone();
            client.wire = Wire::V1 { kvsname };
        }
        if client.rank >= client.size {
            return Err(PmiError::BadValue {
                key: "rank".into(),
                why: format!("rank {} of a job of {}", client.rank, client.size),
            });
        }
        Ok(client)
    }

    pub fn is_v2(&self) -> bool {
        self.wire == Wire::V2
    }

    fn stream(&mut self) -> &mut UnixStream {
        self.reader.get_mut()
    }

    /// Sends a PMI-1 line and reads the answer, which must be `cmd=expect` with rc 0.
    fn ask_v1(&mut self, line: &str, expect: &str) -> Result<Answer, PmiError> {
        self.stream().write_all(format!("{line}\n").as_bytes())?;
        let answer = self.read_v1()?;
        Self::check(line, answer, expect)
    }

    fn read_v1(&mut self) -> Result<Answer, PmiError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(PmiError::Closed);
        }
        Ok(Answer::parse_v1(&line))
    }

    /// Sends a PMI-2 command and reads the answer, which must be `CMD-response` with rc 0.
    fn ask_v2(&mut self, cmd: &str, fields: &[(&str, &str)]) -> Result<Answer, PmiError> {
        self.stream().write_all(&format_v2(cmd, fields))?;
        let answer = self.read_v2()?;
        Self::check(cmd, answer, &format!("{cmd}-response"))
    }

    fn read_v2(&mut self) -> Result<Answer, PmiError> {
        let mut len = [0u8; 6];
        self.reader.read_exact(&mut len).map_err(closed)?;
        let len = std::str::from_utf8(&len).unwrap_or_default().trim();
        let len: usize = len
            .parse()
            .map_err(|_| PmiError::BadNumber("a PMI-2 length", len.to_string()))?;
        let mut body = vec![0u8; len];
        self.reader.read_exact(&mut body).map_err(closed)?;
        Ok(Answer::parse_v2(&String::from_utf8_lossy(&body)))
    }

    fn check(command: &str, answer: Answer, expect: &str) -> Result<Answer, PmiError> {
        if answer.get("cmd") == Some(expect) && answer.ok() {
            Ok(answer)
        } else {
            Err(PmiError::Refused {
                command: command.to_string(),
                answer: format!("{:?}", answer.0),
            })
        }
    }

    fn put_raw(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        match self.wire.clone() {
            Wire::V2 => self
                .ask_v2("kvs-put", &[("key", key), ("value", value)])
                .map(drop),
            Wire::V1 { kvsname } => self
                .ask_v1(
                    &format!("cmd=put kvsname={kvsname} key={key} value={value}"),
                    "put_result",
                )
                .map(drop),
        }
    }

    fn get_raw(&mut self, key: &str) -> Result<Option<String>, PmiError> {
        match self.wire.clone() {
            Wire::V2 => Ok(self.ask_v2("kvs-get", &[("srcid", "-1"), ("key", key)])?.found()),
            Wire::V1 { kvsname } => {
                self.stream()
                    .write_all(format!("cmd=get kvsname={kvsname} key={key}\n").as_bytes())?;
                // A missing key is an rc other than 0 (Slurm 1, Hydra -1).
                let a = self.read_v1()?;
                if a.get("cmd") != Some("get_result") {
                    return Err(PmiError::Refused {
                        command: format!("get {key}"),
                        answer: format!("{:?}", a.0),
                    });
                }
                Ok(a.ok().then(|| a.get("value").unwrap_or_default().to_string()))
            }
        }
    }

    /// Publishes `value` under `key` for the next fence.
    pub fn put(&mut self, key: &str, value: &[u8]) -> Result<(), PmiError> {
        let hex = crate::boot::jobenv::hex(value);
        let pieces: Vec<&str> = if hex.is_empty() {
            vec![""]
        } else {
            hex.as_bytes()
                .chunks(self.piece.saturating_sub(12))
                .map(|c| std::str::from_utf8(c).expect("hex is ASCII"))
                .collect()
        };
        self.put_raw(key, &format!("{}:{}", pieces.len(), pieces[0]))?;
        for (i, p) in pieces.iter().enumerate().skip(1) {
            self.put_raw(&format!("{key}.{i}"), p)?;
        }
        Ok(())
    }

    /// The value another rank put under `key` before the last fence; `None` if none did.
    pub fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, PmiError> {
        let Some(first) = self.get_raw(key)? else {
            return Ok(None);
        };
        let bad = |why: &str| PmiError::BadValue {
            key: key.to_string(),
            why: why.to_string(),
        };
        let (count, head) = first.split_once(':').ok_or_else(|| bad("no piece count"))?;
        let count: usize = count.parse().map_err(|_| bad("piece count is not a number"))?;
        let mut hex = head.to_string();
        for i in 1..count {
            hex.push_str(
                &self
                    .get_raw(&format!("{key}.{i}"))?
                    .ok_or_else(|| bad("a piece is missing"))?,
            );
        }
        crate::boot::jobenv::unhex_any(&hex)
            .map(Some)
            .ok_or_else(|| bad("not hex"))
    }

    /// A job attribute of the process manager (PMI-2 `info-getjobattr`; PMI-1 keeps
    /// them in the key-value space), e.g. `PMI_process_mapping`.
    pub fn job_attr(&mut self, name: &str) -> Result<Option<String>, PmiError> {
        match self.wire {
            Wire::V2 => Ok(self.ask_v2("info-getjobattr", &[("key", name)])?.found()),
            Wire::V1 { .. } => self.get_raw(name),
        }
    }

    /// Waits until every rank has called `fence`; what they put before is then readable.
    pub fn fence(&mut self) -> Result<(), PmiError> {
        self.start_fence()?;
        while !self.fence_reached()? {
            self.wait_readable(std::time::Duration::from_millis(100))?;
        }
        Ok(())
    }

    /// Whether the socket has something to read within `limit`.
    fn wait_readable(&self, limit: std::time::Duration) -> Result<bool, PmiError> {
        let limit = rustix::time::Timespec::try_from(limit).unwrap_or_default();
        let mut fds = [rustix::event::PollFd::new(
            self.reader.get_ref(),
            rustix::event::PollFlags::IN,
        )];
        Ok(rustix::event::poll(&mut fds, Some(&limit)).map_err(io::Error::from)? > 0)
    }

    /// Asks for a fence without waiting for it (see [`PmiClient::fence_reached`]).
    pub fn start_fence(&mut self) -> Result<(), PmiError> {
        match self.wire {
            Wire::V2 => self.stream().write_all(&format_v2("kvs-fence", &[]))?,
            Wire::V1 { .. } => self.stream().write_all(b"cmd=barrier_in\n")?,
        }
        self.fence_deadline = Some(std::time::Instant::now() + self.fence_timeout);
        Ok(())
    }

    pub fn fence_pending(&self) -> bool {
        self.fence_deadline.is_some()
    }

    /// Whether the fence asked for has been reached by every rank; does not block
    /// unless its answer is partly read.
    /// A rank that exits before its fence leaves the others waiting for ever (srun does
    /// not end the step), so once the fence has taken `fence_timeout` this rank asks for
    /// the job to end and returns the error.
    pub fn fence_reached(&mut self) -> Result<bool, PmiError> {
        let Some(deadline) = self.fence_deadline else {
            return Ok(true);
        };
        if self.reader.buffer().is_empty() && !self.wait_readable(std::time::Duration::ZERO)? {
            if std::time::Instant::now() < deadline {
                return Ok(false);
            }
            let e = PmiError::FenceTimeout(self.fence_timeout);
            let _ = self.abort(1, &e.to_string());
            return Err(e);
        }
        self.finish_fence()?;
        Ok(true)
    }

    fn finish_fence(&mut self) -> Result<(), PmiError> {
        self.fence_deadline = None;
        match self.wire {
            Wire::V2 => Self::check("kvs-fence", self.read_v2()?, "kvs-fence-response").map(drop),
            Wire::V1 { .. } => Self::check("barrier_in", self.read_v1()?, "barrier_out").map(drop),
        }
    }

    /// Tells the process manager to end the whole job (MPI_Abort).
    pub fn abort(&mut self, code: i32, message: &str) -> Result<(), PmiError> {
        match self.wire {
            Wire::V2 => self
                .stream()
                .write_all(&format_v2("abort", &[("isworld", "TRUE"), ("msg", message)]))?,
            Wire::V1 { .. } => self
                .stream()
                .write_all(format!("cmd=abort exitcode={code}\n").as_bytes())?,
        }
        Ok(())
    }

    /// Says goodbye; the process manager then expects this process to exit.
    pub fn finalize(&mut self) -> Result<(), PmiError> {
        match self.wire {
            Wire::V2 => self.ask_v2("finalize", &[]).map(drop),
            Wire::V1 { .. } => self.ask_v1("cmd=finalize", "finalize_ack").map(drop),
        }
    }

    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.reader.get_ref().as_fd()
    }
}

/// An end of file in the middle of an answer is the server going away.
fn closed(e: io::Error) -> PmiError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        PmiError::Closed
    } else {
        PmiError::Io(e)
    }
}
