//! The benchmark programs — plain standard-MPI C (`bench/c`), compiled into this binary
//! so that an installed `pontoon` can run them — and the MPI implementations that run
//! them: pontoon always, MPICH and Open MPI where their compiler wrappers and launchers
//! are installed (`scripts/install-deps.sh --anchors`), each at its default settings.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One C program of `bench/c`.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    pub name: &'static str,
    source: &'static str,
}

/// The program `bench/DIR/NAME.c` (`bench/c` by default).
macro_rules! program {
    ($name:literal) => {
        program!("c", $name)
    };
    ($dir:literal, $name:literal) => {
        Program {
            name: $name,
            source: include_str!(concat!("../../../bench/", $dir, "/", $name, ".c")),
        }
    };
}

pub const PINGPONG: Program = program!("pingpong");
pub const LATENCY_MT: Program = program!("latency_mt");
pub const STREAMS: Program = program!("streams");
pub const BIBW: Program = program!("bibw");
pub const COLLECTIVE: Program = program!("collective");
pub const ALLREDUCE: Program = program!("allreduce");
pub const APPLAT: Program = program!("applat");
pub const OVERLAP: Program = program!("overlap");
pub const COMM_THREAD: Program = program!("comm_thread");
/// The bare AF_PACKET ping-pong (`bench/sock/ethpp.c`): no MPI, built with `cc`.
pub const ETHPP: Program = program!("sock", "ethpp");

/// A command line that starts ranks (the program follows), and the environment it needs.
struct Launcher {
    argv: Vec<OsString>,
    env: Vec<(&'static str, String)>,
}

/// Where the ranks run: this host, or the hosts of a testbed (one rank per host in turn).
#[derive(Debug, Clone)]
pub enum Place {
    Local,
    Testbed {
        name: String,
        hosts: Vec<String>,
        /// pontoon's ranks learn their hosts' sites (`pontoon run --sites`).
        sites: bool,
    },
}

impl Place {
    /// The running testbed `name` and its hosts, or those of `only` (in that order).
    pub fn testbed(name: &str, only: &[String], sites: bool) -> Result<Place, String> {
        let bed = testbed::Testbed::open(Some(name))?;
        let all = bed.host_names();
        if let Some(h) = only.iter().find(|h| !all.contains(h)) {
            return Err(format!(
                "testbed {name} has no host {h} (it has {})",
                all.join(", ")
            ));
        }
        Ok(Place::Testbed {
            name: bed.name.clone(),
            hosts: if only.is_empty() { all } else { only.to_vec() },
            sites,
        })
    }
}

/// One run of a program: its arguments, ranks and place, and what pontoon's ranks are
/// told (`pontoon run -x`; the anchors run at their defaults).
pub struct Job<'a> {
    pub args: &'a [String],
    pub ranks: u32,
    pub timeout: Duration,
    pub place: &'a Place,
    pub pontoon_env: &'a [(String, String)],
    /// Every MPI with its progress thread ([`System::progress_thread`]).
    pub progress_thread: bool,
}

/// An MPI implementation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    Pontoon,
    Mpich,
    Openmpi,
}

impl System {
    pub const ALL: [System; 3] = [System::Pontoon, System::Mpich, System::Openmpi];

    pub fn name(self) -> &'static str {
        match self {
            System::Pontoon => "pontoon",
            System::Mpich => "mpich",
            System::Openmpi => "openmpi",
        }
    }

    /// The compiler wrapper, or why there is none.
    fn compiler(self) -> Result<PathBuf, String> {
        match self {
            // Next to this `pontoon` (a build tree or an install prefix).
            System::Pontoon => {
                let exe = std::env::current_exe().map_err(|e| format!("where is pontoon: {e}"))?;
                let cc = exe.with_file_name("pontoon-cc");
                cc.is_file()
                    .then_some(cc)
                    .ok_or_else(|| format!("no pontoon-cc next to {}", exe.display()))
            }
            System::Mpich => in_path("mpicc.mpich"),
            System::Openmpi => in_path("mpicc.openmpi"),
        }
    }

    /// The setting that gives each rank a thread of its own that moves messages while
    /// the application computes.
    fn progress_thread(self) -> (&'static str, &'static str) {
        match self {
            System::Pontoon => ("PONTOON_ASYNC_PROGRESS", "on"),
            System::Mpich => ("MPICH_ASYNC_PROGRESS", "1"),
            System::Openmpi => ("OMPI_MCA_btl_tcp_progress_thread", "1"),
        }
    }

    /// How the ranks of a job start.
    fn launcher(self, job: &Job) -> Result<Launcher, String> {
        let mut launcher = self.launcher_at(job.ranks, job.timeout, job.place)?;
        if job.progress_thread {
            let (var, value) = self.progress_thread();
            match self {
                System::Pontoon => launcher
                    .argv
                    .extend(["-x".into(), format!("{var}={value}").into()]),
                _ => launcher.env.push((var, value.into())),
            }
        }
        if self == System::Pontoon {
            for (var, value) in job.pontoon_env {
                launcher
                    .argv
                    .extend(["-x".into(), format!("{var}={value}").into()]);
            }
        }
        Ok(launcher)
    }

    /// How `ranks` ranks of a program start at `place`.
    fn launcher_at(self, ranks: u32, timeout: Duration, place: &Place) -> Result<Launcher, String> {
        if let Place::Testbed { name, hosts, sites } = place {
            let mut launcher = self.testbed_launcher(ranks, timeout, name, hosts)?;
            if *sites && self == System::Pontoon {
                launcher.argv.push("--sites".into());
            }
            return Ok(launcher);
        }
        let n = ranks.to_string();
        let argv = |v: Vec<OsString>| Launcher { argv: v, env: vec![] };
        Ok(match self {
            System::Pontoon => {
                let exe = pontoon_exe()?;
                let secs = timeout.as_secs().max(1).to_string();
                argv(vec![
                    exe.into(),
                    "run".into(),
                    "--timeout".into(),
                    secs.into(),
                    "-n".into(),
                    n.into(),
                ])
            }
            System::Mpich => argv(vec![in_path("mpiexec.mpich")?.into(), "-n".into(), n.into()]),
            // More ranks than CPUs is what a benchmark on a small host asks for; as root
            // Open MPI wants to be told twice.
            System::Openmpi => Launcher {
                argv: vec![
                    in_path("mpirun.openmpi")?.into(),
                    "--oversubscribe".into(),
                    "-n".into(),
                    n.into(),
                ],
                env: openmpi_as_root(),
            },
        })
    }

    /// Ranks on the hosts of a testbed, one per host in turn. pontoon's launcher knows
    /// testbeds; MPICH's and Open MPI's start on the first host and reach the others
    /// through the testbed's ssh-like agent. Both are held to TCP, the path between real
    /// hosts (MEASURING.md): the testbed's hosts share this machine's /dev/shm, which UCX
    /// would otherwise use between them; Open MPI would bind every "separate node"'s rank
    /// to core 0.
    fn testbed_launcher(
        self,
        ranks: u32,
        timeout: Duration,
        bed: &str,
        hosts: &[String],
    ) -> Result<Launcher, String> {
        let n = ranks.to_string();
        let first = hosts
            .first()
            .ok_or_else(|| format!("testbed {bed} has no host"))?;
        let used: Vec<&str> = hosts.iter().take(ranks as usize).map(String::as_str).collect();
        let pontoon = pontoon_exe()?;
        let inside = |mut cmd: Vec<OsString>| -> Vec<OsString> {
            let mut v: Vec<OsString> = vec![
                pontoon.clone().into(),
                "testbed".into(),
                "exec".into(),
                "-t".into(),
                bed.into(),
                first.into(),
                "--".into(),
            ];
            v.append(&mut cmd);
            v
        };
        let agent = || agent_script(&pontoon);
        let env_bed = ("PONTOON_TESTBED", bed.to_string());
        Ok(match self {
            System::Pontoon => Launcher {
                argv: vec![
                    pontoon.clone().into(),
                    "run".into(),
                    "--testbed".into(),
                    bed.into(),
                    "--host".into(),
                    used.join(",").into(),
                    "--timeout".into(),
                    timeout.as_secs().max(1).to_string().into(),
                    "-n".into(),
                    n.into(),
                ],
                env: vec![],
            },
            System::Mpich => Launcher {
                argv: inside(vec![
                    in_path("mpiexec.mpich")?.into(),
                    "-launcher".into(),
                    "ssh".into(),
                    "-launcher-exec".into(),
                    agent()?.into(),
                    "-hosts".into(),
                    used.join(",").into(),
                    "-n".into(),
                    n.into(),
                ]),
                env: vec![env_bed, ("UCX_TLS", "tcp,self".into())],
            },
            System::Openmpi => {
                let mut env = openmpi_as_root();
                env.push(env_bed);
                Launcher {
                    argv: inside(
                        [
                            vec![
                                in_path("mpirun.openmpi")?.into(),
                                "--host".into(),
                                used.join(",").into(),
                            ],
                            [
                                "--map-by",
                                "node",
                                "--oversubscribe",
                                "--bind-to",
                                "none",
                                "--mca",
                                "pml",
                                "ob1",
                            ]
                            .map(OsString::from)
                            .to_vec(),
                            ["--mca", "btl", "tcp,self", "--mca", "plm_rsh_agent"]
                                .map(OsString::from)
                                .to_vec(),
                            vec![agent()?.into(), "-n".into(), n.into()],
                        ]
                        .concat(),
                    ),
                    env,
                }
            }
        })
    }

    /// Whether this system can run here, or why not.
    pub fn available(self) -> Result<(), String> {
        self.compiler()?;
        self.launcher_at(2, Duration::from_secs(1), &Place::Local)
            .map(|_| ())
    }
}

/// The `pontoon` running this.
fn pontoon_exe() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("where is pontoon: {e}"))
}

/// Open MPI refuses to run as root unless told twice.
fn openmpi_as_root() -> Vec<(&'static str, String)> {
    vec![
        ("OMPI_ALLOW_RUN_AS_ROOT", "1".into()),
        ("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1".into()),
    ]
}

/// A one-word command for `pontoon testbed agent` (Hydra's -launcher-exec and Open MPI's
/// plm_rsh_agent take a program, not a command line).
fn agent_script(pontoon: &Path) -> Result<PathBuf, String> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let script = format!("#!/bin/sh\nexec '{}' testbed agent \"$@\"\n", pontoon.display());
    let key = &blake3::hash(script.as_bytes()).to_hex()[..16];
    let path = dir.join(format!("testbed-agent-{key}"));
    if !path.is_file() {
        let tmp = dir.join(format!("testbed-agent-{key}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, &script).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("cannot make {} executable: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))?;
    }
    Ok(path)
}

pub(crate) fn in_path(name: &str) -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{name} is not installed (scripts/install-deps.sh --anchors)"))
}

/// Where compiled programs are kept: `PONTOON_BENCH_CACHE`, else the user's cache.
fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PONTOON_BENCH_CACHE") {
        return d.into();
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("pontoon").join("bench")
}

/// `program` built for `system` (once: kept under a name from the source and compiler).
pub fn build(program: Program, system: System) -> Result<PathBuf, String> {
    compile(program, &system.compiler()?, system.name())
}

/// A program without MPI (a bare socket anchor), built with the system's `cc`.
pub fn build_bare(program: Program) -> Result<PathBuf, String> {
    compile(program, &in_path("cc")?, "bare")
}

/// `program` compiled with `cc` (once: kept under a name from the source and compiler);
/// `tag` names what it is built for.
fn compile(program: Program, cc: &Path, tag: &str) -> Result<PathBuf, String> {
    let mut key = blake3::Hasher::new();
    key.update(program.source.as_bytes());
    key.update(cc.as_os_str().as_encoded_bytes());
    let key = &key.finalize().to_hex()[..16];
    let dir = cache_dir();
    let exe = dir.join(format!("{}-{tag}-{key}", program.name));
    if exe.is_file() {
        return Ok(exe);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Source and program under names of this process's own, the program renamed once
    // built: a concurrent run never reads half a file (nor rewrites the source under
    // another's compiler).
    static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let pid = format!(
        "{}-{}",
        std::process::id(),
        BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let src = dir.join(format!("{}-{key}.{pid}.c", program.name));
    std::fs::write(&src, program.source).map_err(|e| format!("cannot write {}: {e}", src.display()))?;
    let tmp = dir.join(format!("{}.{pid}.tmp", exe.display()));
    let out = Command::new(cc)
        .args(["-O2", "-o"])
        .arg(&tmp)
        .arg(&src)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", cc.display()));
    let _ = std::fs::remove_file(&src);
    let out = out?;
    if !out.status.success() {
        return Err(format!(
            "{} failed on {}: {}",
            cc.display(),
            program.name,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    std::fs::rename(&tmp, &exe).map_err(|e| format!("cannot rename {}: {e}", tmp.display()))?;
    Ok(exe)
}

/// What one run printed: the library's name and rows of numbers (`SIZE VALUE…`).
#[derive(Debug, Default)]
pub struct Output {
    pub library: Option<String>,
    pub rows: Vec<(u64, Vec<f64>)>,
}

/// Parses a `bench/c` program's output: `# library: …`, other `#` comments, then rows.
pub fn parse(text: &str) -> Output {
    let mut out = Output::default();
    for line in text.lines().map(str::trim) {
        if let Some(lib) = line.strip_prefix("# library:") {
            out.library = Some(lib.split_whitespace().collect::<Vec<_>>().join(" "));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let Some(Ok(size)) = words.next().map(str::parse::<u64>) else {
            continue;
        };
        let values: Result<Vec<f64>, _> = words.map(str::parse::<f64>).collect();
        if let Ok(values) = values {
            out.rows.push((size, values));
        }
    }
    out
}

/// Runs `exe` (built for `system`) as `job` says; its output, or why it failed (within
/// the job's timeout).
pub fn run(system: System, exe: &Path, job: &Job) -> Result<Output, String> {
    let Launcher { argv, env } = system.launcher(job)?;
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).arg(exe).args(job.args).envs(env);
    finish(cmd, job.timeout, system.name())
}

/// Runs `cmd` to its end, or kills it after `timeout`; its output parsed, or why it
/// failed (`name` says whose run it was).
pub fn finish(mut cmd: Command, timeout: Duration, name: &str) -> Result<Output, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", Path::new(cmd.get_program()).display()))?;
    // Read both pipes on threads: a chatty job must not block on a full pipe.
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = reader(Box::new(child.stdout.take().expect("piped")));
    let stderr = reader(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{name} did not finish within {} s", timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let (stdout, stderr) = (
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default(),
    );
    if !status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("{name} exited with {status}: {}", tail.join(" / ")));
    }
    Ok(parse(&stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_rows_and_the_library() {
        let o = parse(
            "# library: pontoon 0.1\n# bytes latency_us bandwidth_MB_s\n0 1.50 0.00\n8 1.75 4.57\nnoise\n",
        );
        assert_eq!(o.library.as_deref(), Some("pontoon 0.1"));
        assert_eq!(o.rows, vec![(0, vec![1.5, 0.0]), (8, vec![1.75, 4.57])]);
        assert!(parse("").rows.is_empty());
        assert!(
            parse("12 x\n").rows.is_empty(),
            "a row that is not numbers is no row"
        );
    }

    #[test]
    fn the_programs_are_the_benchmarks_of_bench_c() {
        for p in [PINGPONG, STREAMS, BIBW, ALLREDUCE, COLLECTIVE, APPLAT, OVERLAP] {
            assert!(p.source.contains("MPI_Init"), "{}", p.name);
        }
        assert!(ETHPP.source.contains("AF_PACKET") && !ETHPP.source.contains("MPI_Init"));
    }
}
