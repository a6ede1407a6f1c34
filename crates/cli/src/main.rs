//! `pontoon`: the command-line front end. Thin: parsing and printing only; the work
//! is in the `launch` and `runtime` crates.
#![forbid(unsafe_code)]

use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

mod abi_paths;
mod doctor;
mod testbed;

#[derive(Parser)]
#[command(
    name = "pontoon",
    version,
    about = "Message passing across clusters",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a job: N copies of PROGRAM on this host, wired up as one MPI job
    #[command(
        after_help = "Exit status: 0 when every rank exited 0; otherwise the code of whatever ended \
                      the job first: the code given to abort, the first failed rank's exit code \
                      (128+N when killed by signal N; 1 when it exited 0 without finalizing), 124 for \
                      --timeout, 128+N when pontoon run got signal N; 127 when PROGRAM is not found, \
                      126 when it cannot be started, 1 for other launcher errors."
    )]
    Run(RunArgs),
    /// Print the version, transports, every parameter and the variables the launcher sets
    Info,
    /// Multi-cluster topologies from network namespaces on this host (needs root)
    #[command(subcommand)]
    Testbed(testbed::TestbedCmd),
    /// Run as a job (`pontoon run -n N pontoon doctor`): every rank reaches every other;
    /// prints the paths chosen and every connection attempt (exit status 2 if a pair failed)
    Doctor {
        /// Print the whole report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Forward incoming streams to the registered ranks of this cluster: run on a
    /// front-end node whose compute nodes are behind NAT (docs/relay.md)
    Relay {
        /// Address to listen on, repeatable (default: [::]:7426 and 0.0.0.0:7426)
        #[arg(long, value_name = "ADDR:PORT")]
        listen: Vec<std::net::SocketAddr>,
        /// Print a status line to stderr every SECONDS
        #[arg(long, value_name = "SECONDS")]
        status_every: Option<u64>,
        /// Exit when standard input closes (how `pontoon run` ends the relays it starts)
        #[arg(long)]
        exit_with_stdin: bool,
    },
    /// MPI micro-benchmarks of pontoon beside MPICH and Open MPI (where installed), on this
    /// host: runs alternate between the systems; medians, min-max, a ratio to the anchor
    Bench(bench::Options),
    /// How `pontoon run` inside a Slurm allocation starts a rank: `slurm-agent HOST SCRIPT`
    /// runs SCRIPT with sh on HOST through srun
    #[command(hide = true)]
    SlurmAgent { host: String, script: String },
    /// The rendezvous task 0 starts under srun without PMI; its order comes on stdin
    #[command(hide = true)]
    SrunRendezvous,
}

#[derive(Args)]
struct RunArgs {
    /// Number of ranks
    #[arg(short = 'n', long = "np", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    n: u32,
    /// Prefix every output line with `[rank] `
    #[arg(long)]
    tag_output: bool,
    /// Forward variable VAR to the ranks (with `=VALUE`: set it); repeatable
    #[arg(short = 'x', value_name = "VAR[=VALUE]", value_parser = parse_export)]
    export: Vec<(String, Option<String>)>,
    /// Pin each rank to one CPU (`core`: rank i on CPU i modulo the CPUs available) or not (`none`)
    #[arg(long, value_name = "core|none", value_parser = ["core", "none"])]
    bind_to: Option<String>,
    /// End the job after SECONDS (exit status 124); test harnesses set MPIEXEC_TIMEOUT,
    /// which MPICH's and Open MPI's mpiexec read too
    #[arg(long, value_name = "SECONDS", value_parser = parse_timeout, env = "MPIEXEC_TIMEOUT")]
    timeout: Option<Duration>,
    /// Run the ranks on the hosts of this testbed (the launcher runs on its first host);
    /// with --host, on those of its hosts
    #[arg(long, value_name = "NAME", conflicts_with = "hostfile")]
    testbed: Option<String>,
    /// With --testbed: tell each rank the site of its host (PONTOON_SITE), as a hostfile's
    /// `site=` would; without it the ranks infer the sites (from their round trips to the
    /// launcher and their networks)
    #[arg(long, requires = "testbed")]
    sites: bool,
    /// Hosts to run on: `h1,h2:4,…` (`:N` slots)
    #[arg(long, value_name = "HOSTS", conflicts_with = "hostfile")]
    host: Option<String>,
    /// File with one host per line (`HOST [slots=N] [site=NAME] [relay] [slurm]` or `HOST:N`;
    /// `relay`: the job runs a relay there, and with `slots=0` no rank; `slurm`: a cluster's
    /// login node, its ranks in a Slurm allocation made there, docs/slurm.md)
    #[arg(long, value_name = "FILE")]
    hostfile: Option<std::path::PathBuf>,
    /// How ranks are laid onto hosts: `node` (round-robin) or `slot` (fill each host first)
    #[arg(long, value_name = "node|slot", value_parser = ["node", "slot"], default_value = "node")]
    map_by: String,
    /// Command that runs a shell command on another host as `AGENT HOST COMMAND`
    #[arg(long, value_name = "CMD", default_value = "ssh")]
    agent: String,
    /// Run `pontoon relay` on HOST for the job (a NAT'd cluster's front-end node); repeatable.
    /// With --testbed, every forwarding host runs one without this flag
    #[arg(long, value_name = "HOST")]
    relay: Vec<String>,
    /// Inside a Slurm allocation, run every rank on this host instead of on the
    /// allocated nodes through srun
    #[arg(long)]
    no_slurm: bool,
    /// Start no relay (not even on a testbed's forwarding hosts); PONTOON_RELAYS still counts
    #[arg(long, conflicts_with = "relay")]
    no_relays: bool,
    /// The program and its arguments, passed verbatim (even those starting with `-`)
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM [ARGS]"
    )]
    command: Vec<OsString>,
}

fn parse_export(s: &str) -> Result<(String, Option<String>), String> {
    launch::parse_export(s).map_err(|e| e.to_string())
}

fn parse_timeout(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("{s:?}: the timeout must be more than 0 seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is too long"))
}

fn init_logging() {
    let filter = std::env::var("PONTOON_LOG").unwrap_or_else(|_| "warn".into());
    let (filter, bad) = match tracing_subscriber::EnvFilter::try_new(&filter) {
        Ok(f) => (f, None),
        Err(e) => (
            tracing_subscriber::EnvFilter::new("warn"),
            Some(format!("PONTOON_LOG={filter:?}: {e}")),
        ),
    };
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some(bad) = bad {
        tracing::warn!("{bad}; using `warn`");
    }
}

/// Where a job runs: the host of every rank, the agent that reaches them, the hosts that
/// run relays.
struct Placement {
    ranks: Vec<launch::hosts::Host>,
    agent: Vec<OsString>,
    relays: Vec<String>,
}

/// The placement from `--testbed`, `--host` or `--hostfile` (and `--relay`). With
/// `--testbed` from outside it, this does not return: it starts the same `pontoon run`
/// again on the testbed's first host.
fn placement(a: &RunArgs) -> Result<Placement, String> {
    use launch::hosts::{map_ranks, parse_hostfile, Host, MapBy};
    let by = if a.map_by == "slot" {
        MapBy::Slot
    } else {
        MapBy::Node
    };
    let mut relays = a.relay.clone();
    let (hosts, agent) = if let Some(name) = &a.testbed {
        let tb = ::testbed::Testbed::open(Some(name))?;
        // A testbed's forwarding hosts are its NAT heads and routers: each runs a relay.
        if !a.no_relays {
            relays.extend(
                tb.topology
                    .hosts
                    .iter()
                    .filter(|h| h.forward && !a.relay.contains(&h.name))
                    .map(|h| h.name.clone()),
            );
        }
        let names = tb.host_names();
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        if !tb.is_inside(&names[0])? {
            use std::os::unix::process::CommandExt;
            let err = tb
                .command(&names[0], &exe.to_string_lossy())?
                .args(std::env::args_os().skip(1))
                .exec();
            return Err(format!("starting pontoon run on {}: {err}", names[0]));
        }
        let mut hosts = match &a.host {
            Some(list) => {
                let hosts = parse_hostfile(&list.replace(',', "\n")).map_err(|e| e.to_string())?;
                if let Some(h) = hosts.iter().find(|h| !names.contains(&h.name)) {
                    return Err(format!(
                        "testbed {name} has no host {} (it has {})",
                        h.name,
                        names.join(", ")
                    ));
                }
                hosts
            }
            None => names
                .into_iter()
                .map(|name| Host {
                    name,
                    slots: 1,
                    site: None,
                    relay: false,
                    slurm: false,
                })
                .collect(),
        };
        if a.sites {
            for h in hosts.iter_mut().filter(|h| h.site.is_none()) {
                h.site = tb
                    .topology
                    .hosts
                    .iter()
                    .find(|t| t.name == h.name)
                    .and_then(|t| t.site.clone());
            }
        }
        (hosts, vec![exe.into(), "testbed".into(), "agent".into()])
    } else {
        let text = match (&a.host, &a.hostfile) {
            (Some(list), _) => list.replace(',', "\n"),
            (None, Some(file)) => {
                std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?
            }
            (None, None) => {
                // Inside a Slurm allocation: its nodes, ranks started there by srun.
                let allocation = if a.no_slurm {
                    None
                } else {
                    launch::slurm::allocation()?
                };
                let (ranks, agent) = match allocation {
                    Some(hosts) => {
                        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
                        (map_ranks(&hosts, a.n, by), launch::slurm::agent(exe.into()))
                    }
                    // All ranks here; relays (`--relay`) may still run elsewhere.
                    None => (
                        Vec::new(),
                        a.agent.split_whitespace().map(OsString::from).collect(),
                    ),
                };
                return Ok(Placement { ranks, agent, relays });
            }
        };
        let hosts = parse_hostfile(&text).map_err(|e| e.to_string())?;
        if !a.no_relays {
            relays.extend(
                hosts
                    .iter()
                    .filter(|h| h.relay && !relays.contains(&h.name))
                    .map(|h| h.name.clone())
                    .collect::<Vec<_>>(),
            );
        }
        (hosts, a.agent.split_whitespace().map(OsString::from).collect())
    };
    Ok(Placement {
        ranks: map_ranks(&hosts, a.n, by),
        agent,
        relays,
    })
}

fn run(a: RunArgs) -> ExitCode {
    let Placement {
        ranks: placement,
        agent,
        relays,
    } = match placement(&a) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("pontoon run: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut command = a.command.into_iter();
    let mut export = a.export;
    if let Some(bind) = a.bind_to {
        // The rank pins itself at init (runtime::config PONTOON_BIND). Testbed hosts share
        // this machine's CPUs, so there the global rank picks the CPU.
        let bind = if bind == "core" && a.testbed.is_some() {
            "core-by-rank".into()
        } else {
            bind
        };
        export.push(("PONTOON_BIND".into(), Some(bind)));
    }
    // C programs load pontoon's libmpi_abi.so.1, whatever toolchain built them.
    if let Ok(paths) = abi_paths::AbiPaths::find() {
        if !export.iter().any(|(k, _)| k == "LD_LIBRARY_PATH") {
            let mut dirs = vec![paths.lib];
            dirs.extend(
                std::env::var_os("LD_LIBRARY_PATH")
                    .iter()
                    .flat_map(std::env::split_paths),
            );
            let joined = std::env::join_paths(dirs).ok().and_then(|p| p.into_string().ok());
            export.push(("LD_LIBRARY_PATH".into(), joined));
        }
    }
    let plan = launch::LaunchPlan {
        n: a.n,
        program: command.next().expect("clap requires a program"),
        args: command.collect(),
        tag_output: a.tag_output,
        export,
        timeout: a.timeout,
        placement,
        agent,
        relays,
        relay_command: relay_command(),
    };
    match launch::run(plan) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("pontoon run: {e}");
            ExitCode::from(match e {
                launch::LaunchError::Program(_) => 127,
                launch::LaunchError::Spawn { .. } => 126,
                _ => 1,
            })
        }
    }
}

/// `pontoon relay` as the launcher starts it for a job: any free port (the same in
/// both families), ending with the job.
fn relay_command() -> Vec<OsString> {
    let exe = std::env::current_exe().map_or_else(|_| "pontoon".into(), |p| p.into_os_string());
    [
        "relay",
        "--listen",
        "0.0.0.0:0",
        "--listen",
        "[::]:0",
        "--exit-with-stdin",
    ]
    .into_iter()
    .fold(vec![exe], |mut v, w| {
        v.push(w.into());
        v
    })
}

fn info() -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "pontoon {}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(
        s,
        "transports: shm (shared memory between ranks of one node), tcp, eth (raw Ethernet between \
         hosts of one L2 segment, where the ranks have CAP_NET_RAW); all by default, PONTOON_TRANSPORTS \
         restricts them"
    );
    match abi_paths::AbiPaths::find() {
        Ok(p) => {
            let _ = writeln!(
                s,
                "C ABI: MPI 5.0 standard ABI; {}/{} and {}/mpi.h (compile with pontoon-cc); every \
                 thread level up to MPI_THREAD_MULTIPLE, a progress thread with PONTOON_ASYNC_PROGRESS",
                p.lib.display(),
                abi_paths::SONAME,
                p.include.display()
            );
        }
        Err(e) => {
            let _ = writeln!(s, "C ABI: not found: {e}");
        }
    }
    let _ = writeln!(
        s,
        "relay: `pontoon relay` (protocol v{}, default port {}) forwards streams to registered ranks; \
         `pontoon run --relay HOST` starts one for a job, PONTOON_RELAYS names running ones; path \
         kinds: direct, nat-proxy (docs/relay.md)",
        relay::PROTOCOL_VERSION,
        relay::DEFAULT_PORT
    );
    let presets: Vec<&str> = ::testbed::PRESETS.iter().map(|p| p.0).collect();
    let _ = writeln!(
        s,
        "testbed presets: {} (`pontoon testbed show PRESET` prints one as TOML)",
        presets.join(", ")
    );
    let _ = writeln!(
        s,
        "\nparameters (environment variables; the ranks inherit them from pontoon run):"
    );
    for p in runtime::config::PARAMS {
        let _ = writeln!(s, "  {} (default {})\n      {}", p.name, p.default, p.meaning);
    }
    let _ = writeln!(s, "\nset by pontoon run for every rank:");
    for (name, meaning) in runtime::jobenv::ENV_VARS {
        let _ = writeln!(s, "  {name}\n      {meaning}");
    }
    let _ = writeln!(
        s,
        "\nset by a PMI process manager (srun --mpi=pmi2, Hydra's mpiexec; docs/slurm.md):"
    );
    for (name, meaning) in runtime::pmi::ENV_VARS {
        let _ = writeln!(s, "  {name}\n      {meaning}");
    }
    let _ = writeln!(
        s,
        "\nset by srun without PMI (--mpi=none, Slurm's default; task 0 starts pontoon srun-rendezvous):"
    );
    for (name, meaning) in runtime::srun::ENV_VARS {
        let _ = writeln!(s, "  {name}\n      {meaning}");
    }
    s
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.cmd {
        Cmd::Run(a) => run(a),
        Cmd::Info => {
            print!("{}", info());
            ExitCode::SUCCESS
        }
        Cmd::Testbed(cmd) => testbed::main(cmd),
        Cmd::Doctor { json } => doctor::main(json),
        Cmd::Relay {
            listen,
            status_every,
            exit_with_stdin,
        } => relay_main(listen, status_every, exit_with_stdin),
        Cmd::Bench(o) => bench_main(&o),
        Cmd::SlurmAgent { host, script } => {
            use std::os::unix::process::CommandExt;
            let err = launch::slurm::srun_command(&host, &script).exec();
            eprintln!("pontoon slurm-agent: cannot run srun: {err}");
            ExitCode::from(255)
        }
        Cmd::SrunRendezvous => match launch::srun::serve() {
            Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => {
                eprintln!("pontoon srun-rendezvous: {e}");
                ExitCode::from(1)
            }
        },
    }
}

fn bench_main(o: &bench::Options) -> ExitCode {
    let bar = bench::progress_bar();
    if o.test == bench::Test::Experiment {
        let written = bench::experiment::run(o, &bar);
        bar.finish_and_clear();
        return match written {
            Ok(path) => {
                println!("pontoon bench: wrote {}", path.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("pontoon bench experiment: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let report = bench::run(o, &bar);
    bar.finish_and_clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pontoon bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    if o.json {
        println!("{}", report.json());
    } else if o.csv {
        print!("{}", report.csv());
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &o.plot {
        if let Err(e) = report.chart().write(path) {
            eprintln!("pontoon bench: {e}");
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

fn relay_main(
    mut listen: Vec<std::net::SocketAddr>,
    status_every: Option<u64>,
    exit_with_stdin: bool,
) -> ExitCode {
    if listen.is_empty() {
        let port = relay::DEFAULT_PORT;
        listen = vec![
            (std::net::Ipv6Addr::UNSPECIFIED, port).into(),
            (std::net::Ipv4Addr::UNSPECIFIED, port).into(),
        ];
    }
    let r = match relay::Relay::bind(&listen, relay::Limits::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("pontoon relay: {e}");
            return ExitCode::FAILURE;
        }
    };
    let words = |v: Vec<std::net::SocketAddr>| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    // One line, flushed at once: the launcher waits for it (launch::relays).
    println!(
        "pontoon relay: listening on {}; {}{}",
        words(r.local_addrs()).join(", "),
        launch::relays::ANNOUNCE_MARK,
        words(r.reachable_addrs()).join(" ")
    );
    if exit_with_stdin {
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            std::process::exit(0);
        });
    }
    r.run(status_every.map(std::time::Duration::from_secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn trailing_arguments_are_verbatim() {
        let cli = Cli::try_parse_from([
            "pontoon",
            "run",
            "-n",
            "2",
            "-x",
            "A=1",
            "prog",
            "-n",
            "5",
            "--timeout",
            "x",
        ])
        .unwrap();
        let Cmd::Run(a) = cli.cmd else { panic!() };
        assert_eq!(a.n, 2);
        assert_eq!(a.export, vec![("A".to_string(), Some("1".to_string()))]);
        assert_eq!(
            a.command,
            ["prog", "-n", "5", "--timeout", "x"].map(OsString::from)
        );
        assert!(Cli::try_parse_from(["pontoon", "run", "-n", "0", "prog"]).is_err());
        assert!(Cli::try_parse_from(["pontoon", "run", "-n", "1"]).is_err());
        assert!(Cli::try_parse_from(["pontoon", "run", "-n", "1", "--timeout", "-3", "p"]).is_err());
        assert!(Cli::try_parse_from(["pontoon", "run", "-n", "1", "-x", "PONTOON_RANK=1", "p"]).is_err());
    }

    #[test]
    fn timeouts() {
        assert_eq!(parse_timeout("1.5"), Ok(Duration::from_millis(1500)));
        for bad in ["0", "-1", "nan", "inf", "abc", ""] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn launcher_variables_are_documented() {
        let documented: Vec<&str> = runtime::jobenv::ENV_VARS.iter().map(|v| v.0).collect();
        assert_eq!(documented, launch::LAUNCHER_VARS);
        let text = info();
        for p in runtime::config::PARAMS {
            assert!(text.contains(p.name));
        }
    }
}
