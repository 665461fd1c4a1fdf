//! The `events.k8s.io` API group.

// The folder is named for its group, as the others are, and the group's one kind is `events`.
#[allow(clippy::module_inception)]
pub mod events;
