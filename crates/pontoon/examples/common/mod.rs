//! Shared by the test programs (not an example of its own).

use pontoon::Error;

/// Fails the program with `what` unless `ok`.
pub fn ensure(ok: bool, what: impl FnOnce() -> String) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::Runtime(what()))
    }
}
