//! Carrel's own API group (`carrel.dev`), served by the host API only.

pub mod tenants;
