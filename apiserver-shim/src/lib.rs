//! Carrel's Kubernetes-compatible API server.
//!
//! An [`Api`] holds one store's objects and applies Kubernetes' rules to them; a [`Server`] serves
//! an `Api` under a base path and [`router`] turns it into an axum `Router`. Everything a client
//! sends is parsed and checked here: this crate is the only one that knows HTTP wire formats.

pub mod access;
pub mod admission;
pub mod api;
pub mod auth;
pub mod crd;
pub mod decode;
pub mod defaults;
pub mod discovery;
pub mod event_ttl;
pub mod fieldpath;
pub mod fields;
pub mod flowcontrol;
pub mod go_json;
pub mod health;
pub mod http;
pub mod intake;
pub mod kubeconfig;
pub mod listener;
pub mod local_client;
pub mod managed;
pub mod metrics;
pub mod object;
pub mod object_names;
pub mod openapi;
pub mod patch;
pub mod peer;
pub mod protobuf;
pub mod rbac;
pub mod registry;
pub mod resource;
pub mod scale;
pub mod selector;
pub mod status;
pub mod strategic;
pub mod streams;
pub mod strict_json;
pub mod table;
pub mod tenant;
pub mod tls;
pub mod typed;
pub mod validation;
pub mod version;

pub use api::{Api, ServiceNetwork};
pub use http::{router, Server};
pub use resource::{Registry, ResourceType, Subresource};
pub use status::{ApiError, ApiResult, Cause};
