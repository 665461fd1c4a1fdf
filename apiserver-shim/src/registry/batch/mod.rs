//! The `batch` API group.

pub mod cronjobs;
pub mod jobs;
