//! How a rank ended, in words and as an exit status.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Name of a signal (`SIGKILL`), or `signal N` for one without a name here.
pub fn signal_name(signo: i32) -> String {
    signal_hook::low_level::signal_name(signo).map_or_else(|| format!("signal {signo}"), str::to_string)
}

/// How a rank ended, as far as the job is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exit status 0, and finalize was called if the rank had said hello.
    Success,
    /// Anything else: `cause` completes "rank R (pid P on NODE) …", `code` is the
    /// exit status `pontoon run` reports for it.
    Failure { cause: String, code: i32 },
}

/// Classifies a rank's exit. `said_hello`: it authenticated on the control channel;
/// `finalized`: it sent `Finalize`. A rank that never said hello (a plain program)
/// only needs exit status 0.
pub fn outcome(status: ExitStatus, said_hello: bool, finalized: bool) -> Outcome {
    if let Some(sig) = status.signal() {
        return Outcome::Failure {
            cause: format!("was killed by signal {sig} ({})", signal_name(sig)),
            code: 128 + sig,
        };
    }
    match status.code() {
        Some(0) if said_hello && !finalized => Outcome::Failure {
            cause: "exited without calling finalize".into(),
            code: 1,
        },
        Some(0) => Outcome::Success,
        Some(c) => Outcome::Failure {
            cause: format!("exited with code {c}"),
            code: c,
        },
        // Stopped or continued statuses are not exits; wait() does not report them.
        None => Outcome::Failure {
            cause: format!("ended with status {status}"),
            code: 1,
        },
    }
}

/// Exit status for `MPI_Abort(code)`: like `exit(code)` (low 8 bits), except that a
/// non-zero code never turns into a success.
pub fn abort_exit_code(code: i32) -> i32 {
    let low = code & 0xff;
    if low == 0 && code != 0 {
        1
    } else {
        low
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_exits() {
        let exited = |c: i32| ExitStatus::from_raw(c << 8);
        let killed = |s: i32| ExitStatus::from_raw(s);
        assert_eq!(outcome(exited(0), false, false), Outcome::Success);
        assert_eq!(outcome(exited(0), true, true), Outcome::Success);
        assert_eq!(
            outcome(exited(0), true, false),
            Outcome::Failure {
                cause: "exited without calling finalize".into(),
                code: 1
            }
        );
        assert_eq!(
            outcome(exited(3), true, true),
            Outcome::Failure {
                cause: "exited with code 3".into(),
                code: 3
            }
        );
        assert_eq!(
            outcome(killed(9), false, false),
            Outcome::Failure {
                cause: "was killed by signal 9 (SIGKILL)".into(),
                code: 137
            }
        );
        assert_eq!(signal_name(15), "SIGTERM");
    }

    #[test]
    fn abort_codes() {
        assert_eq!(abort_exit_code(0), 0);
        assert_eq!(abort_exit_code(3), 3);
        assert_eq!(abort_exit_code(255), 255);
        assert_eq!(abort_exit_code(256), 1);
        assert_eq!(abort_exit_code(257), 1);
        assert_eq!(abort_exit_code(-1), 255);
    }
}
