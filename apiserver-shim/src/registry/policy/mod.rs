//! The `policy` API group.

pub mod poddisruptionbudgets;
