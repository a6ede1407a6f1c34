//! Coordinator and spawners behind pontoon run
