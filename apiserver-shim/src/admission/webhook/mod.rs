//! Admission webhooks: the transport of a call ([`client`]) and where it may go ([`egress`]).

pub mod client;
pub mod egress;

#[cfg(test)]
mod tests;

pub use client::{call, Answer, CallError, Endpoint, Hook, ServiceAddress, ServiceResolver};
pub use egress::Egress;
