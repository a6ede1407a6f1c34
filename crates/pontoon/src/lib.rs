//! MPI-like message passing across clusters: the Rust API
