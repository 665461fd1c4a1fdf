//! Admission webhooks: which are called and what their answers do ([`dispatch`]), the transport
//! of a call ([`client`]) and where it may go ([`egress`]).

pub mod client;
pub mod dispatch;
pub mod egress;

#[cfg(test)]
mod dispatch_tests;
#[cfg(test)]
pub(crate) mod tests;

use carrel_schema::{CompileError, Expression};

pub use client::{call, Answer, CallError, Endpoint, Hook, ServiceAddress, ServiceResolver};
pub use dispatch::{changed, mutate, validate, Cache};
pub use egress::Egress;

use crate::registry::admissionregistration::MATCH_CONDITION_VARIABLES;

/// Compile a webhook's match condition, where `object`, `oldObject` and `request` are declared.
/// `authorizer` is not: Carrel does not give admission kube-apiserver's authorizer, so a
/// condition reading it is refused when written, never evaluated to something.
pub fn compile_condition(src: &str) -> Result<Expression, CompileError> {
    Expression::compile(src, MATCH_CONDITION_VARIABLES).map_err(|e| {
        if e.0.contains("undeclared reference to 'authorizer'") {
            CompileError(format!(
                "{}\n(Carrel does not provide the authorizer to admission webhooks)",
                e.0
            ))
        } else {
            e
        }
    })
}
