//! The one configuration of pontoon: every tunable, read from `PONTOON_*` variables
//! (the launcher turns its flags into the same variables). `pontoon info` prints
//! [`PARAMS`], so a parameter that is not listed there does not exist.

use std::time::Duration;

mod parse;

use parse::{choice, get, num, paths, relays, site, srun_ports, transports, within};
pub use parse::{ConfigError, MAX_RELAYS};

/// One documented parameter.
pub struct Param {
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

pub const PARAMS: &[Param] = &[
    Param {
        name: "PONTOON_EAGER_LIMIT",
        default: "65536",
        meaning: "messages up to this many bytes are sent eagerly (payload inline); larger ones use \
                  rendezvous (RTS/CTS), so an unexpected large message never buffers its payload",
    },
    Param {
        name: "PONTOON_WAN_EAGER_LIMIT",
        default: "8388608",
        meaning: "the eager limit towards a peer reached over a WAN lane (a round trip of 2 ms or more): \
                  there a rendezvous's extra round trip costs more than sending the message at once (a \
                  4 MiB bcast between two sites 20 ms apart: 44 ms eager, 90 ms by rendezvous); the \
                  eager credit (PONTOON_UNEXPECTED_CAP) still bounds what a receiver holds, and a message \
                  beyond the sender's credit goes by rendezvous, its fragments over every stream (must \
                  be the same on every rank)",
    },
    Param {
        name: "PONTOON_WAN_STREAMS",
        default: "auto",
        meaning: "TCP streams per WAN path: `auto` counts them from the path's round trip, the local \
                  NIC's speed and the kernel's socket-buffer limits (4 to 8), a number sets it (1 to 16; \
                  1: one stream, as on a LAN). With 3 or more, one stream carries eager messages and \
                  control frames and the others pull the fragments of large messages as they drain",
    },
    Param {
        name: "PONTOON_COALESCE_US",
        default: "500",
        meaning: "small messages (up to 1 KiB) to a peer over a WAN lane travel packed in one frame \
                  while they follow each other closely: a message waits at most this many \
                  microseconds (and at most a sixteenth of the lane's round trip) for others; a lone \
                  message leaves at once; never on LAN lanes; 0 turns coalescing off",
    },
    Param {
        name: "PONTOON_COALESCE_BYTES",
        default: "16384",
        meaning: "a batch of coalesced messages leaves once it holds about this many bytes \
                  (4096 to 65536)",
    },
    Param {
        name: "PONTOON_ENCRYPT",
        default: "wan",
        meaning: "which TCP lanes carry their bytes encrypted (AES-256-GCM, keys fresh per lane from \
                  the job secret and the handshake): `wan` those that cross a WAN (through a relay, \
                  punched through NATs, to another declared site, or with a round trip of 2 ms or \
                  more), `all` every one (then raw-Ethernet lanes are not used), `none` none. \
                  Shared memory never leaves the node",
    },
    Param {
        name: "PONTOON_PMI",
        default: "2",
        meaning: "the PMI wire protocol a rank started by srun --mpi=pmi2 or Hydra's mpiexec speaks \
                  first: 2, falling back to 1 when the process manager answers with version 1; 1 \
                  speaks PMI-1 from the start (docs/slurm.md)",
    },
    Param {
        name: "PONTOON_PMI_FENCE_TIMEOUT_S",
        default: "60",
        meaning: "how long a rank started by a PMI process manager waits at a key-value fence for the \
                  others before it asks for the job to end: a rank that exits before its fence would \
                  leave them waiting for ever, as srun does not end the step. Under srun without PMI, \
                  how long a task waits for task 0's rendezvous",
    },
    Param {
        name: "PONTOON_SRUN_PORTS",
        default: "20000-31999",
        meaning: "under srun without PMI (`--mpi=none`), the TCP ports task 0's rendezvous may listen \
                  on, as LOW-HIGH: the job's id picks 8 of them, and every task tries them in the same \
                  order (docs/slurm.md); set it to a range a site's firewall opens between its nodes",
    },
    Param {
        name: "PONTOON_BIN",
        default: "pontoon",
        meaning: "the `pontoon` program task 0 starts as the job's rendezvous under srun without PMI \
                  (looked up in PATH unless it contains a `/`)",
    },
    Param {
        name: "PONTOON_FRAG_SIZE",
        default: "524288",
        meaning: "rendezvous payload is sent in fragments of this many bytes, so small messages can \
                  overtake a large transfer on the same lane",
    },
    Param {
        name: "PONTOON_UNEXPECTED_CAP",
        default: "67108864",
        meaning: "bytes a rank holds at most for eager messages no receive has matched yet, shared equally \
                  among its peers: a sender whose share is spent sends rendezvous until the receiver \
                  catches up, so a flood of sends at a busy rank cannot exhaust its memory (must be the \
                  same on every rank)",
    },
    Param {
        name: "PONTOON_TRANSPORTS",
        default: "all",
        meaning: "the transports lanes may use, a comma list of `shm` (shared memory between ranks of \
                  one node), `tcp` and `eth` (raw Ethernet frames between ranks on one L2 segment: needs \
                  CAP_NET_RAW, else TCP carries everything; small messages go raw, larger ones and bulk by \
                  TCP), or `all`; e.g. `tcp` makes ranks of one node talk over loopback TCP and leaves \
                  raw Ethernet out (for tests and comparisons)",
    },
    Param {
        name: "PONTOON_SINGLE_COPY",
        default: "auto",
        meaning: "between two ranks of one node where a read at start-up showed it works (Yama \
                  ptrace_scope 0 or CAP_SYS_PTRACE, no seccomp filter forbidding it, one pid namespace), \
                  which messages the receiver reads straight out of the sender's memory \
                  (process_vm_readv, one copy) instead of through the shared-memory ring (two copies): \
                  `auto`, every rendezvous message (above PONTOON_EAGER_LIMIT; 1.6-2.8x the ring's \
                  osu_bw, osu_bibw and osu_latency from 128 KiB) and an eager one of 16 KiB or more that \
                  would wait behind a ring already holding as much while the peer sends too; `on`: also \
                  every eager one of 16 KiB or more (half osu_latency's time at 16-64 KiB, but the sender \
                  then waits for its receiver: two ranks that send each other such a message before \
                  receiving wait for each other, as with MPICH above its eager limit); `off`: never",
    },
    Param {
        name: "PONTOON_SPIN_US",
        default: "200",
        meaning:
            "a blocking call busy-polls this many microseconds before it sleeps in epoll; 0 sleeps at once \
                  (use 0 when ranks outnumber cores)",
    },
    Param {
        name: "PONTOON_YIELD",
        default: "auto",
        meaning: "`always`: a waiting rank yields its CPU between polls while it spins (sched_yield), so \
                  ranks sharing a CPU take turns instead of starving each other; `never`; `auto`: when \
                  the ranks on this node outnumber the CPUs they may use",
    },
    Param {
        name: "PONTOON_ASYNC_PROGRESS",
        default: "off",
        meaning: "`on`: a progress thread in each rank of a C program moves transfers and non-blocking \
                  collectives while the application computes (sleeping on the lanes when there is \
                  nothing to do); `auto`: when the node has a CPU to spare for it (fewer ranks than \
                  CPUs, ranks not pinned); `off`: progress only inside MPI calls",
    },
    Param {
        name: "PONTOON_SOCKBUF",
        default: "0",
        meaning: "TCP send/receive buffer size in bytes; 0 keeps the kernel's autotuning",
    },
    Param {
        name: "PONTOON_CONNECT_TIMEOUT_MS",
        default: "5000",
        meaning: "how long an operation waits for a connection to a peer, and a starting rank for one to \
                  the launcher (a silent address is tried again meanwhile), before it fails with the list of \
                  addresses tried; this and the two timeouts below are multiplied by the ranks per CPU on \
                  a node that runs more ranks than it has CPUs (a starved peer is slow, not gone)",
    },
    Param {
        name: "PONTOON_ATTEMPT_TIMEOUT_MS",
        default: "1000",
        meaning: "how long the TCP connect of one candidate address may take, and again its handshake \
                  once its turn comes",
    },
    Param {
        name: "PONTOON_LANE_TIMEOUT_MS",
        default: "10000",
        meaning: "a network lane whose path has acknowledged nothing for this long while data waited (a \
                  NIC or route gone) is closed: its transfers go on over the peer's other lanes, or the \
                  peer fails with the reason; a peer that is only busy still acknowledges",
    },
    Param {
        name: "PONTOON_STAGGER_MS",
        default: "100",
        meaning: "connects to a peer's candidate addresses start this far apart until one completes its \
                  handshake (at most three in flight); the handshake decides which reached the right rank",
    },
    Param {
        name: "PONTOON_IF_INCLUDE",
        default: "",
        meaning: "use only these interfaces or addresses: comma-separated names (`eth*` for a prefix) \
                  or CIDR prefixes; the launcher, the coordinator and the data path all obey it",
    },
    Param {
        name: "PONTOON_IF_EXCLUDE",
        default: "",
        meaning: "never use these interfaces or addresses (same syntax as PONTOON_IF_INCLUDE), e.g. \
                  `docker*,virbr*`",
    },
    Param {
        name: "PONTOON_SITE",
        default: "",
        meaning: "this rank's site (`pontoon run` sets it from a hostfile's `site=NAME`): private \
                  addresses of ranks in another known site are never tried",
    },
    Param {
        name: "PONTOON_RELAYS",
        default: "",
        meaning: "relays (`pontoon relay` on front-end nodes) this job may use: relays separated by `;`, \
                  each as a comma list of its ADDR:PORT (e.g. `198.51.100.1:7426,[2001:db8::1]:7426`); \
                  `pontoon run --relay HOST` and `--testbed` add the relays they start. A rank \
                  registers with every relay that sees its own address, and ranks that cannot reach \
                  it directly come in through one of them",
    },
    Param {
        name: "PONTOON_PATHS",
        default: "all",
        meaning: "the path kinds a first lane may take, a comma list of `direct`, `nat-proxy` (through \
                  the relay at the peer's site) and `two-proxy` (through ours, then theirs), and whether \
                  a relayed pair then punches a direct lane through both NATs (`punched`), or `all`; \
                  e.g. `two-proxy` to measure one scheme against another on the same hosts",
    },
    Param {
        name: "PONTOON_BIND",
        default: "none",
        meaning: "`core`: each rank pins itself to one CPU (local rank modulo the CPUs it may use); \
                  `core-by-rank`: the same by global rank, for hosts that share one machine's CPUs \
                  (testbed hosts); `none`: the kernel places ranks. `pontoon run --bind-to core` sets it",
    },
    Param {
        name: "PONTOON_COLL_BCAST_LONG",
        default: "524288",
        meaning: "bcast of this many bytes or more (with 3 ranks or more) scatters the data down a binomial \
                  tree, then runs a ring allgather; below, the whole message goes down the tree",
    },
    Param {
        name: "PONTOON_COLL_ALLREDUCE_LONG",
        default: "65536",
        meaning: "allreduce of this many bytes or more with a commutative operation uses Rabenseifner's \
                  reduce-scatter + allgather; below, recursive doubling",
    },
    Param {
        name: "PONTOON_COLL_ALLGATHER_LONG",
        default: "81920",
        meaning: "allgather whose result is this many bytes or more runs a ring; below, Bruck's algorithm",
    },
    Param {
        name: "PONTOON_COLL_ALLTOALL_SHORT",
        default: "256",
        meaning: "alltoall blocks of at most this many bytes, with 32 ranks or more, go by Bruck's algorithm \
                  (log2 p rounds, one message each, about half of the blocks per message); above, every \
                  transfer starts at once",
    },
    Param {
        name: "PONTOON_COLL_ALLTOALL_LONG",
        default: "32768",
        meaning: "alltoall blocks of this many bytes or more go by pairwise exchange (one peer at a time); \
                  below, every transfer starts at once",
    },
    Param {
        name: "PONTOON_COLL_GATHER_LONG",
        default: "65536",
        meaning: "gather/scatter blocks of this many bytes or more go straight between root and ranks; \
                  below, down a binomial tree",
    },
    Param {
        name: "PONTOON_COLL_SITE_PIECE",
        default: "1048576",
        meaning: "a long site-aware allgather crosses between sites in pieces of at least this many bytes (8 \
                  at most), each passed on within the site as soon as it arrived",
    },
    Param {
        name: "PONTOON_COLL_HIER",
        default: "1",
        meaning: "site-aware collectives (1): a communicator whose ranks sit at two or more sites (every rank's \
                  PONTOON_SITE, or else inferred from the round trips to the launcher and the networks on the \
                  endpoint cards) runs barrier, bcast, reduce, allreduce and allgather in \
                  levels (within each site, among one leader per site, within each site again) so that they \
                  cross between sites as few times as their algorithms allow; 0: the flat algorithms",
    },
    Param {
        name: "PONTOON_LOG",
        default: "warn",
        meaning: "log filter (tracing syntax, e.g. `info` or `pontoon_runtime=debug`); logs go to stderr",
    },
];

/// Which CPU a rank pins itself to, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bind {
    None,
    /// CPU number `local rank` among the allowed ones (modulo their count).
    ByLocalRank,
    /// CPU number `rank`: hosts that share one machine (testbed) must not pick the same.
    ByRank,
}

/// Which lanes carry their bytes encrypted (`PONTOON_ENCRYPT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encrypt {
    None,
    Wan,
    All,
}

/// Whether a spinning rank yields its CPU between polls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yield {
    Auto,
    Always,
    Never,
}

/// Whether a C program's ranks get a progress thread (`PONTOON_ASYNC_PROGRESS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncProgress {
    Auto,
    On,
    Off,
}

/// Parsed configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The transports lanes may use (`PONTOON_TRANSPORTS`), never empty.
    pub transports: Vec<transport::Transport>,
    pub eager_limit: u32,
    pub wan_eager_limit: u32,
    /// Speak PMI-1 to a PMI process manager from the start (`PONTOON_PMI=1`).
    pub pmi_v1_only: bool,
    /// Rendezvous messages within a node may be read in one copy (`PONTOON_SINGLE_COPY`).
    /// Which messages a node-local receiver reads in one copy; `None`: none (`off`).
    pub single_copy: Option<proto::SingleCopy>,
    /// How long a PMI fence waits for every rank (`PONTOON_PMI_FENCE_TIMEOUT_S`).
    pub pmi_fence_timeout: Duration,
    /// The ports task 0's rendezvous may use under srun without PMI (`PONTOON_SRUN_PORTS`).
    pub srun_ports: std::ops::RangeInclusive<u16>,
    /// The `pontoon` program (`PONTOON_BIN`).
    pub pontoon_bin: String,
    /// TCP streams per WAN path (`PONTOON_WAN_STREAMS`); `None`: counted per path.
    pub wan_streams: Option<u32>,
    /// Coalescing towards WAN peers: the longest wait (`PONTOON_COALESCE_US`, 0: off)
    /// and the batch size (`PONTOON_COALESCE_BYTES`).
    pub coalesce_us: u32,
    pub coalesce_bytes: u32,
    pub encrypt: Encrypt,
    pub frag_size: u32,
    pub unexpected_cap: u64,
    pub spin: Duration,
    pub yield_when_idle: Yield,
    pub async_progress: AsyncProgress,
    pub sockbuf: usize,
    pub connect_timeout: Duration,
    pub attempt_timeout: Duration,
    pub lane_timeout: Duration,
    /// How many ranks of this node share each of its CPUs (at least 1): the three
    /// timeouts above are this many times their settings, so that a rank starved of CPU
    /// by its neighbours is waited for instead of failed ([`Config::wait_longer`]).
    pub patience: u32,
    pub log: String,
    /// Pin each rank to one CPU.
    pub bind: Bind,
    pub stagger: Duration,
    pub policy: net::IfPolicy,
    pub site: Option<String>,
    /// Relays this job may use, each with its addresses (`PONTOON_RELAYS`).
    pub relays: Vec<Vec<std::net::SocketAddr>>,
    /// The path kinds a first lane may take (`PONTOON_PATHS`), never empty.
    pub paths: Vec<net::PathKind>,
    /// Collective algorithm switch points (bytes).
    pub coll_bcast_long: usize,
    pub coll_allreduce_long: usize,
    pub coll_allgather_long: usize,
    pub coll_alltoall_short: usize,
    pub coll_alltoall_long: usize,
    pub coll_gather_long: usize,
    pub coll_site_piece: usize,
    pub coll_hier: bool,
    /// Several threads of the program call in at once (the C library at
    /// `MPI_THREAD_MULTIPLE`): set by the program, not the environment.
    pub several_threads: bool,
}

impl Config {
    /// `ranks` ranks share `cpus` CPUs on this node: a handshake or an acknowledgement
    /// waits for a process that runs only every `ranks / cpus` turns, so each timeout
    /// grows by that factor. A node with a CPU per rank keeps the settings as they are.
    pub fn wait_longer(&mut self, ranks: usize, cpus: usize) {
        let factor = ranks.div_ceil(cpus.max(1)).clamp(1, 1 << 12) as u32;
        self.patience = factor;
        self.connect_timeout *= factor;
        self.attempt_timeout *= factor;
        self.lane_timeout *= factor;
    }

    /// Names the setting behind a timeout in an error: `PONTOON_CONNECT_TIMEOUT_MS`, and
    /// the factor it was multiplied by on a node with more ranks than CPUs.
    pub fn timeout_source(&self, var: &str) -> String {
        if self.patience > 1 {
            format!(
                "{var} × {}: this node runs up to {} ranks per CPU",
                self.patience, self.patience
            )
        } else {
            var.to_string()
        }
    }
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_lookup(&|k| std::env::var(k).ok())
    }

    /// Reads every parameter through `env` (a test passes a map).
    pub fn from_lookup(env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let eager_limit = within(env, "PONTOON_EAGER_LIMIT", 0..=1 << 24)?;
        let wan_eager_limit = within(env, "PONTOON_WAN_EAGER_LIMIT", 0..=1 << 24)?;
        let wan_streams = match get(env, "PONTOON_WAN_STREAMS").trim() {
            "auto" | "" => None,
            n => Some(
                n.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=16).contains(n))
                    .ok_or_else(|| ConfigError {
                        name: "PONTOON_WAN_STREAMS",
                        value: n.to_string(),
                        why: "must be `auto` or a number from 1 to 16".into(),
                    })?,
            ),
        };
        let encrypt = choice(
            env,
            "PONTOON_ENCRYPT",
            &[
                ("none", Encrypt::None),
                ("wan", Encrypt::Wan),
                ("", Encrypt::Wan),
                ("all", Encrypt::All),
            ],
        )?;
        let mut transports = transports(&get(env, "PONTOON_TRANSPORTS"))?;
        if encrypt == Encrypt::All {
            // Raw-Ethernet frames are authenticated, not encrypted.
            transports.retain(|&t| t != transport::Transport::Eth);
            if transports.is_empty() {
                return Err(ConfigError {
                    name: "PONTOON_TRANSPORTS",
                    value: get(env, "PONTOON_TRANSPORTS"),
                    why: "PONTOON_ENCRYPT=all leaves raw Ethernet out (its frames are authenticated, not \
                          encrypted): allow tcp too"
                        .into(),
                });
            }
        }
        use proto::SingleCopy;
        Ok(Config {
            pmi_v1_only: choice(env, "PONTOON_PMI", &[("1", true), ("2", false)])?,
            single_copy: choice(
                env,
                "PONTOON_SINGLE_COPY",
                &[
                    ("auto", Some(SingleCopy::Auto)),
                    ("", Some(SingleCopy::Auto)),
                    ("on", Some(SingleCopy::Always)),
                    ("off", None),
                ],
            )?,
            srun_ports: srun_ports(&get(env, "PONTOON_SRUN_PORTS"))?,
            pontoon_bin: get(env, "PONTOON_BIN"),
            pmi_fence_timeout: Duration::from_secs(num(env, "PONTOON_PMI_FENCE_TIMEOUT_S")?),
            transports,
            eager_limit,
            wan_eager_limit,
            wan_streams,
            coalesce_us: num(env, "PONTOON_COALESCE_US")?,
            coalesce_bytes: within(env, "PONTOON_COALESCE_BYTES", 4096..=65536)?,
            encrypt,
            frag_size: within(env, "PONTOON_FRAG_SIZE", 4096..=1 << 30)?,
            unexpected_cap: num(env, "PONTOON_UNEXPECTED_CAP")?,
            spin: Duration::from_micros(num(env, "PONTOON_SPIN_US")?),
            yield_when_idle: choice(
                env,
                "PONTOON_YIELD",
                &[
                    ("auto", Yield::Auto),
                    ("", Yield::Auto),
                    ("always", Yield::Always),
                    ("never", Yield::Never),
                ],
            )?,
            async_progress: choice(
                env,
                "PONTOON_ASYNC_PROGRESS",
                &[
                    ("off", AsyncProgress::Off),
                    ("", AsyncProgress::Off),
                    ("on", AsyncProgress::On),
                    ("auto", AsyncProgress::Auto),
                ],
            )?,
            sockbuf: num(env, "PONTOON_SOCKBUF")?,
            connect_timeout: Duration::from_millis(num(env, "PONTOON_CONNECT_TIMEOUT_MS")?),
            attempt_timeout: Duration::from_millis(num(env, "PONTOON_ATTEMPT_TIMEOUT_MS")?),
            lane_timeout: Duration::from_millis(num(env, "PONTOON_LANE_TIMEOUT_MS")?),
            patience: 1,
            log: get(env, "PONTOON_LOG"),
            coll_bcast_long: num(env, "PONTOON_COLL_BCAST_LONG")?,
            coll_allreduce_long: num(env, "PONTOON_COLL_ALLREDUCE_LONG")?,
            coll_allgather_long: num(env, "PONTOON_COLL_ALLGATHER_LONG")?,
            coll_alltoall_short: num(env, "PONTOON_COLL_ALLTOALL_SHORT")?,
            coll_alltoall_long: num(env, "PONTOON_COLL_ALLTOALL_LONG")?,
            coll_gather_long: num(env, "PONTOON_COLL_GATHER_LONG")?,
            coll_site_piece: num(env, "PONTOON_COLL_SITE_PIECE")?,
            coll_hier: num::<u8>(env, "PONTOON_COLL_HIER")? != 0,
            several_threads: false,
            stagger: Duration::from_millis(num(env, "PONTOON_STAGGER_MS")?),
            policy: net::IfPolicy::parse(&get(env, "PONTOON_IF_INCLUDE"), &get(env, "PONTOON_IF_EXCLUDE"))
                .map_err(|e| ConfigError {
                    name: e.var,
                    value: get(env, e.var),
                    why: e.why,
                })?,
            site: site(&get(env, "PONTOON_SITE"))?,
            relays: relays(&get(env, "PONTOON_RELAYS"))?,
            paths: paths(&get(env, "PONTOON_PATHS"))?,
            bind: choice(
                env,
                "PONTOON_BIND",
                &[
                    ("core", Bind::ByLocalRank),
                    ("core-by-rank", Bind::ByRank),
                    ("none", Bind::None),
                    ("", Bind::None),
                ],
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_parse_and_bad_values_name_the_variable() {
        let c = Config::from_lookup(&|_| None).unwrap();
        assert_eq!(c.eager_limit, 65536);
        assert_eq!((c.wan_eager_limit, c.wan_streams), (8 << 20, None));
        let streams = |v: &str| {
            Config::from_lookup(&|k| (k == "PONTOON_WAN_STREAMS").then(|| v.to_string()))
                .map(|c| c.wan_streams)
        };
        assert_eq!(streams("6").unwrap(), Some(6));
        assert!(streams("0")
            .unwrap_err()
            .to_string()
            .contains("PONTOON_WAN_STREAMS"));
        let e = Config::from_lookup(&|k| (k == "PONTOON_SPIN_US").then(|| "fast".to_string())).unwrap_err();
        assert!(e.to_string().contains("PONTOON_SPIN_US"));
    }

    #[test]
    fn transports_are_tcp_and_shm_by_default_and_named_ones_otherwise() {
        use transport::Transport;
        let t = |v: &str| {
            Config::from_lookup(&|k| (k == "PONTOON_TRANSPORTS").then(|| v.to_string())).map(|c| c.transports)
        };
        assert_eq!(
            Config::from_lookup(&|_| None).unwrap().transports,
            Transport::ALL.to_vec()
        );
        assert_eq!(t("all").unwrap(), Transport::ALL.to_vec());
        assert_eq!(t("eth,tcp").unwrap(), vec![Transport::Eth, Transport::Tcp]);
        assert_eq!(t("tcp").unwrap(), vec![Transport::Tcp]);
        assert_eq!(t(" shm , tcp,shm").unwrap(), vec![Transport::Shm, Transport::Tcp]);
        let e = t("ib").unwrap_err().to_string();
        assert!(
            e.contains("PONTOON_TRANSPORTS") && e.contains("tcp,shm,eth"),
            "{e}"
        );
    }

    #[test]
    fn timeouts_grow_with_the_ranks_sharing_each_cpu() {
        let mut c = Config::from_lookup(&|_| None).unwrap();
        let (connect, attempt) = (c.connect_timeout, c.attempt_timeout);
        c.wait_longer(4, 8);
        assert_eq!(
            (c.patience, c.connect_timeout),
            (1, connect),
            "a CPU per rank: as set"
        );
        assert_eq!(
            c.timeout_source("PONTOON_CONNECT_TIMEOUT_MS"),
            "PONTOON_CONNECT_TIMEOUT_MS"
        );
        let mut c = Config::from_lookup(&|_| None).unwrap();
        c.wait_longer(256, 2);
        assert_eq!(c.patience, 128);
        assert_eq!(c.attempt_timeout, attempt * 128);
        assert!(c.timeout_source("PONTOON_ATTEMPT_TIMEOUT_MS").contains("× 128"));
    }

    #[test]
    fn the_progress_thread_is_off_unless_asked_for() {
        let c = |v: &str| {
            let v = v.to_string();
            Config::from_lookup(&|k| (k == "PONTOON_ASYNC_PROGRESS").then(|| v.clone()))
                .map(|c| c.async_progress)
        };
        assert_eq!(
            Config::from_lookup(&|_| None).unwrap().async_progress,
            AsyncProgress::Off
        );
        assert_eq!(c("on").unwrap(), AsyncProgress::On);
        assert_eq!(c("auto").unwrap(), AsyncProgress::Auto);
        assert_eq!(c("off").unwrap(), AsyncProgress::Off);
        assert!(c("1").unwrap_err().to_string().contains("PONTOON_ASYNC_PROGRESS"));
    }

    #[test]
    fn one_copy_within_a_node_is_for_a_backed_up_ring_unless_asked_otherwise() {
        let c = |v: Option<&str>| {
            Config::from_lookup(&|k| {
                (k == "PONTOON_SINGLE_COPY")
                    .then(|| v.map(str::to_string))
                    .flatten()
            })
            .map(|c| c.single_copy)
        };
        use proto::SingleCopy::{Always, Auto};
        assert_eq!(c(None).unwrap(), Some(Auto));
        assert_eq!(c(Some("auto")).unwrap(), Some(Auto));
        assert_eq!(c(Some("on")).unwrap(), Some(Always));
        assert_eq!(c(Some("off")).unwrap(), None);
        assert!(c(Some("yes"))
            .unwrap_err()
            .to_string()
            .contains("PONTOON_SINGLE_COPY"));
    }

    #[test]
    fn yielding_is_automatic_unless_forced() {
        let y = |v: &str| {
            Config::from_lookup(&|k| (k == "PONTOON_YIELD").then(|| v.to_string())).map(|c| c.yield_when_idle)
        };
        assert_eq!(
            Config::from_lookup(&|_| None).unwrap().yield_when_idle,
            Yield::Auto
        );
        assert_eq!(y("always").unwrap(), Yield::Always);
        assert_eq!(y("never").unwrap(), Yield::Never);
        assert!(y("sometimes").unwrap_err().to_string().contains("PONTOON_YIELD"));
    }

    #[test]
    fn relays_are_lists_of_addresses() {
        let r = |v: &str| {
            Config::from_lookup(&|k| (k == "PONTOON_RELAYS").then(|| v.to_string())).map(|c| c.relays)
        };
        assert!(r("").unwrap().is_empty());
        let two = r("198.51.100.1:7426,[2001:db8::1]:7426; 198.51.100.2:9 ;").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0][1].to_string(), "[2001:db8::1]:7426");
        let e = r("198.51.100.1").unwrap_err().to_string();
        assert!(e.contains("PONTOON_RELAYS") && e.contains("ADDR:PORT"), "{e}");
        assert!(r(&"198.51.100.1:1;".repeat(MAX_RELAYS + 1)).is_err());
    }

    #[test]
    fn path_kinds_are_all_by_default_and_named_ones_otherwise() {
        use net::PathKind;
        let p = |v: &str| {
            Config::from_lookup(&|k| (k == "PONTOON_PATHS").then(|| v.to_string())).map(|c| c.paths)
        };
        assert_eq!(p("all").unwrap().len(), 4);
        assert_eq!(
            p("two-proxy, nat-proxy").unwrap(),
            [PathKind::TwoProxy, PathKind::NatProxy]
        );
        assert_eq!(
            p("nat-proxy,punched").unwrap(),
            [PathKind::NatProxy, PathKind::Punched]
        );
        let e = p("hairpin").unwrap_err().to_string();
        assert!(e.contains("PONTOON_PATHS") && e.contains("nat-proxy"), "{e}");
    }

    #[test]
    fn binding_by_local_or_global_rank() {
        let bind =
            |v: &str| Config::from_lookup(&|k| (k == "PONTOON_BIND").then(|| v.to_string())).map(|c| c.bind);
        assert_eq!(bind("core").unwrap(), Bind::ByLocalRank);
        assert_eq!(bind("core-by-rank").unwrap(), Bind::ByRank);
        assert_eq!(bind("none").unwrap(), Bind::None);
        assert!(bind("socket").unwrap_err().to_string().contains("core-by-rank"));
    }

    #[test]
    fn srun_ports_are_a_range_of_unprivileged_ports() {
        let ports = |v: &str| {
            Config::from_lookup(&|k| (k == "PONTOON_SRUN_PORTS").then(|| v.to_string())).map(|c| c.srun_ports)
        };
        assert_eq!(Config::from_lookup(&|_| None).unwrap().srun_ports, 20000..=31999);
        assert_eq!(ports(" 40000 - 40010 ").unwrap(), 40000..=40010);
        assert_eq!(ports("5000-5000").unwrap(), 5000..=5000);
        for bad in ["5000", "22-80", "6000-5000", "1-70000", "a-b"] {
            let e = ports(bad).unwrap_err().to_string();
            assert!(
                e.contains("PONTOON_SRUN_PORTS") && e.contains("LOW-HIGH"),
                "{bad}: {e}"
            );
        }
    }
}
