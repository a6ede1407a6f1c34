//! Built-in topologies. `pontoon testbed show PRESET` prints any of them as TOML, the
//! starting point for a file of one's own.

use crate::topology::{Host, Masquerade, NatMode, Nic, Route, Segment, Topology, WanImpairment};

pub const PRESETS: &[(&str, &str)] = &[
    ("lan", "N hosts on one dual-stack L2 segment"),
    ("multinic", "N hosts with two NICs each, on two separate segments"),
    (
        "two-clusters",
        "clusters a and b: a NAT head and N compute nodes each, both on 10.0.0.0/24; heads on a public segment; compute nodes with global IPv6 routed via their head (--nat: masquerade, fully-random or blocked)",
    ),
    ("wan", "sites a and b (a router and N hosts each) joined by an emulated WAN link"),
];

/// Knobs of the presets; each preset uses the ones that make sense for it.
#[derive(Debug, Clone)]
pub struct PresetOptions {
    /// Hosts (`lan`, `multinic`) or compute nodes / hosts per site (`two-clusters`, `wan`).
    pub nodes: Option<u16>,
    /// Clusters or sites without IPv6 (`a`, `b`).
    pub no_ipv6: Vec<String>,
    /// Give every host a docker-style bridge with the same address.
    pub docker: bool,
    pub mtu: u32,
    /// Rate of the LAN segments (Mbit/s).
    pub rate_mbit: Option<u64>,
    /// The WAN link (`wan`; in `two-clusters` any of it turns the public segment into one).
    pub wan: WanImpairment,
    /// What the heads of `two-clusters` do with their compute nodes' outgoing IPv4.
    pub nat: NatMode,
    /// The hosts' TCP stack.
    pub tcp: crate::topology::HostTcp,
}

impl Default for PresetOptions {
    fn default() -> Self {
        PresetOptions {
            nodes: None,
            no_ipv6: Vec::new(),
            docker: false,
            mtu: 1500,
            rate_mbit: None,
            wan: WanImpairment::default(),
            nat: NatMode::default(),
            tcp: Default::default(),
        }
    }
}

pub fn preset(name: &str, opts: &PresetOptions) -> Result<Topology, String> {
    let topo = match name {
        "lan" => lan(opts),
        "multinic" => multinic(opts),
        "two-clusters" => two_clusters(opts),
        "wan" => wan(opts),
        _ => {
            let names: Vec<&str> = PRESETS.iter().map(|p| p.0).collect();
            return Err(format!(
                "no preset {name:?} (presets: {}; or give a .toml file)",
                names.join(", ")
            ));
        }
    };
    topo.validate()?;
    Ok(topo)
}

fn segment(name: &str, v4: Option<&str>, v6: Option<&str>, opts: &PresetOptions) -> Segment {
    Segment {
        name: name.into(),
        ipv4: v4.map(|p| p.parse().expect("preset prefixes are valid")),
        ipv6: v6.map(|p| p.parse().expect("preset prefixes are valid")),
        mtu: opts.mtu,
        rate_mbit: opts.rate_mbit,
        wan: None,
    }
}

fn host(name: String, nics: &[(&str, u16)], opts: &PresetOptions) -> Host {
    Host {
        name,
        nics: nics
            .iter()
            .map(|&(segment, index)| Nic {
                segment: segment.into(),
                index,
                name: None,
            })
            .collect(),
        gateway: None,
        routes: Vec::new(),
        forward: false,
        masquerades: Vec::new(),
        docker_bridge: opts.docker,
        site: None,
    }
}

fn lan(opts: &PresetOptions) -> Topology {
    let n = opts.nodes.unwrap_or(4);
    let mut lan = segment("lan", Some("10.0.0.0/24"), Some("fd00:0:0:1::/64"), opts);
    // Impairments (loss, reordering) make the one segment an emulated link.
    if opts.wan != WanImpairment::default() {
        lan.wan = Some(opts.wan.clone());
    }
    Topology {
        tcp: opts.tcp.clone(),
        slurm: false,
        segments: vec![lan],
        hosts: (1..=n)
            .map(|i| host(format!("h{i}"), &[("lan", i)], opts))
            .collect(),
    }
}

fn multinic(opts: &PresetOptions) -> Topology {
    let n = opts.nodes.unwrap_or(2);
    Topology {
        tcp: opts.tcp.clone(),
        slurm: false,
        segments: vec![
            segment("net0", Some("10.0.0.0/24"), Some("fd00:0:0:1::/64"), opts),
            segment("net1", Some("10.0.1.0/24"), Some("fd00:0:0:2::/64"), opts),
        ],
        hosts: (1..=n)
            .map(|i| host(format!("h{i}"), &[("net0", i), ("net1", i)], opts))
            .collect(),
    }
}

fn has_ipv6(opts: &PresetOptions, site: &str) -> bool {
    !opts.no_ipv6.iter().any(|s| s == site)
}

/// A site: a forwarding head/router on `uplink` plus N nodes behind it.
struct Site<'a> {
    name: &'a str,
    v4: &'a str,
    v6: &'a str,
    uplink_index: u16,
    head: &'a str,
    node: &'a str,
}

fn sites(opts: &PresetOptions, sites: [Site; 2], uplink: Segment, nat: bool) -> Topology {
    let n = opts.nodes.unwrap_or(if nat { 3 } else { 1 });
    let mut segments = vec![];
    let mut hosts = vec![];
    for (i, site) in sites.iter().enumerate() {
        let other = &sites[1 - i];
        let v6 = has_ipv6(opts, site.name).then_some(site.v6);
        segments.push(segment(site.name, Some(site.v4), v6, opts));
        let head_name = format!("{}-{}", site.name, site.head);
        let mut head = host(
            head_name.clone(),
            &[(site.name, 1), (&uplink.name, site.uplink_index)],
            opts,
        );
        head.forward = true;
        head.site = Some(site.name.into());
        let other_head = format!("{}-{}", other.name, other.head);
        if nat {
            head.masquerades.push(Masquerade {
                source: site.v4.parse().expect("preset prefixes are valid"),
                out: uplink.name.clone(),
                mode: opts.nat,
            });
        } else {
            head.routes.push(Route {
                to: other.v4.parse().expect("preset prefixes are valid"),
                via: other_head.clone(),
            });
        }
        if has_ipv6(opts, other.name) && uplink.ipv6.is_some() {
            head.routes.push(Route {
                to: other.v6.parse().expect("preset prefixes are valid"),
                via: other_head,
            });
        }
        hosts.push(head);
        for k in 1..=n {
            let mut node = host(
                format!("{}-{}{k}", site.name, site.node),
                &[(site.name, 10 + k)],
                opts,
            );
            node.gateway = Some(head_name.clone());
            node.site = Some(site.name.into());
            hosts.push(node);
        }
    }
    segments.push(uplink);
    Topology {
        segments,
        hosts,
        tcp: opts.tcp.clone(),
        slurm: false,
    }
}

fn two_clusters(opts: &PresetOptions) -> Topology {
    let mut public = segment("pub", Some("198.51.100.0/24"), Some("2001:db8::/64"), opts);
    if opts.wan != WanImpairment::default() {
        public.wan = Some(opts.wan.clone());
    }
    let cluster = |name, v6, uplink_index| Site {
        name,
        v4: "10.0.0.0/24",
        v6,
        uplink_index,
        head: "head",
        node: "c",
    };
    sites(
        opts,
        [
            cluster("a", "2001:db8:a::/64", 1),
            cluster("b", "2001:db8:b::/64", 2),
        ],
        public,
        true,
    )
}

fn wan(opts: &PresetOptions) -> Topology {
    let mut link = segment("wan", Some("203.0.113.0/24"), Some("2001:db8:ffff::/64"), opts);
    link.rate_mbit = None;
    link.wan = Some(opts.wan.clone());
    let site = |name, v4, v6, uplink_index| Site {
        name,
        v4,
        v6,
        uplink_index,
        head: "gw",
        node: "h",
    };
    sites(
        opts,
        [
            site("a", "10.1.0.0/24", "2001:db8:1::/64", 1),
            site("b", "10.2.0.0/24", "2001:db8:2::/64", 2),
        ],
        link,
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_valid_and_round_trips_through_toml() {
        let opts = PresetOptions {
            docker: true,
            ..PresetOptions::default()
        };
        for (name, _) in PRESETS {
            let topo = preset(name, &opts).unwrap();
            let again = Topology::from_toml(&topo.to_toml()).unwrap();
            assert_eq!(topo, again, "{name}");
        }
    }

    #[test]
    fn two_clusters_duplicates_the_private_subnet_and_routes_ipv6() {
        let topo = preset("two-clusters", &PresetOptions::default()).unwrap();
        assert_eq!(topo.hosts.len(), 8);
        let owners = topo.address_owners();
        let dup = owners[&"10.0.0.11".parse().unwrap()].clone();
        assert_eq!(dup, vec!["a-c1".to_string(), "b-c1".to_string()]);
        assert_eq!(
            owners[&"2001:db8:b::11".parse().unwrap()],
            vec!["b-c1".to_string()]
        );
        // a-c1 finds b-c1 under its global address, never under the duplicated private one.
        let hosts = topo.etc_hosts(topo.host("a-c1").unwrap());
        assert!(hosts.contains("2001:db8:b::11\tb-c1"), "{hosts}");
        assert!(hosts.contains("10.0.0.12\ta-c2"), "{hosts}");
        assert!(hosts.contains("198.51.100.2\tb-head"), "{hosts}");
    }

    #[test]
    fn two_clusters_without_ipv6_in_b_leaves_b_nodes_out_of_a_hosts_files() {
        let opts = PresetOptions {
            no_ipv6: vec!["b".into()],
            ..PresetOptions::default()
        };
        let topo = preset("two-clusters", &opts).unwrap();
        let hosts = topo.etc_hosts(topo.host("a-c1").unwrap());
        assert!(!hosts.contains("b-c1"), "{hosts}");
        let a_head = topo.host("a-head").unwrap();
        assert!(
            a_head.routes.is_empty(),
            "no route to a prefix that does not exist"
        );
    }

    #[test]
    fn the_nat_mode_reaches_both_heads_and_round_trips() {
        let opts = PresetOptions {
            nat: NatMode::FullyRandom,
            ..PresetOptions::default()
        };
        let topo = preset("two-clusters", &opts).unwrap();
        for head in ["a-head", "b-head"] {
            assert_eq!(topo.host(head).unwrap().masquerades[0].mode, NatMode::FullyRandom);
        }
        let toml = topo.to_toml();
        assert!(toml.contains("mode = \"fully-random\""), "{toml}");
        assert_eq!(Topology::from_toml(&toml).unwrap(), topo);
        assert!(!preset("two-clusters", &PresetOptions::default())
            .unwrap()
            .to_toml()
            .contains("mode"));
    }

    #[test]
    fn a_delay_turns_the_public_segment_into_a_wan_link() {
        let mut opts = PresetOptions::default();
        opts.wan.delay_ms = 10.0;
        let topo = preset("two-clusters", &opts).unwrap();
        assert!(topo.segment("pub").unwrap().wan.is_some());
        assert!(preset("lan", &PresetOptions::default())
            .unwrap()
            .segment("lan")
            .unwrap()
            .wan
            .is_none());
        opts.wan = WanImpairment {
            loss_pct: 1.0,
            ..Default::default()
        };
        opts.nodes = Some(2);
        assert!(preset("lan", &opts)
            .unwrap()
            .segment("lan")
            .unwrap()
            .wan
            .is_some());
        assert!(preset("wan", &PresetOptions::default())
            .unwrap()
            .segment("wan")
            .unwrap()
            .wan
            .is_some());
    }
}
