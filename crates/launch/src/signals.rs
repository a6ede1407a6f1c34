//! SIGINT, SIGTERM and SIGCHLD as readable file descriptors (self-pipes), so the
//! single-threaded event loop sees them like any other event.
//!
//! signal-hook's handler only writes a byte to a non-blocking socket — the one thing
//! that is async-signal-safe — and installing it (raw signal handling) stays inside signal-hook.

use signal_hook::consts::{SIGCHLD, SIGINT, SIGTERM};
use signal_hook::SigId;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// The signals the launcher handles.
pub(crate) const HANDLED: [i32; 3] = [SIGINT, SIGTERM, SIGCHLD];

pub(crate) struct SignalPipes {
    /// Read ends, one per signal of [`HANDLED`], in that order.
    read: Vec<UnixStream>,
    ids: Vec<SigId>,
}

impl SignalPipes {
    pub(crate) fn install() -> io::Result<SignalPipes> {
        let mut p = SignalPipes {
            read: Vec::new(),
            ids: Vec::new(),
        };
        for sig in HANDLED {
            let (r, w) = UnixStream::pair()?;
            r.set_nonblocking(true)?;
            w.set_nonblocking(true)?;
            // On error `p` drops and unregisters what was registered so far.
            p.ids.push(signal_hook::low_level::pipe::register(sig, w)?);
            p.read.push(r);
        }
        Ok(p)
    }

    pub(crate) fn fd(&self, i: usize) -> BorrowedFd<'_> {
        self.read[i].as_fd()
    }

    /// Empties pipe `i`; true if its signal arrived at least once since the last call.
    pub(crate) fn take(&mut self, i: usize) -> bool {
        let mut buf = [0u8; 64];
        let mut got = false;
        loop {
            match self.read[i].read(&mut buf) {
                Ok(0) => return got,
                Ok(_) => got = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // WouldBlock: emptied. Nothing else can fail on a socket pair we own.
                Err(_) => return got,
            }
        }
    }
}

impl Drop for SignalPipes {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
