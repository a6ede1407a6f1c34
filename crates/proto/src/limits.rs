//! Limits that several layers must agree on, each defined once here.

/// Largest message of the immediate paths: a send written to the lane at once with no
/// request (`Runtime::send_small_now`, `MPI_Send` from C), a receive matched where the
/// frame lies (`Runtime::recv_small_now`). A copy this small costs less than the
/// request it saves, should the lane not take it at once; every stream transport's
/// small frame holds one whole (`transport::stream`).
pub const IMMEDIATE_MAX: usize = 4096;
