//! A tenant's cluster DNS, answered as CoreDNS's `kubernetes` plugin answers it, on
//! `hickory-server`.
//!
//! - [`Zone`]: a pure, immutable snapshot of the tenant's names, built from its Services and
//!   EndpointSlices (`<svc>.<ns>.svc.<domain>`, endpoint names, SRV per named port, pod names).
//! - [`Resolver`]: the request handler over a [`SharedZone`] that callers replace as Services and
//!   EndpointSlices change; names outside the domain go to upstream servers
//!   ([`upstream_from_resolv_conf`]), SERVFAIL when none answers.
//! - [`Server`]: the handler on UDP and TCP of one port.
//! - [`SharedServer`]: many clusters' handlers on UDP and TCP of one port, each at a loopback
//!   address of its own, or each for the addresses of its own pods.
//! - [`follow`]: a cluster's Services and EndpointSlices, watched through a kube client, made
//!   the [`SharedZone`]'s snapshot as they change.

mod error;
mod follow;
mod resolver;
mod server;
mod shared;
mod zone;

pub use error::{DnsError, Result};
pub use follow::follow;
pub use hickory_server::net::xfer::Protocol;
pub use resolver::{
    parse_resolv_conf, upstream_from_resolv_conf, OnPending, Resolver, SharedZone, FORWARD_TIMEOUT,
    PENDING_WAIT,
};
pub use server::Server;
pub use shared::{answer, Answerer, Relay, Route, SharedServer, SourceRoute};
pub use zone::{Lookup, Outcome, Zone, DEFAULT_DOMAIN, SERVICE_NAME_LABEL, TTL};
