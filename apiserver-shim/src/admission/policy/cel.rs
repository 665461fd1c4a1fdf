//! The CEL environment of admission policies: the variables an expression may read, compiled
//! with [`carrel_schema::Expression`] (the library CRD rules run with).
//!
//! Declared: `object`, `oldObject`, `request`, `params`, `namespaceObject` and `variables`.
//! `authorizer` is not: Carrel does not give policies kube-apiserver's authorizer, so an
//! expression reading it is refused when the policy is written, never evaluated to something.

use carrel_schema::{CompileError, Expression};

/// The variables every expression of a policy may read.
pub(crate) const DECLARED: &[&str] =
    &["object", "oldObject", "request", "params", "namespaceObject", "variables"];

/// Compile `src` where the policy's `variables` (its earlier ones, for a variable) are declared.
pub(crate) fn compile(src: &str, variables: &[&str]) -> Result<Expression, CompileError> {
    let expression = Expression::compile(src, DECLARED).map_err(|e| {
        if e.0.contains("undeclared reference to 'authorizer'") {
            CompileError(format!(
                "{}\n(Carrel does not provide the authorizer to admission policies)",
                e.0
            ))
        } else {
            e
        }
    })?;
    if let Some(unknown) =
        expression.variables_used().iter().find(|v| !variables.contains(&v.as_str()))
    {
        return Err(CompileError(format!("ERROR: <input>:1:1: undefined field '{unknown}'")));
    }
    Ok(expression)
}

/// Whether `name` is a CEL identifier, as a variable's name must be (`[_a-zA-Z][_a-zA-Z0-9]*`,
/// not a reserved word).
pub(crate) fn is_identifier(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name)
}
