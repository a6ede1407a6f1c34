//! `up`: turns a validated topology into namespaces, veth pairs, bridges, addresses,
//! routes, NAT, rate limits and WAN emulators. Any failure tears down what was built.

use crate::netns::{self, in_netns, netns_name, run, run_with_input};
use crate::topology::{Host, NatMode, Segment, Topology, DOCKER_BRIDGE, DOCKER_BRIDGE_ADDR, FABRIC};
use crate::{state_dir, teardown};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// Programs the testbed starts, as a program and its leading arguments.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// The WAN emulator (`pontoon testbed wan-emu`); the builder appends the link's flags.
    pub emulator: Vec<OsString>,
    /// The ssh-like agent (`pontoon testbed agent`), wrapped in the executable
    /// [`agent_path`] because launchers such as Hydra take one file, not a command line.
    pub agent: Vec<OsString>,
}

impl UpOptions {
    /// The emulator and agent of the `pontoon` binary at `exe`.
    pub fn of_pontoon(exe: &std::path::Path) -> UpOptions {
        UpOptions {
            emulator: vec![exe.into(), "testbed".into(), "wan-emu".into()],
            agent: vec![exe.into(), "testbed".into(), "agent".into()],
        }
    }
}

/// The testbed's agent as one executable file.
pub fn agent_path(testbed: &str) -> std::path::PathBuf {
    state_dir(testbed).join("agent")
}

/// Builds testbed `name`. On failure everything created so far is removed again.
pub fn up(name: &str, topo: &Topology, opts: &UpOptions) -> Result<(), String> {
    crate::topology::check_name("testbed", name, 24)?;
    topo.validate()?;
    crate::require_root("building a testbed")?;
    if !netns::holders(Some(name)).is_empty() || !netns::named_netns(Some(name)).is_empty() {
        return Err(format!(
            "testbed {name:?} exists already; `pontoon testbed down {name}` removes it"
        ));
    }
    if let Some(cc) = &topo.tcp.congestion {
        allow_congestion_control(cc)?;
    }
    let mut result = build(name, topo, opts);
    if result.is_ok() && topo.slurm {
        result = crate::Testbed::open(Some(name)).and_then(|tb| crate::slurm::start(&tb));
    }
    if let Err(e) = result {
        let cleanup = match teardown::down(name) {
            Ok(_) => "everything built so far was removed again".to_string(),
            Err(d) => format!("cleaning up also failed: {d}"),
        };
        return Err(format!("building testbed {name:?} failed: {e}\n({cleanup})"));
    }
    Ok(())
}

fn build(name: &str, topo: &Topology, opts: &UpOptions) -> Result<(), String> {
    let dir = state_dir(name);
    let hosts_dir = dir.join("etc-hosts");
    fs::create_dir_all(&hosts_dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    fs::write(dir.join("topology.toml"), topo.to_toml())
        .map_err(|e| format!("writing {}: {e}", dir.display()))?;
    write_agent(name, &opts.agent)?;

    let fabric_hosts = hosts_dir.join(FABRIC);
    fs::write(&fabric_hosts, "127.0.0.1\tlocalhost\n").map_err(|e| e.to_string())?;
    netns::start_holder(name, FABRIC, &fabric_hosts)?;
    for host in &topo.hosts {
        let file = hosts_dir.join(&host.name);
        fs::write(&file, topo.etc_hosts(host)).map_err(|e| format!("writing {}: {e}", file.display()))?;
        netns::start_holder(name, &host.name, &file)?;
    }

    let fabric = netns_name(name, FABRIC);
    let ports = fabric_ports(topo);
    set_sysctls(&fabric, &[("net/ipv6/conf/default/disable_ipv6", "1")])?;
    let mut script = String::from("link set lo up\n");
    for seg in topo.segments.iter().filter(|s| s.wan.is_none()) {
        let _ = writeln!(script, "link add br-{} mtu {} type bridge", seg.name, seg.mtu);
        let _ = writeln!(script, "link set br-{} up", seg.name);
    }
    ip_batch(&fabric, &script, "the fabric's bridges")?;

    for host in &topo.hosts {
        configure_host(name, topo, host, &ports)?;
    }

    let mut script = String::new();
    for ((host, nic), port) in &ports {
        let seg = segment_of(topo, *host, *nic);
        if seg.wan.is_none() {
            let _ = writeln!(script, "link set {port} master br-{}", seg.name);
        }
        let _ = writeln!(script, "link set {port} up");
    }
    ip_batch(&fabric, &script, "the fabric's ports")?;

    for host in &topo.hosts {
        add_routes(name, topo, host)?;
    }
    for seg in topo.segments.iter().filter(|s| s.wan.is_some()) {
        start_emulator(name, topo, seg, &ports, opts)?;
    }
    fs::write(dir.join("ready"), "").map_err(|e| e.to_string())?;
    Ok(())
}

fn write_agent(testbed: &str, agent: &[OsString]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let words: Vec<String> = agent
        .iter()
        .map(|w| format!("'{}'", w.to_string_lossy().replace('\'', r"'\''")))
        .collect();
    let script = format!(
        "#!/bin/sh\n# ssh-like agent of testbed {testbed}: AGENT [SSH-OPTIONS] HOST COMMAND...\n\
         PONTOON_TESTBED={testbed} exec {} \"$@\"\n",
        words.join(" ")
    );
    let path = agent_path(testbed);
    fs::write(&path, script)
        .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o755)))
        .map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The fabric-side name of every host NIC's veth peer, keyed by (host, NIC position).
fn fabric_ports(topo: &Topology) -> BTreeMap<(usize, usize), String> {
    let mut ports = BTreeMap::new();
    for (h, host) in topo.hosts.iter().enumerate() {
        for n in 0..host.nics.len() {
            ports.insert((h, n), format!("h{h}n{n}"));
        }
    }
    ports
}

fn segment_of(topo: &Topology, host: usize, nic: usize) -> &Segment {
    topo.segment(&topo.hosts[host].nics[nic].segment)
        .expect("validated")
}

fn ip_batch(ns: &str, script: &str, what: &str) -> Result<(), String> {
    if script.is_empty() {
        return Ok(());
    }
    run_with_input(
        Command::new("ip").args(["-n", ns, "-batch", "-"]),
        script,
        &format!("setting up {what} in {ns}"),
    )
}

/// Lets namespaces other than the machine's first choose congestion control `cc` as
/// their default, which the kernel allows only for those listed in the first
/// namespace's `tcp_allowed_congestion_control` (the list grows by `cc`; nothing else
/// of the machine changes).
fn allow_congestion_control(cc: &str) -> Result<(), String> {
    const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let read = |path: &str| fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"));
    if !read(AVAILABLE)?.split_whitespace().any(|a| a == cc) {
        return Err(format!(
            "congestion control {cc:?} is not available in this kernel ({AVAILABLE}: {}; `modprobe tcp_{cc}` may add it)",
            read(AVAILABLE)?.trim()
        ));
    }
    let allowed = read(ALLOWED)?;
    if allowed.split_whitespace().any(|a| a == cc) {
        return Ok(());
    }
    fs::write(ALLOWED, format!("{} {cc}", allowed.trim()))
        .map_err(|e| format!("allowing {cc} in {ALLOWED}: {e}"))
}

fn set_sysctls(ns: &str, values: &[(&str, &str)]) -> Result<(), String> {
    let script: String = values
        .iter()
        .map(|(key, value)| format!("echo {value} > /proc/sys/{key}\n"))
        .collect();
    run(
        in_netns(ns, "sh").args(["-e", "-c", &script]),
        &format!("setting sysctls in {ns}"),
    )
    .map(|_| ())
}

fn configure_host(
    testbed: &str,
    topo: &Topology,
    host: &Host,
    ports: &BTreeMap<(usize, usize), String>,
) -> Result<(), String> {
    let ns = netns_name(testbed, &host.name);
    let h = topo
        .hosts
        .iter()
        .position(|x| x.name == host.name)
        .expect("listed");
    let forward = if host.forward { "1" } else { "0" };
    // Addresses usable at once (no DAD wait), large TCP windows for long fat WAN pipes
    // (unless the kernel's limits are asked for), the congestion control asked for.
    let mut sysctls = vec![
        ("net/ipv6/conf/all/accept_dad", "0"),
        ("net/ipv6/conf/default/accept_dad", "0"),
        ("net/ipv4/ip_forward", forward),
        ("net/ipv6/conf/all/forwarding", forward),
    ];
    // A new namespace copies the machine's limits, which its owner may have raised:
    // Linux's own defaults are set, not assumed.
    let (rmem, wmem) = if topo.tcp.kernel_buffers {
        ("4096 131072 6291456", "4096 16384 4194304")
    } else {
        ("4096 131072 67108864", "4096 16384 67108864")
    };
    sysctls.push(("net/ipv4/tcp_rmem", rmem));
    sysctls.push(("net/ipv4/tcp_wmem", wmem));
    if let Some(cc) = &topo.tcp.congestion {
        sysctls.push(("net/ipv4/tcp_congestion_control", cc));
    }
    set_sysctls(&ns, &sysctls)?;
    let fabric = netns_name(testbed, FABRIC);
    let mut script = String::from("link set lo up\n");
    for (n, nic) in topo.nics(host).iter().enumerate() {
        let seg = segment_of(topo, h, n);
        let port = &ports[&(h, n)];
        let _ = writeln!(
            script,
            "link add {} mtu {mtu} type veth peer name {port} mtu {mtu} netns {fabric}",
            nic.name,
            mtu = seg.mtu
        );
        for (addr, len) in &nic.addrs {
            let nodad = if addr.is_ipv6() { " nodad" } else { "" };
            let _ = writeln!(script, "address add {addr}/{len} dev {}{nodad}", nic.name);
        }
        let _ = writeln!(script, "link set {} up", nic.name);
    }
    if host.docker_bridge {
        let (name, (addr, len)) = (DOCKER_BRIDGE, DOCKER_BRIDGE_ADDR);
        let _ = writeln!(script, "link add {name} type bridge");
        let _ = writeln!(script, "address add {addr}/{len} dev {name}");
        let _ = writeln!(script, "link set {name} up");
    }
    ip_batch(&ns, &script, &format!("host {}'s interfaces", host.name))?;

    for (n, nic) in topo.nics(host).iter().enumerate() {
        let seg = segment_of(topo, h, n);
        if seg.wan.is_some() {
            // The emulator forwards frames as they are: no 64 KiB offload super-frames.
            for (side, ifname) in [(&ns, &nic.name), (&fabric, &ports[&(h, n)])] {
                run(
                    in_netns(side, "ethtool").args([
                        "-K", ifname, "tx", "off", "tso", "off", "gso", "off", "gro", "off",
                    ]),
                    &format!("turning offloads off on {ifname} in {side}"),
                )?;
            }
        }
        if let Some(mbit) = seg.rate_mbit {
            add_rate_limit(&ns, &nic.name, mbit, seg.mtu)?;
        }
    }
    if !host.masquerades.is_empty() {
        let nics = topo.nics(host);
        let (mut nat, mut filter) = (String::new(), String::new());
        for m in &host.masquerades {
            let out = nics.iter().find(|n| n.segment == m.out).expect("validated");
            let family = if m.source.addr.is_ipv4() { "ip" } else { "ip6" };
            let rule =
                |action: &str| format!("oifname \"{}\" {family} saddr {} {action}\n", out.name, m.source);
            match m.mode {
                NatMode::Masquerade => nat.push_str(&rule("masquerade")),
                NatMode::FullyRandom => nat.push_str(&rule("masquerade fully-random")),
                NatMode::Blocked => filter.push_str(&rule("drop")),
            }
        }
        let ruleset = format!(
            "table inet pontoon_nat {{\n chain postrouting {{\n  type nat hook postrouting priority srcnat; policy accept;\n{nat} }}\n \
             chain forward {{\n  type filter hook forward priority filter; policy accept;\n{filter} }}\n}}\n"
        );
        run_with_input(
            in_netns(&ns, "nft").args(["-f", "-"]),
            &ruleset,
            &format!("host {}'s NAT (nftables)", host.name),
        )?;
    }
    Ok(())
}

/// A token bucket on the NIC's egress. The burst is 0.5 ms of traffic, but at least one
/// whole GSO packet: the kernel hands veth TCP segments of up to 64 KiB (as a NIC with TSO
/// gets them), and tbf cuts any packet larger than its burst into frames in software.
/// tbf counts such a packet with the headers of each of its frames (~70 KB), so the floor
/// is 128 KiB. With a 62 KB burst at 1 Gbit/s that cutting cost ~70 % of two CPUs at
/// 2 Gbit/s and capped two iperf3 streams at 1.86 Gbit/s; with 128 KiB they reach 1.91
/// with the CPUs half idle. A real NIC sends such a segment back to back at line rate too.
fn add_rate_limit(ns: &str, ifname: &str, mbit: u64, mtu: u32) -> Result<(), String> {
    let burst = tbf_burst(mbit, mtu);
    run(
        Command::new("tc")
            .args(["-n", ns, "qdisc", "add", "dev", ifname, "root", "tbf"])
            .args([
                "rate".to_string(),
                format!("{mbit}mbit"),
                "burst".into(),
                burst.to_string(),
                "latency".into(),
                "50ms".into(),
            ]),
        &format!("rate limit on {ifname} in {ns}"),
    )
    .map(|_| ())
}

fn tbf_burst(mbit: u64, mtu: u32) -> u64 {
    const GSO_PACKET_WITH_HEADERS: u64 = 128 << 10;
    (mbit * 1_000_000 / 8 / 2000)
        .max(4 * u64::from(mtu) + 64)
        .max(GSO_PACKET_WITH_HEADERS)
}

fn add_routes(testbed: &str, topo: &Topology, host: &Host) -> Result<(), String> {
    let mut script = String::new();
    let mut add = |to: String, via: &str, want_v4: bool| {
        let hop = topo
            .next_hops(host, via)
            .into_iter()
            .find(|a: &IpAddr| a.is_ipv4() == want_v4);
        if let Some(hop) = hop {
            let _ = writeln!(script, "route add {to} via {hop}");
        }
    };
    if let Some(gw) = &host.gateway {
        add("0.0.0.0/0".into(), gw, true);
        add("::/0".into(), gw, false);
    }
    for route in &host.routes {
        add(route.to.to_string(), &route.via, route.to.addr.is_ipv4());
    }
    ip_batch(
        &netns_name(testbed, &host.name),
        &script,
        &format!("host {}'s routes", host.name),
    )
}

fn start_emulator(
    testbed: &str,
    topo: &Topology,
    seg: &Segment,
    ports: &BTreeMap<(usize, usize), String>,
    opts: &UpOptions,
) -> Result<(), String> {
    let wan = seg.wan.as_ref().expect("a WAN segment");
    let ends: Vec<&String> = ports
        .iter()
        .filter(|((h, n), _)| topo.hosts[*h].nics[*n].segment == seg.name)
        .map(|(_, port)| port)
        .collect();
    let (program, leading) = opts
        .emulator
        .split_first()
        .ok_or("no WAN emulator command given")?;
    let log = state_dir(testbed).join(format!("wan-{}.log", seg.name));
    let log = fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let mut cmd = in_netns(&netns_name(testbed, FABRIC), program);
    cmd.args(leading)
        .args(["--a", ends[0], "--b", ends[1]])
        .args(["--delay-ms", &wan.delay_ms.to_string()])
        .args(["--jitter-ms", &wan.jitter_ms.to_string()])
        .args(["--loss-pct", &wan.loss_pct.to_string()])
        .args(["--reorder-pct", &wan.reorder_pct.to_string()]);
    if let Some(mbit) = wan.rate_mbit {
        cmd.args(["--wan-rate-mbit", &mbit.to_string()]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting the WAN emulator of {}: {e}", seg.name))?;
    // It prints one line once its sockets are bound, and nothing on stdout after that.
    let mut line = String::new();
    let _ = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    if line.trim() != "ready" {
        let status = child.wait().map_err(|e| e.to_string())?;
        return Err(format!(
            "the WAN emulator of segment {} did not start ({status}); see {}",
            seg.name,
            state_dir(testbed).join(format!("wan-{}.log", seg.name)).display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tbf_burst;

    #[test]
    fn the_tbf_burst_holds_a_whole_gso_packet_and_half_a_millisecond() {
        assert!(tbf_burst(1000, 1500) >= 128 << 10, "tbf must not cut GSO packets");
        assert!(tbf_burst(10, 1500) >= 128 << 10);
        assert_eq!(tbf_burst(100_000, 9000), 100_000 * 1_000_000 / 8 / 2000);
    }
}
