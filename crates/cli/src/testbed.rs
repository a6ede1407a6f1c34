//! `pontoon testbed …`: the command-line face of the `testbed` crate.

use clap::{Args, Subcommand};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;
use testbed::topology::WanImpairment;
use testbed::{PresetOptions, Testbed, Topology};

#[derive(Subcommand)]
pub enum TestbedCmd {
    /// Build a testbed from a preset or a TOML file
    Up {
        /// lan, multinic, two-clusters, wan, or a .toml file
        topology: String,
        /// Testbed name (default: the preset's or file's name); parallel testbeds need distinct names
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        opts: PresetArgs,
    },
    /// Remove testbeds (idempotent; also finds what a crashed `up` left)
    Down {
        /// Testbeds to remove (default: the only one running)
        names: Vec<String>,
        /// Remove every testbed on this machine
        #[arg(long, conflicts_with = "names")]
        all: bool,
    },
    /// List the testbeds on this machine
    List,
    /// Show a testbed's hosts, interfaces and addresses
    Status { name: Option<String> },
    /// Print a preset (or a file, checked) as TOML
    Show {
        topology: String,
        #[command(flatten)]
        opts: PresetArgs,
    },
    /// Run a command on a host (its network, UTS and mount namespaces)
    Exec {
        #[arg(long, short = 't')]
        testbed: Option<String>,
        host: String,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Print a hostfile: one host name per line
    Hosts {
        #[arg(long, short = 't')]
        testbed: Option<String>,
    },
    /// ssh-like agent: `agent [SSH-OPTIONS] HOST COMMAND…` (Open MPI plm_rsh_agent, Hydra -launcher-exec)
    Agent {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        args: Vec<String>,
    },
    /// From every host, connect to every testbed address and print who answers
    Matrix { name: Option<String> },
    /// The WAN emulator process (started by `up` for each WAN link)
    #[command(hide = true)]
    WanEmu(WanEmuArgs),
}

/// Options of the presets (ignored for files).
#[derive(Args, Debug, Clone)]
pub struct PresetArgs {
    /// Hosts (lan, multinic) or nodes per cluster/site (two-clusters, wan)
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=200))]
    nodes: Option<u16>,
    /// Cluster or site without IPv6 (a or b); repeatable
    #[arg(long, value_name = "SITE")]
    no_ipv6: Vec<String>,
    /// Give every host a docker-like bridge, all with 172.17.0.1/16
    #[arg(long)]
    docker: bool,
    /// MTU of every segment
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(576..=9000))]
    mtu: u32,
    /// Rate limit of LAN segments, Mbit/s
    #[arg(long)]
    rate_mbit: Option<u64>,
    /// What the heads of two-clusters do with their compute nodes' outgoing IPv4:
    /// masquerade (port-preserving NAT), fully-random (a hard NAT), blocked (no outbound NAT)
    #[arg(long, default_value = "masquerade", value_parser = ["masquerade", "fully-random", "blocked"])]
    nat: String,
    #[command(flatten)]
    wan: WanFlags,
    /// The hosts' TCP congestion control (default: the machine's; this VM's is bbr, most
    /// clusters' cubic)
    #[arg(long, value_parser = ["cubic", "bbr", "reno"])]
    tcp_cc: Option<String>,
    /// Give the hosts Linux's default TCP socket-buffer limits (tcp_rmem 6 MiB, tcp_wmem
    /// 4 MiB) instead of 64 MiB
    #[arg(long)]
    kernel_tcp_buffers: bool,
    /// Run Slurm: per site (or for all hosts) munged and slurmctld on its head or router
    /// (else its first host), slurmd on the others (Debian's slurmd, slurmctld, munge)
    #[arg(long)]
    slurm: bool,
}

/// The impairments of a WAN link, each way.
#[derive(Args, Debug, Clone)]
pub struct WanFlags {
    /// WAN one-way delay, ms (two-clusters and lan --nodes 2: any WAN flag makes the public
    /// segment, or the LAN, an emulated link)
    #[arg(long, default_value_t = 0.0)]
    delay_ms: f64,
    /// WAN jitter, ms (uniform ±)
    #[arg(long, default_value_t = 0.0)]
    jitter_ms: f64,
    /// WAN loss, percent
    #[arg(long, default_value_t = 0.0)]
    loss_pct: f64,
    /// WAN reordering: percent of frames sent without delay
    #[arg(long, default_value_t = 0.0)]
    reorder_pct: f64,
    /// WAN rate, Mbit/s
    #[arg(long)]
    wan_rate_mbit: Option<u64>,
}

impl WanFlags {
    fn impairment(&self) -> WanImpairment {
        WanImpairment {
            delay_ms: self.delay_ms,
            jitter_ms: self.jitter_ms,
            loss_pct: self.loss_pct,
            reorder_pct: self.reorder_pct,
            rate_mbit: self.wan_rate_mbit,
        }
    }
}

#[derive(Args, Debug)]
pub struct WanEmuArgs {
    #[arg(long)]
    a: String,
    #[arg(long)]
    b: String,
    #[command(flatten)]
    wan: WanFlags,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl PresetArgs {
    fn options(&self) -> PresetOptions {
        PresetOptions {
            nodes: self.nodes,
            no_ipv6: self.no_ipv6.clone(),
            docker: self.docker,
            mtu: self.mtu,
            rate_mbit: self.rate_mbit,
            wan: self.wan.impairment(),
            nat: testbed::NatMode::from_name(&self.nat).expect("clap checked the name"),
            tcp: self.tcp(),
        }
    }

    fn tcp(&self) -> testbed::topology::HostTcp {
        testbed::topology::HostTcp {
            congestion: self.tcp_cc.clone(),
            kernel_buffers: self.kernel_tcp_buffers,
        }
    }
}

/// A preset by name or a TOML file by path; returns it with its default testbed name.
fn load(topology: &str, opts: &PresetArgs) -> Result<(Topology, String), String> {
    let path = Path::new(topology);
    if topology.ends_with(".toml") || path.exists() {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{topology}: {e}"))?;
        let mut topo = Topology::from_toml(&text).map_err(|e| format!("{topology}: {e}"))?;
        if !opts.tcp().is_default() {
            topo.tcp = opts.tcp();
        }
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("testbed");
        return Ok((topo, stem.to_string()));
    }
    Ok((testbed::preset(topology, &opts.options())?, topology.to_string()))
}

pub fn main(cmd: TestbedCmd) -> ExitCode {
    // Like ssh, the agent exits 255 for its own failures, so that launchers can tell
    // them from the remote command's status.
    let failure = if matches!(cmd, TestbedCmd::Agent { .. }) {
        255
    } else {
        1
    };
    match run(cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pontoon testbed: {e}");
            ExitCode::from(failure)
        }
    }
}

fn run(cmd: TestbedCmd) -> Result<ExitCode, String> {
    match cmd {
        TestbedCmd::Up { topology, name, opts } => {
            let (mut topo, default_name) = load(&topology, &opts)?;
            topo.slurm |= opts.slurm;
            let name = name.unwrap_or(default_name);
            let exe = std::env::current_exe().map_err(|e| format!("finding the pontoon binary: {e}"))?;
            testbed::up(&name, &topo, &testbed::UpOptions::of_pontoon(&exe))?;
            println!(
                "testbed {name} is up: {} hosts ({}); `pontoon testbed exec {} -- CMD` runs on a host, \
                 `pontoon testbed down {name}` removes it",
                topo.hosts.len(),
                topo.hosts
                    .iter()
                    .map(|h| h.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                topo.hosts[0].name,
            );
            if topo.slurm {
                for c in testbed::slurm::clusters(&topo) {
                    println!(
                        "Slurm cluster {}: slurmctld on {}, slurmd on {}; `pontoon testbed exec -t {name} {} -- srun -N {} hostname`",
                        c.name,
                        c.controller,
                        c.nodes.join(", "),
                        c.controller,
                        c.nodes.len()
                    );
                }
            }
        }
        TestbedCmd::Down { names, all } => {
            let names = if all || !names.is_empty() {
                if all {
                    testbed::list()
                } else {
                    names
                }
            } else {
                vec![Testbed::open(None)?.name]
            };
            for name in names {
                let removed = testbed::down(&name)?;
                println!(
                    "testbed {name}: removed {} namespaces and {} processes",
                    removed.namespaces, removed.processes
                );
            }
        }
        TestbedCmd::List => {
            for name in testbed::list() {
                match Testbed::open(Some(&name)) {
                    Ok(tb) => println!("{name}\t{} hosts", tb.topology.hosts.len()),
                    Err(e) => println!("{name}\tbroken: {e}"),
                }
            }
        }
        TestbedCmd::Status { name } => print!("{}", Testbed::open(name.as_deref())?.status()?),
        TestbedCmd::Show { topology, opts } => print!("{}", load(&topology, &opts)?.0.to_toml()),
        TestbedCmd::Exec {
            testbed,
            host,
            command,
        } => {
            let tb = Testbed::open(testbed.as_deref())?;
            let err = tb.command(&host, &command[0])?.args(&command[1..]).exec();
            return Err(format!("running {:?} on {host}: {err}", command[0]));
        }
        TestbedCmd::Hosts { testbed } => {
            for host in Testbed::open(testbed.as_deref())?.host_names() {
                println!("{host}");
            }
        }
        TestbedCmd::Agent { args } => {
            let (host, words) = testbed::agent::parse(&args)?;
            let tb = testbed::agent::testbed_of(&host)?;
            let err = testbed::agent::command(&tb, &host, &words)?.exec();
            return Err(format!("running a shell on {host}: {err}"));
        }
        TestbedCmd::Matrix { name } => {
            let tb = Testbed::open(name.as_deref())?;
            print!("{}", testbed::probe::render(&testbed::probe::matrix(&tb)?));
        }
        TestbedCmd::WanEmu(a) => return wan_emu(a),
    }
    Ok(ExitCode::SUCCESS)
}

fn wan_emu(a: WanEmuArgs) -> Result<ExitCode, String> {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let mut cfg = testbed::wan::WanConfig::with_impairment(a.a, a.b, &a.wan.impairment());
    cfg.seed = a.seed;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    let failed = |e: std::io::Error| format!("WAN emulator between {} and {}: {e}", cfg.a, cfg.b);
    let wan = testbed::wan::Wan::open(&cfg).map_err(failed)?;
    // `up` waits for this line; nothing else goes to stdout (it is closed afterwards).
    println!("ready");
    let stats = wan.run(&stop).map_err(failed)?;
    eprintln!("{stats:?}");
    Ok(ExitCode::SUCCESS)
}
