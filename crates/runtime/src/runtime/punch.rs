//! Hole punching as the event loop drives it (the state is `fabric::tcp::punch`).

use std::net::TcpStream;
use std::time::{Duration, Instant};

use proto::punch::PunchEvent;
use proto::{Nanos, PathKind, Rank};

use super::Runtime;
use crate::fabric::tcp;
use crate::fabric::tcp::punch::{failure, poll_connect, Connect};
use crate::fabric::tcp::wireup::Outgoing;

impl Runtime {
    fn punch_clock(&self) -> Nanos {
        self.life.start.elapsed().as_nanos() as Nanos
    }

    /// A relayed lane that this rank set up with `peer` is up: try for a direct one.
    pub(super) fn start_punch(&mut self, peer: Rank) {
        if self.cfg.paths.contains(&PathKind::Punched) {
            self.fabrics.tcp.punching.puncher.start(peer);
            self.drive_puncher();
        }
    }

    /// A PUNCH frame from `peer`.
    pub(super) fn punch_frame(&mut self, peer: Rank, msg: proto::wire::PunchMsg) {
        let now = self.punch_clock();
        self.fabrics.tcp.punching.puncher.handle(peer, msg, now);
        self.drive_puncher();
    }

    /// Carries out what the puncher asks.
    fn drive_puncher(&mut self) {
        while let Some(ev) = self.fabrics.tcp.punching.puncher.poll() {
            match ev {
                PunchEvent::Send { peer, msg } => self.ep.send_punch(peer, msg),
                PunchEvent::Bind { peer, round, like } => {
                    let mine = self.fabrics.tcp.punching.bind(peer, round, like);
                    let now = self.punch_clock();
                    self.fabrics.tcp.punching.puncher.address(peer, round, mine, now);
                }
                PunchEvent::Dial {
                    peer,
                    round,
                    to,
                    at,
                    lead,
                } => {
                    let when = self.life.start + Duration::from_nanos(at);
                    if let Some(d) = self
                        .fabrics
                        .tcp
                        .punching
                        .dials
                        .iter_mut()
                        .find(|d| d.peer == peer && d.round == round)
                    {
                        d.plan = Some((to, when, lead));
                    }
                    // The follower dials now: any delay is a gap the SYNs must cross in.
                    self.drive_punch_dials();
                }
                PunchEvent::GaveUp { peer, why } => {
                    tracing::info!(
                        "rank {}: no punched lane with rank {peer}, the relay carries on: {why}",
                        self.job.id.rank
                    );
                    self.fabrics.tcp.punching.dials.retain(|d| d.peer != peer);
                    self.fabrics.tcp.punching.notes.insert(peer, why);
                }
            }
        }
    }

    /// Starts the dials that are due and hands connected ones to the handshake.
    pub(super) fn drive_punch_dials(&mut self) {
        let now = Instant::now();
        let limit = self.cfg.attempt_timeout;
        // An accepted side's handshake that failed does not say with whom: its round ends
        // here once a handshake would have finished.
        let stale: Vec<Rank> = self
            .fabrics
            .tcp
            .punching
            .handshaking
            .iter()
            .filter(|(_, (_, since))| now.duration_since(*since) > 2 * limit)
            .map(|(p, _)| *p)
            .collect();
        for peer in stale {
            self.punch_handshake_done(peer, Err("the handshake did not finish".into()));
        }
        let mut i = 0;
        while i < self.fabrics.tcp.punching.dials.len() {
            let d = &mut self.fabrics.tcp.punching.dials[i];
            let Some((to, when, lead)) = d.plan else {
                i += 1;
                continue;
            };
            let outcome = match d.connecting {
                None if now < when => Connect::Pending,
                None => {
                    d.connecting = Some(now);
                    match d.sock.connect(&to.into()) {
                        Ok(()) => Connect::Done,
                        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INPROGRESS.raw_os_error()) => {
                            Connect::Pending
                        }
                        Err(e) => Connect::Failed(failure(&e)),
                    }
                }
                // A NAT that drops an early SYN (rather than answer it) is passed by the
                // kernel's second SYN, a second later: by then the far side has opened it.
                Some(since) if now.duration_since(since) > 3 * limit => {
                    Connect::Failed(format!("no answer within {} ms", 3 * limit.as_millis()))
                }
                Some(_) => poll_connect(&d.sock),
            };
            let (peer, round) = (d.peer, d.round);
            match outcome {
                Connect::Pending => i += 1,
                Connect::Failed(why) => {
                    self.fabrics.tcp.punching.dials.swap_remove(i);
                    tracing::debug!(
                        "rank {}: punching rank {peer}, round {round}: {to}: {why}",
                        self.job.id.rank
                    );
                    self.fabrics
                        .tcp
                        .punching
                        .puncher
                        .failed(peer, round, &format!("{to}: {why}"));
                    self.drive_puncher();
                }
                Connect::Done => {
                    let d = self.fabrics.tcp.punching.dials.swap_remove(i);
                    let sock: TcpStream = d.sock.into();
                    self.fabrics.tcp.punching.handshaking.insert(peer, (round, now));
                    if lead {
                        let timing = tcp::race_timing(&self.cfg, self.cfg.attempt_timeout);
                        let at = crate::clock::now();
                        let mut o = Outgoing::punched(peer, sock, to, timing, at);
                        o.seal = tcp::seal(&self.cfg, &self.job.cards, self.job.id.rank, peer);
                        self.fabrics.tcp.outgoing.push(o);
                    } else {
                        self.take_incoming(sock);
                    }
                }
            }
        }
    }

    /// The handshake on a punched connection with `peer` ended.
    pub(super) fn punch_handshake_done(&mut self, peer: Rank, result: Result<(), String>) {
        let Some((round, _)) = self.fabrics.tcp.punching.handshaking.remove(&peer) else {
            return;
        };
        match result {
            Ok(()) => {
                self.fabrics.tcp.punching.notes.remove(&peer);
                self.fabrics.tcp.punching.puncher.succeeded(peer);
            }
            Err(why) => self.fabrics.tcp.punching.puncher.failed(peer, round, &why),
        }
        self.drive_puncher();
    }
}
