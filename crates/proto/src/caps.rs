//! What a lane can do, as reported by its transport, and the one scoring function
//! that turns the lanes' capabilities into protocol choices ([`plan`]).

/// A lane's identity: given by the engine when the lane comes up
/// ([`crate::Endpoint::handle_lane_up`]), never reused within a rank's life, and the
/// only name the runtime, its epoll sets and `pontoon doctor` use for the lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneId(pub u32);

impl LaneId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for LaneId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lane {}", self.0)
    }
}

/// Capabilities of one lane (a connected link to one peer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Caps {
    /// Typical one-way latency in nanoseconds.
    pub latency_ns: u64,
    /// Typical bandwidth in bytes per second.
    pub bandwidth: u64,
    /// Largest payload one frame may carry on this lane.
    pub max_frame: u32,
    pub reliable: bool,
    pub ordered: bool,
    /// Both ends are on one node (shared memory): no network in between. Such a lane
    /// ends with its peer's process, and the node says whether that process finalized
    /// first ([`crate::Endpoint::handle_peer_finalized`]): a peer reached only by such
    /// lanes gets no goodbye frame.
    pub node_local: bool,
    /// The lane passes through a relay (a user-level hop on a front-end node).
    pub relayed: bool,
    /// Frames go straight to the link layer (raw Ethernet), with no kernel transport
    /// stack. Its latency is measured by the application at both ends, while a TCP
    /// lane's comes from the kernel (`TCP_INFO`), which leaves out both ends' socket
    /// layers: the two figures are not alike (see [`plan`]).
    pub raw: bool,
    /// Largest eager message one datagram of this lane carries (raw lanes; 0 for a
    /// stream). A raw lane beside a kernel lane carries eager messages up to this size
    /// only (seed 003's "below 1488 bytes"); alone, it carries up to the eager limit, cut
    /// into datagrams by its reliability layer.
    pub datagram: u32,
    /// The peer's memory can be read from this end in one copy (`process_vm_readv`
    /// worked between the two at start-up): a rendezvous message on this lane is read
    /// by its receiver, not sent in fragments.
    pub single_copy: bool,
}

impl Caps {
    /// Whether the lane crosses a wide-area link: its round trip is at least
    /// [`WAN_RTT_NS`]. A WAN lane gets a larger eager limit
    /// ([`crate::EngineConfig::wan_eager_limit`]), parallel streams
    /// ([`parallel_streams`]) and a stream of its own for control frames ([`plan`]).
    pub fn is_wan(&self) -> bool {
        !self.node_local && self.latency_ns.saturating_mul(2) >= WAN_RTT_NS
    }
}

/// The round trip from which a lane counts as a WAN lane: 2 ms. A LAN's is tens of µs
/// (a loaded one's a few hundred), a metropolitan link's a millisecond or two, and from
/// there on a rendezvous's round trip costs more than sending 64 KiB at 1 Gbit/s.
pub const WAN_RTT_NS: u64 = 2_000_000;

/// Most TCP streams one WAN path gets ([`parallel_streams`]): each costs a socket, its
/// buffers and a read on every progress pass.
pub const MAX_WAN_STREAMS: u32 = 8;

/// Fewest streams of a WAN path. Buffers alone would often ask for one, but over a
/// lossy long path a stream's window is bounded by its losses, not its buffers (a
/// loss halves one CUBIC window, about 1.2 / sqrt(p) segments per round trip): each
/// more stream adds a window, while one loss slows only its own stream.
pub const MIN_WAN_STREAMS: u32 = 4;

/// How many TCP streams a path of round trip `rtt_ns` gets: one on a LAN; on a WAN
/// enough for the bandwidth-delay product at `rate` bytes/s (what the local NIC can
/// send) given `window`, the most one socket may have in flight (the kernel's
/// autotuning limits), from [`MIN_WAN_STREAMS`] to [`MAX_WAN_STREAMS`].
/// `PONTOON_WAN_STREAMS` overrides the count.
pub fn parallel_streams(rtt_ns: u64, rate: u64, window: u64) -> u32 {
    if rtt_ns < WAN_RTT_NS {
        return 1;
    }
    let bdp = u128::from(rate) * u128::from(rtt_ns) / 1_000_000_000;
    let needed = bdp.div_ceil(u128::from(window.max(1)));
    needed.clamp(u128::from(MIN_WAN_STREAMS), u128::from(MAX_WAN_STREAMS)) as u32
}

/// One-way cost of what a kernel-stack lane's measured latency leaves out: the system
/// calls that send and receive at the two ends and the socket layer's wake-up. On the
/// testbed pontoon's TCP one-way latency is 1–2 µs above its lane's figure (half the
/// kernel's smallest round trip), which streaming brings down to under 1 µs.
pub const KERNEL_SOCKET_NS: u64 = 2_000;

/// Largest eager message a raw lane carries beside a kernel lane (and at most one
/// datagram, [`Caps::datagram`]): per byte a raw lane costs about four times what TCP
/// does (the keyed tag at both ends, copies), so on the testbed it is the faster up to
/// about 1 KiB and the slower from 2 KiB on, even where a jumbo datagram holds 8 KiB
/// (`pontoon bench experiment 003`).
pub const RAW_SMALL_MAX: u32 = 1024;

/// When a sender lets a node-local receiver read a message straight out of its memory
/// (the lane's [`Caps::single_copy`]; `PONTOON_SINGLE_COPY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SingleCopy {
    /// Every rendezvous message, and an eager-sized one that would otherwise wait behind
    /// a backed-up lane while the peer sends too ([`reads_in_one_copy`]); other eager
    /// messages go through the lane (`auto`).
    #[default]
    Auto,
    /// Also every eager-sized message of [`ONE_COPY_FROM`] or more (`on`): its sender
    /// waits for the receiver's read, as above the eager limit, so two ranks that both
    /// send such a message before either receives wait for each other.
    Always,
}

/// Smallest message read in one copy: below, the system call costs more than staging the
/// bytes through the lane (`transport::shm::cma`; an alltoall of 8 KiB blocks on 4 ranks,
/// some of them rendezvous for want of credit, took 1.18× as long in one copy).
pub const ONE_COPY_FROM: u64 = 16 << 10;

/// How busy a lane of eager messages is when a message is posted, as the runtime reads
/// it (only where [`reads_in_one_copy`] looks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes written to the peer that it has not taken yet.
    pub backlog: u64,
    /// The peer's bytes wait on the lane: it sends to this rank too.
    pub peer_sending: bool,
}

/// Whether a message of `len` bytes goes as a rendezvous its receiver reads in one copy
/// out of the sender's memory, the sender's lane of eager messages to that peer having
/// `caps` and `traffic` (`eager`: the message would otherwise go eagerly; `reading`: a
/// message offered in one copy to the same peer is still being read).
///
/// A rendezvous message of [`ONE_COPY_FROM`] or more always: pulled in fragments through the ring, every byte is
/// copied twice and crosses between the cores with each fragment's request, and the OSU
/// benchmarks (their buffers reused, as applications reuse theirs) measured the ring at
/// 0.6× MPICH's osu_bw and 0.36× its osu_bibw from 128 KiB on, and 2.6× its
/// osu_latency; read in one copy, 1.0–1.05× (`docs/perf.md`).
///
/// An eager-sized message goes through the ring, so that its sender is done at once
/// (two ranks that send each other one before receiving do not wait for each other),
/// unless it would wait behind a ring that already holds as much while the peer sends
/// too: both directions' copies then run on both cores, and a 64 KiB bibw went at 23
/// GB/s in one copy against 19 through the ring; those behind it follow while it is read
/// (a window of sends goes one way, not half through the ring). With
/// [`SingleCopy::Always`], every one of [`ONE_COPY_FROM`] or more.
pub fn reads_in_one_copy(
    caps: &Caps,
    policy: SingleCopy,
    len: u64,
    eager: bool,
    traffic: Traffic,
    reading: bool,
) -> bool {
    if !caps.single_copy || len < ONE_COPY_FROM {
        return false;
    }
    let both_ways = traffic.backlog >= len && traffic.peer_sending;
    !eager || policy == SingleCopy::Always || both_ways || reading
}

/// Which lanes of one peer carry what, decided by [`plan`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LanePlan {
    /// Index (into the lanes given) of the lane for eager messages and control frames.
    pub eager: usize,
    /// Indices of the lanes that pull rendezvous fragments.
    pub bulk: Vec<usize>,
    /// Where eager messages above one datagram ([`Caps::datagram`], at most
    /// [`RAW_SMALL_MAX`]) go when the eager lane is raw: the best kernel-stack lane.
    pub large_eager: Option<usize>,
}

/// The one place where lanes are scored. Eager messages and control frames take the
/// lowest-latency lane (the first on ties); `current`, the lane that carries them now,
/// keeps them unless another is more than twice as fast: measured figures wobble, and
/// lanes of one kind (two NICs on one network) should not trade places over noise,
/// while a LAN lane beats a WAN or relayed one by far more. Rendezvous
/// fragments are striped over the lanes of the best kind only: node-local lanes when
/// there are any (striping one transfer over shared memory and loopback TCP would only
/// slow the fast lane down with the slow one's tail), else every network lane, each
/// pulling in proportion to its bandwidth. Lanes that are not reliable and ordered are
/// not used (a raw transport is made reliable inside its link: `crate::reliable`); a
/// raw lane is compared with kernel-stack lanes as [`Caps::raw`] says. A WAN path's
/// parallel streams leave the one of eager messages and control frames out of the bulk
/// once two others pull fragments: behind a WAN lane's queue of fragments a small
/// message would wait for milliseconds. A relayed lane carries
/// nothing once the peer has a lane that is not (a punched one): the relay's hop costs
/// latency and a front end's CPU shared by the whole cluster, whatever the measured
/// figures say; the relayed lane stays open.
pub fn plan(lanes: &[Caps], current: Option<usize>) -> Option<LanePlan> {
    let fit = Fitness::of(lanes);
    let fastest = |raw: bool| fit.fastest(raw);
    // A raw lane's latency is an application-to-application figure, a kernel stack's
    // a kernel-to-kernel one, which leaves out the very costs a raw lane saves (a send
    // and a receive system call, KERNEL_SOCKET_NS): with those added, within a factor
    // of two the raw lane is taken to be the faster (on one segment it is). Without
    // them, a TCP lane that streams (its acknowledgements immediate, its measured round
    // trip a few µs on a veth pair) took small messages from the raw lane.
    let best = match (fastest(true), fastest(false)) {
        (Some(r), Some(k))
            if u128::from(lanes[r].latency_ns)
                <= 2 * (u128::from(lanes[k].latency_ns) + u128::from(KERNEL_SOCKET_NS)) =>
        {
            r
        }
        (Some(_), Some(k)) => k,
        (r, k) => r.or(k)?,
    };
    let eager = match current.filter(|&i| lanes.get(i).is_some_and(|c| fit.usable(c))) {
        Some(i)
            if lanes[i].raw == lanes[best].raw
                && u128::from(lanes[best].latency_ns) * 2 >= u128::from(lanes[i].latency_ns) =>
        {
            i
        }
        _ => best,
    };
    let mut bulk: Vec<usize> = (0..lanes.len()).filter(|&i| fit.pulls(i)).collect();
    if lanes[eager].is_wan() && bulk.len() >= 3 {
        bulk.retain(|&i| i != eager);
    }
    let large_eager = fit.kernel.filter(|_| lanes[eager].raw);
    Some(LanePlan {
        eager,
        bulk,
        large_eager,
    })
}

/// Why [`plan`] gives a lane nothing to carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassedOver {
    /// Not reliable and ordered.
    Unreliable,
    /// Relayed, while the peer has a lane that is not.
    Relayed,
    /// A network lane beside node-local ones, which are faster for everything.
    OffNode,
    /// A raw lane beside a kernel stack's lane that is faster for small messages and
    /// carries bulk.
    RawBesideKernel,
}

impl std::fmt::Display for PassedOver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PassedOver::Unreliable => "not reliable and ordered",
            PassedOver::Relayed => "relayed, while a lane that is not exists",
            PassedOver::OffNode => "a network lane beside node-local ones",
            PassedOver::RawBesideKernel => {
                "raw, beside a kernel-stack lane that is faster for small messages and carries bulk"
            }
        })
    }
}

/// What one lane carries under a plan, or why nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneUse {
    Carries {
        /// Eager messages and control frames.
        eager: bool,
        /// Rendezvous fragments.
        bulk: bool,
        /// Eager messages above a raw eager lane's datagram.
        large_eager: bool,
    },
    PassedOver(PassedOver),
}

impl LaneUse {
    /// What lane `i` of `lanes` carries under `plan`.
    pub fn of(lanes: &[Caps], plan: &LanePlan, i: usize) -> LaneUse {
        let (eager, bulk, large_eager) = (
            plan.eager == i,
            plan.bulk.contains(&i),
            plan.large_eager == Some(i),
        );
        match passed_over(lanes, plan).into_iter().find(|&(j, _)| j == i) {
            Some((_, why)) => LaneUse::PassedOver(why),
            None => LaneUse::Carries {
                eager,
                bulk,
                large_eager,
            },
        }
    }
}

impl std::fmt::Display for LaneUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            LaneUse::PassedOver(why) => write!(f, "nothing: {why}"),
            LaneUse::Carries {
                eager,
                bulk,
                large_eager,
            } => {
                let parts: Vec<&str> = [(eager, "eager"), (bulk, "bulk"), (large_eager, "large eager")]
                    .into_iter()
                    .filter_map(|(on, name)| on.then_some(name))
                    .collect();
                f.write_str(&parts.join(" + "))
            }
        }
    }
}

/// Why each lane that `plan` (made of `lanes`) gives nothing to carry is passed over, by
/// index into `lanes`.
pub fn passed_over(lanes: &[Caps], plan: &LanePlan) -> Vec<(usize, PassedOver)> {
    let fit = Fitness::of(lanes);
    let carries = |i: usize| plan.eager == i || plan.bulk.contains(&i) || plan.large_eager == Some(i);
    (0..lanes.len())
        .filter(|&i| !carries(i))
        .map(|i| {
            let c = &lanes[i];
            let why = if !(c.reliable && c.ordered) {
                PassedOver::Unreliable
            } else if !fit.usable(c) {
                PassedOver::Relayed
            } else if c.node_local != fit.local {
                PassedOver::OffNode
            } else {
                PassedOver::RawBesideKernel
            };
            (i, why)
        })
        .collect()
}

/// What [`plan`] and [`passed_over`] judge lanes by.
struct Fitness<'a> {
    lanes: &'a [Caps],
    /// The peer has a reliable lane that is not relayed.
    unrelayed: bool,
    /// The peer has a usable node-local lane.
    local: bool,
    /// The fastest usable kernel-stack lane.
    kernel: Option<usize>,
}

impl Fitness<'_> {
    fn of(lanes: &[Caps]) -> Fitness<'_> {
        let mut fit = Fitness {
            lanes,
            unrelayed: lanes.iter().any(|c| c.reliable && c.ordered && !c.relayed),
            local: false,
            kernel: None,
        };
        fit.local = lanes.iter().any(|c| fit.usable(c) && c.node_local);
        fit.kernel = fit.fastest(false);
        fit
    }

    fn usable(&self, c: &Caps) -> bool {
        c.reliable && c.ordered && !(self.unrelayed && c.relayed)
    }

    fn fastest(&self, raw: bool) -> Option<usize> {
        self.lanes
            .iter()
            .enumerate()
            .filter(|(_, c)| self.usable(c) && c.raw == raw)
            .min_by_key(|(_, c)| c.latency_ns)
            .map(|(i, _)| i)
    }

    /// Whether lane `i` pulls rendezvous fragments. Bulk never goes over a raw lane
    /// beside a kernel stack's: a raw lane moves one MTU per frame and system call,
    /// where the kernel segments and checksums 64 KiB at a time (on the testbed 0.3
    /// against 5 GB/s).
    fn pulls(&self, i: usize) -> bool {
        let c = &self.lanes[i];
        self.usable(c) && c.node_local == self.local && !(c.raw && self.kernel.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane(latency_ns: u64, node_local: bool) -> Caps {
        Caps {
            latency_ns,
            bandwidth: 1,
            max_frame: 1 << 20,
            reliable: true,
            ordered: true,
            node_local,
            relayed: false,
            raw: false,
            datagram: 0,
            single_copy: false,
        }
    }

    #[test]
    fn the_eager_lane_is_the_fastest_and_the_first_on_ties() {
        assert_eq!(plan(&[], None), None);
        let p = plan(&[lane(30, false), lane(10, false), lane(20, false)], None).unwrap();
        assert_eq!(p.eager, 1);
        assert_eq!(p.bulk, vec![0, 1, 2]);
        assert_eq!(plan(&[lane(10, false), lane(10, false)], None).unwrap().eager, 0);
    }

    #[test]
    fn bulk_never_mixes_node_local_and_network_lanes() {
        let p = plan(&[lane(9000, false), lane(300, true), lane(8000, false)], None).unwrap();
        assert_eq!(
            p,
            LanePlan {
                eager: 1,
                bulk: vec![1],
                large_eager: None,
            }
        );
    }

    #[test]
    fn the_eager_lane_moves_only_for_a_clearly_faster_one() {
        let lanes = [lane(100, false), lane(60, false)];
        assert_eq!(plan(&lanes, Some(0)).unwrap().eager, 0, "40% faster: stays");
        assert_eq!(plan(&lanes, None).unwrap().eager, 1);
        let lanes = [lane(100, false), lane(45, false)];
        assert_eq!(
            plan(&lanes, Some(0)).unwrap().eager,
            1,
            "more than twice as fast: moves"
        );
        assert_eq!(plan(&lanes, Some(5)).unwrap().eager, 1, "a lane that is gone");
    }

    #[test]
    fn unreliable_lanes_carry_nothing_yet() {
        let mut raw = lane(1, false);
        raw.reliable = false;
        let p = plan(&[raw, lane(50, false)], None).unwrap();
        assert_eq!(
            p,
            LanePlan {
                eager: 1,
                bulk: vec![1],
                large_eager: None,
            }
        );
        assert_eq!(plan(&[raw], None), None);
    }

    #[test]
    fn a_raw_lane_carries_eager_messages_unless_it_measures_far_slower() {
        let mut raw = lane(6_000, false);
        raw.raw = true;
        let tcp = lane(4_000, false);
        let p = plan(&[tcp, raw], Some(0)).unwrap();
        assert_eq!(
            p.eager, 1,
            "user-level 6 µs against kernel-level 4 µs: the raw lane"
        );
        assert_eq!(p.bulk, vec![0], "bulk stays on the kernel stack");
        assert_eq!(p.large_eager, Some(0), "so do eager messages above a datagram");
        assert_eq!(
            plan(&[raw], None).unwrap().bulk,
            vec![0],
            "a raw lane alone carries all"
        );
        let (mut streaming, mut fast) = (tcp, raw);
        (streaming.latency_ns, fast.latency_ns) = (600, 3_500);
        assert_eq!(
            plan(&[streaming, fast], Some(1)).unwrap().eager,
            1,
            "a streaming TCP lane's few µs do not take small messages from the raw lane"
        );
        let mut far = raw;
        far.latency_ns = 13_000;
        assert_eq!(
            plan(&[tcp, far], Some(1)).unwrap().eager,
            0,
            "more than twice as slow"
        );
        let mut fast_tcp = tcp;
        fast_tcp.latency_ns = 500;
        assert_eq!(plan(&[fast_tcp, raw], None).unwrap().eager, 0);
    }

    #[test]
    fn a_wan_path_keeps_one_stream_for_control_frames_once_two_others_pull_fragments() {
        let wan = lane(25_000_000, false);
        assert!(wan.is_wan() && !lane(500_000, false).is_wan());
        assert_eq!(
            plan(&[wan, wan], None).unwrap().bulk,
            vec![0, 1],
            "two: both pull"
        );
        let p = plan(&[wan, wan, wan, wan], None).unwrap();
        assert_eq!((p.eager, p.bulk), (0, vec![1, 2, 3]));
        let lan = [lane(20_000, false), lane(20_000, false), lane(20_000, false)];
        assert_eq!(
            plan(&lan, None).unwrap().bulk,
            vec![0, 1, 2],
            "NIC lanes of a LAN all pull"
        );
    }

    #[test]
    fn wan_paths_get_streams_for_their_bandwidth_delay_product_within_bounds() {
        const GBIT: u64 = 125_000_000;
        assert_eq!(parallel_streams(100_000, 10 * GBIT, 1 << 20), 1, "a LAN: one");
        assert_eq!(
            parallel_streams(10_000_000, GBIT, 64 << 20),
            MIN_WAN_STREAMS,
            "buffers suffice, loss may not"
        );
        // 10 Gbit/s over 100 ms is 125 MB in flight; 32 MiB windows need 4 streams.
        assert_eq!(parallel_streams(100_000_000, 10 * GBIT, 32 << 20), 4);
        assert_eq!(parallel_streams(100_000_000, 10 * GBIT, 20 << 20), 6);
        assert_eq!(
            parallel_streams(100_000_000, 10 * GBIT, 3 << 20),
            MAX_WAN_STREAMS,
            "the kernel's default limits would need 40"
        );
    }

    #[test]
    fn a_direct_lane_takes_everything_from_a_relayed_one() {
        let mut relayed = lane(100, false);
        relayed.relayed = true;
        let punched = lane(95, false);
        assert_eq!(
            plan(&[relayed, punched], Some(0)).unwrap(),
            LanePlan {
                eager: 1,
                bulk: vec![1],
                large_eager: None,
            },
            "not twice as fast, yet it moves: the relay is a hop, not a wobble"
        );
        let p = plan(&[relayed, lane(50, false), relayed], None).unwrap();
        assert_eq!(p.bulk, vec![1]);
        assert_eq!(
            plan(&[relayed, relayed], Some(1)).unwrap(),
            LanePlan {
                eager: 1,
                bulk: vec![0, 1],
                large_eager: None,
            },
            "relayed lanes alone carry everything"
        );
    }

    #[test]
    fn every_lane_given_nothing_says_why() {
        let unreliable = Caps {
            reliable: false,
            ..lane(1_000, false)
        };
        let relayed = Caps {
            relayed: true,
            ..lane(100, false)
        };
        let raw_slow = Caps {
            raw: true,
            ..lane(900_000, false)
        };
        let lanes = [
            lane(5_000, false),
            unreliable,
            relayed,
            raw_slow,
            lane(2_000, false),
        ];
        let p = plan(&lanes, None).unwrap();
        assert_eq!(
            passed_over(&lanes, &p),
            vec![
                (1, PassedOver::Unreliable),
                (2, PassedOver::Relayed),
                (3, PassedOver::RawBesideKernel)
            ]
        );
        assert_eq!(
            LaneUse::of(&lanes, &p, 4).to_string(),
            "eager + bulk",
            "the fastest lane carries both"
        );
        assert_eq!(LaneUse::of(&lanes, &p, 0).to_string(), "bulk");
        assert_eq!(
            LaneUse::of(&lanes, &p, 2).to_string(),
            "nothing: relayed, while a lane that is not exists"
        );
        let node = [lane(200, true), lane(10_000, false)];
        let p = plan(&node, None).unwrap();
        assert_eq!(passed_over(&node, &p), vec![(1, PassedOver::OffNode)]);
        // Every lane that carries something is left out.
        let two = [lane(1_000, false), lane(1_000, false)];
        assert_eq!(passed_over(&two, &plan(&two, None).unwrap()), vec![]);
    }
}
