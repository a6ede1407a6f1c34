//! Start-up: from the launcher's environment, a PMI process manager or srun to a
//! [`Job`] (who this rank is, the rendezvous, every rank's endpoint card) and the
//! fabrics' start-up state (listening sockets, shared-memory socket, raw-Ethernet ports,
//! relay registrations), which the event loop receives whole ([`Started`]).

pub mod config;
pub mod control;
pub mod jobenv;
pub mod pmi;
pub(crate) mod rendezvous;
pub mod srun;

use net::{CardTable, EndpointCard};
use proto::handshake::Identity;
use proto::{EngineConfig, Rank};
use transport::Transport;

use crate::fabric::eth::wireup::EthWireup;
use crate::fabric::shm::Shm;
use crate::fabric::tcp::wireup::Listeners;
use crate::fabric::tcp::Tcp;
use crate::fabric::Fabrics;
use config::{Bind, Config, Yield};
use control::ControlClient;
use jobenv::JobEnv;
use rendezvous::Rendezvous;

/// Who this rank is among whom, as start-up found out.
pub(crate) struct Job {
    pub id: Identity,
    /// Endpoint cards of every rank (this one's too), from the init fence.
    pub cards: CardTable,
    /// Each rank's site as the cards show it, where none was declared (`net::sites`).
    pub inferred_sites: Option<Vec<String>>,
    /// Whether any rank has a site (declared or inferred): without, a communicator's
    /// collectives need not look up each member's.
    pub sited: bool,
    /// The coordinator or the PMI process manager (none for a singleton).
    pub rendezvous: Option<Rendezvous>,
}

impl Job {
    fn new(id: Identity, cards: CardTable, rendezvous: Option<Rendezvous>) -> Job {
        let inferred_sites = net::sites::infer(&cards);
        let sited = inferred_sites.is_some() || cards.heads().iter().any(|c| c.site.is_some());
        if let (Some(sites), 0) = (&inferred_sites, id.rank) {
            let distinct: std::collections::BTreeSet<&String> = sites.iter().collect();
            tracing::info!("sites inferred from the endpoint cards: {distinct:?}");
        }
        Job {
            id,
            cards,
            inferred_sites,
            sited,
            rendezvous,
        }
    }
}

/// Everything start-up hands to the event loop.
pub(crate) struct Started {
    pub cfg: Config,
    pub job: Job,
    pub engine: EngineConfig,
    /// Each transport's wire-up, its sockets bound.
    pub fabrics: Fabrics,
    /// Give the CPU away between idle polls (ranks outnumber CPUs).
    pub yield_when_idle: bool,
    /// The node has a CPU for a progress thread: fewer ranks than CPUs, ranks not
    /// pinned (`PONTOON_ASYNC_PROGRESS=auto`).
    pub spare_cpu: bool,
}

/// Logs to stderr, filtered by `PONTOON_LOG` (a program may have installed its own).
fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .try_init();
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    use rustix::thread::{sched_getaffinity, CpuSet};
    match sched_getaffinity(None) {
        Ok(allowed) => (0..CpuSet::MAX_CPU).filter(|c| allowed.is_set(*c)).collect(),
        Err(_) => Vec::new(),
    }
}

/// Pins this process to one of the CPUs it may use, chosen by its local rank.
fn bind_to_core(index: u32) {
    use rustix::thread::{sched_setaffinity, CpuSet};
    let cpus = allowed_cpus();
    if cpus.is_empty() {
        return;
    }
    let mut one = CpuSet::new();
    one.set(cpus[index as usize % cpus.len()]);
    if let Err(e) = sched_setaffinity(None, &one) {
        tracing::warn!("rank cannot pin itself to a CPU (PONTOON_BIND=core): {e}");
    }
}

fn engine_config(cfg: &Config) -> EngineConfig {
    EngineConfig {
        eager_limit: cfg.eager_limit,
        wan_eager_limit: cfg.wan_eager_limit,
        frag_size: cfg.frag_size,
        // Two fragments: one being written while the next waits, so a lane never
        // idles between fills, yet control frames queue behind little.
        lane_queue: 2 * u64::from(cfg.frag_size),
        unexpected_cap: cfg.unexpected_cap,
        coalesce_delay_ns: u64::from(cfg.coalesce_us) * 1000,
        coalesce_bytes: cfg.coalesce_bytes,
        single_copy: cfg.single_copy.unwrap_or_default(),
    }
}

/// A job of one rank: no launcher, no peers.
fn singleton(cfg: Config) -> Started {
    let id = Identity {
        job_id: [0; 16],
        secret: [0; 32],
        rank: 0,
        size: 1,
    };
    let rank: Rank = 0;
    Started {
        engine: engine_config(&cfg),
        cfg,
        job: Job::new(id, CardTable::default(), None),
        fabrics: Fabrics {
            tcp: Tcp::new(rank, None, Vec::new(), Vec::new()),
            shm: Shm::off(),
            eth: EthWireup::default(),
        },
        yield_when_idle: false,
        spare_cpu: allowed_cpus().len() > 1,
    }
}

/// Starts this rank: from the launcher's environment, a PMI process manager, srun, or
/// as a single rank; returns what the event loop needs, or why start-up failed.
pub(crate) fn start() -> Result<Started, String> {
    let mut cfg = Config::from_env().map_err(|e| e.to_string())?;
    init_logging(&cfg.log);
    let env = JobEnv::from_env().map_err(|e| e.to_string())?;
    let mut pmi = match env {
        Some(_) => None,
        None => pmi::PmiClient::from_env(&cfg)
            .map_err(|e| format!("started by a PMI process manager (PMI_FD is set), but: {e}"))?,
    };
    let mut hosted = None;
    let mut env = match (env, pmi.as_mut()) {
        (Some(env), _) => env,
        (None, Some(pmi)) => rendezvous::pmi_job(pmi).map_err(|e| format!("rank {}: PMI: {e}", pmi.rank))?,
        (None, None) => match srun::SrunTask::from_env(&|k| std::env::var(k).ok()) {
            Some(task) => {
                let task = task.map_err(|e| format!("started by srun without PMI, but {e}"))?;
                let (env, rendezvous) = srun::join(&task, &cfg)?;
                hosted = rendezvous;
                env
            }
            None => return Ok(singleton(cfg)),
        },
    };
    // Ranks that outnumber the CPUs give theirs away while they wait (before
    // binding narrows what this process may use).
    let cpus = allowed_cpus().len().max(1);
    let yield_when_idle = match cfg.yield_when_idle {
        Yield::Always => true,
        Yield::Never => false,
        Yield::Auto => env.local_size as usize > cpus,
    };
    let spare_cpu = (env.local_size as usize) < cpus && cfg.bind == Bind::None;
    cfg.wait_longer(env.local_size as usize, cpus);
    match cfg.bind {
        Bind::None => {}
        Bind::ByLocalRank => bind_to_core(env.local_rank),
        Bind::ByRank => bind_to_core(env.rank),
    }
    let ifaces = net::interfaces();
    let local = net::iface::allowed_addresses(&ifaces, &cfg.policy);
    let (mut rendezvous, seen_from, control_rtt_us) = match pmi {
        Some(mut pmi) => {
            rendezvous::share_secret(&mut pmi, &mut env)
                .map_err(|e| format!("rank {}: PMI: {e}", env.rank))?;
            (Rendezvous::Pmi(pmi), None, None)
        }
        None => {
            let client = ControlClient::connect_from(
                &env,
                &local,
                &cfg.relays,
                cfg.attempt_timeout,
                cfg.connect_timeout,
            )
            .map_err(|e| format!("rank {}: cannot reach the launcher's coordinator: {e}", env.rank))?;
            let seen_from = client.seen_from().ip();
            let rtt_us = client
                .round_trip()
                .map(|d| d.as_micros().min(u128::from(u32::MAX)) as u32);
            let rendezvous = Rendezvous::Launcher {
                client,
                epoch: 0,
                _hosted: hosted,
            };
            (rendezvous, Some(seen_from), rtt_us)
        }
    };
    let listeners = Listeners::bind(&local, cfg.sockbuf)
        .map_err(|e| format!("rank {}: cannot open a listening socket: {e}", env.rank))?;
    let shm = Shm::bind(cfg.transports.contains(&Transport::Shm), &env.job_id, env.rank);
    let mut card = EndpointCard::new(
        &ifaces,
        &cfg.policy,
        net::node_id(),
        cfg.site.clone(),
        listeners.ports(),
    );
    // Raw sockets (and their receive rings) only where a peer may be on another node.
    let eth = if cfg.transports.contains(&Transport::Eth) && env.local_size < env.size {
        EthWireup::open(&card.ifaces, env.rank)
    } else {
        EthWireup::default()
    };
    eth.mark_card(&mut card);
    let own: Vec<std::net::IpAddr> = local.iter().map(|(ip, _, _)| *ip).collect();
    let registered = transport::relay::register_all(
        &cfg.relays,
        &env.secret,
        env.rank,
        listeners.ports(),
        &own,
        cfg.attempt_timeout,
    );
    for why in &registered.refused {
        tracing::info!("rank {}: not registered with {why}", env.rank);
    }
    for r in &registered.registrations {
        tracing::info!("rank {}: registered with the relay at {}", env.rank, r.via);
    }
    card.relays = registered.registrations.iter().map(|r| r.card_entry()).collect();
    card.seen_from = seen_from;
    card.control_rtt_us = control_rtt_us;
    let setup =
        |e: &dyn std::fmt::Display| format!("rank {}: wire-up through the launcher failed: {e}", env.rank);
    let all = rendezvous
        .exchange(env.rank, env.size, "card", &card.encode())
        .map_err(|e| setup(&e))?;
    let cards = CardTable::from_encoded(all).map_err(|e| setup(&e))?;
    let id = Identity {
        job_id: env.job_id,
        secret: env.secret,
        rank: env.rank,
        size: env.size,
    };
    Ok(Started {
        engine: engine_config(&cfg),
        cfg,
        job: Job::new(id, cards, Some(rendezvous)),
        fabrics: Fabrics {
            tcp: Tcp::new(
                env.rank,
                Some(listeners),
                registered.registrations,
                registered.reflections,
            ),
            shm,
            eth,
        },
        yield_when_idle,
        spare_cpu,
    })
}
