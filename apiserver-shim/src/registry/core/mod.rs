//! The core API group (`/api/v1`).

pub mod configmaps;
pub mod endpoints;
pub mod events;
pub mod limitranges;
pub mod namespaces;
pub mod nodes;
pub mod persistentvolumeclaims;
pub mod persistentvolumes;
pub mod pods;
pub mod replicationcontrollers;
pub mod resourcequotas;
pub mod secrets;
pub mod serviceaccounts;
pub mod services;
