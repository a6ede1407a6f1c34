//! The key request of tasks that `srun` started without a PMI (`runtime::srun`): a task
//! asks the rendezvous that task 0 started for the job secret and the coordinator's
//! addresses, and gets them inside a munge credential that only the job's user can
//! decode. Everything here comes from the network and is untrusted until munge vouches
//! for the grant.
//!
//! One line each way, ASCII, at most [`MAX_LINE`] bytes with its `\n`:
//! ```text
//! request   pontoon-srun-key 1 JOB NONCE        JOB, NONCE: 32 hex digits each
//! answer    cred CREDENTIAL                     munge's text form (MUNGE:…:)
//!           other-job                           this port serves another job: try the next
//!           refused WHY
//! grant     pontoon-srun-grant 1 JOB NONCE SECRET COORD
//!           (the credential's payload)          SECRET: 64 hex digits; COORD: the
//!                                               coordinator's connection string
//! ```
//! Task 0 starts the rendezvous with one line on its standard input (not the command
//! line, which other users see): `pontoon-srun-order 1 JOB SECRET SIZE WAIT PORT,PORT…`,
//! WAIT being the seconds every rank has to connect.

use crate::hex::hex;

/// Longest line either side sends or accepts (a credential of a 300-byte grant is
/// about 600 bytes).
pub const MAX_LINE: usize = 2048;

const REQUEST: &str = "pontoon-srun-key";
const GRANT: &str = "pontoon-srun-grant";
const ORDER: &str = "pontoon-srun-order";
const VERSION: &str = "1";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed srun key {what}: {why}")]
pub struct KeyLineError {
    pub what: &'static str,
    pub why: &'static str,
}

fn err(what: &'static str, why: &'static str) -> KeyLineError {
    KeyLineError { what, why }
}

/// What task 0 tells the rendezvous it starts.
#[derive(Clone, PartialEq, Eq)]
pub struct RendezvousOrder {
    pub job: [u8; 16],
    pub secret: [u8; 32],
    pub size: u32,
    /// Seconds every rank has to reach the rendezvous.
    pub wait_s: u32,
    /// Where to hand out the key: the first of these that is free.
    pub ports: Vec<u16>,
}

impl std::fmt::Debug for RendezvousOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RendezvousOrder")
            .field("size", &self.size)
            .field("ports", &self.ports)
            .finish_non_exhaustive()
    }
}

impl RendezvousOrder {
    pub fn encode(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        format!(
            "{ORDER} {VERSION} {} {} {} {} {}\n",
            hex(&self.job),
            hex(&self.secret),
            self.size,
            self.wait_s,
            ports.join(",")
        )
    }

    pub fn parse(line: &[u8]) -> Result<RendezvousOrder, KeyLineError> {
        let what = "order";
        let mut words = headed(line, ORDER, what)?;
        let job = unhex(words.next(), what)?;
        let secret = unhex(words.next(), what)?;
        let size = words
            .next()
            .and_then(|w| w.parse().ok())
            .filter(|&n| n > 0)
            .ok_or(err(what, "bad size"))?;
        let wait_s = words
            .next()
            .and_then(|w| w.parse().ok())
            .ok_or(err(what, "bad wait"))?;
        let ports = words
            .next()
            .ok_or(err(what, "no ports"))?
            .split(',')
            .map(|p| p.parse().ok().filter(|&p| p > 0))
            .collect::<Option<Vec<u16>>>()
            .ok_or(err(what, "bad ports"))?;
        end(words, what)?;
        Ok(RendezvousOrder {
            job,
            secret,
            size,
            wait_s,
            ports,
        })
    }
}

/// A task asks for the key of job `job`; `nonce` comes back in the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRequest {
    pub job: [u8; 16],
    pub nonce: [u8; 16],
}

/// What the rendezvous answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyAnswer {
    Credential(String),
    OtherJob,
    Refused(String),
}

/// What the credential carries.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyGrant {
    pub job: [u8; 16],
    pub nonce: [u8; 16],
    pub secret: [u8; 32],
    pub coord: String,
}

impl std::fmt::Debug for KeyGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyGrant")
            .field("coord", &self.coord)
            .field("secret", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl KeyRequest {
    pub fn encode(&self) -> String {
        format!("{REQUEST} {VERSION} {} {}\n", hex(&self.job), hex(&self.nonce))
    }

    pub fn parse(line: &[u8]) -> Result<KeyRequest, KeyLineError> {
        let what = "request";
        let mut words = headed(line, REQUEST, what)?;
        let job = unhex(words.next(), what)?;
        let nonce = unhex(words.next(), what)?;
        end(words, what)?;
        Ok(KeyRequest { job, nonce })
    }
}

impl KeyAnswer {
    pub fn encode(&self) -> String {
        match self {
            KeyAnswer::Credential(c) => format!("cred {c}\n"),
            KeyAnswer::OtherJob => "other-job\n".into(),
            // One line, whatever the reason says.
            KeyAnswer::Refused(why) => format!("refused {}\n", why.replace(['\n', '\r'], " ")),
        }
    }

    pub fn parse(line: &[u8]) -> Result<KeyAnswer, KeyLineError> {
        let what = "answer";
        let text = text(line, what)?;
        let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
        match word {
            "cred" if !rest.is_empty() && !rest.contains(' ') => Ok(KeyAnswer::Credential(rest.into())),
            "other-job" if rest.is_empty() => Ok(KeyAnswer::OtherJob),
            "refused" => Ok(KeyAnswer::Refused(rest.into())),
            _ => Err(err(what, "unknown answer")),
        }
    }
}

impl KeyGrant {
    /// The credential's payload (no line end: munge carries it whole).
    pub fn encode(&self) -> String {
        format!(
            "{GRANT} {VERSION} {} {} {} {}",
            hex(&self.job),
            hex(&self.nonce),
            hex(&self.secret),
            self.coord
        )
    }

    pub fn parse(payload: &[u8]) -> Result<KeyGrant, KeyLineError> {
        let what = "grant";
        let mut words = headed(payload, GRANT, what)?;
        let job = unhex(words.next(), what)?;
        let nonce = unhex(words.next(), what)?;
        let secret = unhex(words.next(), what)?;
        let coord = words.next().ok_or(err(what, "no coordinator"))?.to_string();
        end(words, what)?;
        Ok(KeyGrant {
            job,
            nonce,
            secret,
            coord,
        })
    }
}

/// The line as text, without its line end; bounded and printable.
fn text<'a>(line: &'a [u8], what: &'static str) -> Result<&'a str, KeyLineError> {
    if line.len() > MAX_LINE {
        return Err(err(what, "too long"));
    }
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    if !line.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Err(err(what, "not printable ASCII on one line"));
    }
    std::str::from_utf8(line).map_err(|_| err(what, "not ASCII"))
}

fn words<'a>(line: &'a [u8], what: &'static str) -> Result<std::str::Split<'a, char>, KeyLineError> {
    Ok(text(line, what)?.split(' '))
}

/// The words after the line's kind and version, which must be `tag` and [`VERSION`].
fn headed<'a>(
    line: &'a [u8],
    tag: &str,
    what: &'static str,
) -> Result<std::str::Split<'a, char>, KeyLineError> {
    let mut words = words(line, what)?;
    if words.next() != Some(tag) {
        return Err(err(what, "not a line of pontoon's srun rendezvous of this kind"));
    }
    if words.next() != Some(VERSION) {
        return Err(err(what, "unknown version"));
    }
    Ok(words)
}

fn end<'a>(mut words: impl Iterator<Item = &'a str>, what: &'static str) -> Result<(), KeyLineError> {
    match words.next() {
        None => Ok(()),
        Some(_) => Err(err(what, "trailing words")),
    }
}

fn unhex<const N: usize>(word: Option<&str>, what: &'static str) -> Result<[u8; N], KeyLineError> {
    let word = word.ok_or(err(what, "too few words"))?;
    crate::hex::unhex(word).ok_or(err(what, "a hex field is not 2N hex digits"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_round_trips() {
        let req = KeyRequest {
            job: [1; 16],
            nonce: [0xab; 16],
        };
        assert_eq!(KeyRequest::parse(req.encode().as_bytes()), Ok(req));
        for a in [
            KeyAnswer::Credential("MUNGE:AwQFAAB=:".into()),
            KeyAnswer::OtherJob,
            KeyAnswer::Refused("too many requests".into()),
        ] {
            assert_eq!(KeyAnswer::parse(a.encode().as_bytes()), Ok(a));
        }
        let grant = KeyGrant {
            job: [2; 16],
            nonce: [3; 16],
            secret: [4; 32],
            coord: "tcp://10.0.0.1:4000;tcp6://[fd00::1]:4000".into(),
        };
        assert_eq!(KeyGrant::parse(grant.encode().as_bytes()), Ok(grant.clone()));
        assert!(!format!("{grant:?}").contains("0404"), "Debug shows no secret");
        let order = RendezvousOrder {
            job: [5; 16],
            secret: [6; 32],
            size: 64,
            wait_s: 60,
            ports: vec![20001, 31999],
        };
        assert_eq!(
            RendezvousOrder::parse(order.encode().as_bytes()),
            Ok(order.clone())
        );
        assert!(RendezvousOrder::parse(order.encode().replace(" 64 ", " 0 ").as_bytes()).is_err());
        assert!(RendezvousOrder::parse(order.encode().replace("20001", "x").as_bytes()).is_err());
    }

    #[test]
    fn malformed_lines_are_refused() {
        let good = KeyRequest {
            job: [1; 16],
            nonce: [2; 16],
        }
        .encode();
        for bad in [
            "".to_string(),
            "pontoon-srun-key 2 00 00\n".into(),
            good.replace("0101", "01g1"),
            good.replace('\n', " extra\n"),
            good.replace("0202", "02"),
            good.replace("0101", "+1"),
            format!("{}\u{7f}", good.trim_end()),
            "x".repeat(MAX_LINE + 1),
        ] {
            assert!(KeyRequest::parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert!(KeyAnswer::parse(b"cred\n").is_err());
        assert!(KeyAnswer::parse(b"cred a b\n").is_err());
        assert!(KeyAnswer::parse(b"other-job now\n").is_err());
        assert_eq!(
            KeyAnswer::parse(KeyAnswer::Refused("a\nb".into()).encode().as_bytes()),
            Ok(KeyAnswer::Refused("a b".into()))
        );
        assert!(KeyGrant::parse(b"pontoon-srun-grant 1 00").is_err());
    }
}
