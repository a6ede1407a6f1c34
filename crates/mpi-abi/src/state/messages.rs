//! A message claimed by MPI_Mprobe / MPI_Improbe, as the message table keeps it.

use pontoon::lent::Message;
use pontoon::Comm;

use crate::abi::*;

/// A probed message: the communicator it came on (and its handle) and its claim.
pub struct MessageEntry {
    pub comm: Comm<'static>,
    pub handle: MPI_Comm,
    pub msg: Message,
}
