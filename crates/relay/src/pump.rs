//! Moving a stream's bytes in the kernel: `splice(2)` from the socket into a pipe and from
//! the pipe into the other socket, so a forwarded byte is never copied to user space (the
//! seed's point: a user-level proxy that copies costs half the bandwidth).

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};

/// Bytes asked for per `splice` (a pipe holds 64 KiB by default).
const CHUNK: usize = 64 << 10;

/// Moves everything `from` sends to `to`, then passes the end of the stream on (half
/// close), so that each direction ends on its own. Counts the bytes into `bytes`.
pub fn pump(from: &TcpStream, to: &TcpStream, bytes: &AtomicU64) -> io::Result<()> {
    let (pipe_out, pipe_in) = pipe_with(PipeFlags::CLOEXEC)?;
    let result = (|| loop {
        let n = match splice(from, None, &pipe_in, None, CHUNK, SpliceFlags::MOVE) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        };
        let mut left = n;
        while left > 0 {
            match splice(&pipe_out, None, to, None, left, SpliceFlags::MOVE) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(m) => left -= m,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io::Error::from(e)),
            }
        }
        bytes.fetch_add(n as u64, Ordering::Relaxed);
    })();
    // Either way this direction is over: tell the receiver, and stop the sender's side
    // from waiting on us if the other end failed.
    let _ = to.shutdown(Shutdown::Write);
    if result.is_err() {
        let _ = from.shutdown(Shutdown::Read);
    }
    result
}
