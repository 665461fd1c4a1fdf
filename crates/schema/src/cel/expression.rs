//! Free-standing CEL expressions over named variables, for what is not a schema's rule: the
//! expressions of admission policies (`object`, `oldObject`, `request`, `params`, …).
//!
//! An [`Expression`] is compiled once (parsed, and every variable it reads checked against the
//! names declared for it, as cel-go's checker refuses an undeclared reference) and evaluated
//! with an [`Activation`] binding those names to JSON values or to the results of other
//! expressions. Evaluation runs on the stack rules run on, with the same library and the same
//! refusal, before running, of nested comprehensions that would cost more than one call may.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use cel_interpreter::objects::{Key, Map as CelMap};
use cel_interpreter::{Program, Value as Cel};
use cel_parser::ast::{EntryExpr, Expr, IdedExpr};
use serde_json::Value;

use super::cost::{comprehension_nesting, values_in, PER_CALL_LIMIT};
use super::library::base_context;
use super::{compile, run, to_cel, Outcome, CEL_STACK};

/// A compiled expression.
#[derive(Debug)]
pub struct Expression {
    program: Program,
    /// The names `variables.<name>` it reads.
    variables_used: BTreeSet<String>,
    nesting: u32,
}

/// A value an expression evaluated to, which may be bound as a variable of another.
#[derive(Debug, Clone)]
pub struct Bound(Cel);

impl Bound {
    /// The value as a JSON value would bind it.
    pub fn json(value: &Value) -> Bound {
        Bound(to_cel(value, None))
    }

    /// A map from names to values (`variables`).
    pub fn map(entries: impl IntoIterator<Item = (String, Bound)>) -> Bound {
        let map: HashMap<Key, Cel> =
            entries.into_iter().map(|(k, v)| (Key::String(Arc::new(k)), v.0)).collect();
        Bound(Cel::Map(CelMap { map: Arc::new(map) }))
    }

    /// The value, if it is a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match self.0 {
            Cel::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The value, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.0 {
            Cel::String(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the value is null.
    pub fn is_null(&self) -> bool {
        matches!(self.0, Cel::Null)
    }

    /// The CEL type of the value, as cel-go names it (`int`, `string`, `map`, …).
    pub fn type_name(&self) -> &'static str {
        match &self.0 {
            Cel::List(_) => "list",
            Cel::Map(_) => "map",
            Cel::Function(..) => "function",
            Cel::Int(_) => "int",
            Cel::UInt(_) => "uint",
            Cel::Float(_) => "double",
            Cel::String(_) => "string",
            Cel::Bytes(_) => "bytes",
            Cel::Bool(_) => "bool",
            Cel::Duration(_) => "google.protobuf.Duration",
            Cel::Timestamp(_) => "google.protobuf.Timestamp",
            Cel::Null => "null_type",
        }
    }
}

/// The values an expression is evaluated with, by name.
#[derive(Debug, Clone, Default)]
pub struct Activation {
    vars: Vec<(String, Bound)>,
    /// How many values the bound JSON holds, for the cost check.
    size: u64,
}

impl Activation {
    /// Bind `name` to a JSON value.
    pub fn bind_json(&mut self, name: &str, value: &Value) {
        self.size = self.size.saturating_add(values_in(value));
        self.vars.push((name.to_owned(), Bound::json(value)));
    }

    /// Bind `name` to a value an expression gave (or a map of them).
    pub fn bind(&mut self, name: &str, value: Bound) {
        self.vars.push((name.to_owned(), value));
    }
}

/// Why an expression does not compile: cel-go's message, the text after `compilation failed: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CompileError(pub String);

/// Why an evaluation failed, in cel-go's words where they are known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EvalError(pub String);

impl Expression {
    /// Compile `src`, which may read only the variables `declared` (and what its own
    /// comprehensions bind): an undeclared reference is refused as cel-go's checker refuses it.
    pub fn compile(src: &str, declared: &[&str]) -> Result<Expression, CompileError> {
        let program = compile(src).map_err(|e| CompileError(e.to_string()))?;
        let parsed = stacker::grow(CEL_STACK, || cel_parser::Parser::default().parse(src))
            .map_err(|e| CompileError(e.to_string()))?;
        let mut free = BTreeSet::new();
        let mut variables_used = BTreeSet::new();
        let mut bound = Vec::new();
        stacker::grow(CEL_STACK, || {
            walk(&parsed, &mut bound, &mut free, &mut variables_used);
        });
        if let Some(undeclared) = free.iter().find(|n| !declared.contains(&n.as_str())) {
            return Err(CompileError(undeclared_reference(src, undeclared)));
        }
        Ok(Expression { program, variables_used, nesting: comprehension_nesting(src) })
    }

    /// The names `variables.<name>` the expression reads.
    pub fn variables_used(&self) -> &BTreeSet<String> {
        &self.variables_used
    }

    /// Evaluate the expression with `activation`.
    pub fn eval(&self, activation: &Activation) -> Result<Bound, EvalError> {
        if activation.size.saturating_pow(self.nesting.max(1)) > PER_CALL_LIMIT {
            return Err(EvalError("operation cancelled: actual cost limit exceeded".to_owned()));
        }
        stacker::grow(CEL_STACK, || {
            let ctx = base_context();
            let mut scope = ctx.new_inner_scope();
            for (name, value) in &activation.vars {
                scope.add_variable_from_value(name.as_str(), value.0.clone());
            }
            match run(&self.program, &scope) {
                Outcome::Value(v) => Ok(Bound(v)),
                Outcome::Error(e) => Err(EvalError(e)),
            }
        })
    }
}

/// cel-go's checker error for a reference to `name`, at its first place in `src`.
fn undeclared_reference(src: &str, name: &str) -> String {
    let at = find_word(src, name).unwrap_or(0);
    let before = &src[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let col = src[line_start..at].chars().count() + 1;
    let text = src[line_start..].lines().next().unwrap_or("");
    format!(
        "ERROR: <input>:{line}:{col}: undeclared reference to '{name}' (in container '')\n | {text}\n | {}^",
        ".".repeat(col - 1)
    )
}

/// The byte offset of `word` in `src` as a whole identifier.
fn find_word(src: &str, word: &str) -> Option<usize> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    src.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = src[..i].chars().next_back();
        let after = src[i + word.len()..].chars().next();
        !before.is_some_and(|c| ident(c) || c == '.') && !after.is_some_and(ident)
    })
}

/// Collect the free variables of `e` (not bound by an enclosing comprehension) and the names of
/// `variables.<name>` selections.
fn walk(
    e: &IdedExpr,
    bound: &mut Vec<String>,
    free: &mut BTreeSet<String>,
    variables_used: &mut BTreeSet<String>,
) {
    match &e.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.iter().any(|b| b == name) {
                free.insert(name.clone());
            }
        }
        Expr::Select(select) => {
            if let Expr::Ident(root) = &select.operand.expr {
                if root == "variables" && !bound.iter().any(|b| b == root) {
                    variables_used.insert(select.field.clone());
                }
            }
            walk(&select.operand, bound, free, variables_used);
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(target, bound, free, variables_used);
            }
            for arg in &call.args {
                walk(arg, bound, free, variables_used);
            }
        }
        Expr::Comprehension(comp) => {
            walk(&comp.iter_range, bound, free, variables_used);
            walk(&comp.accu_init, bound, free, variables_used);
            let depth = bound.len();
            bound.push(comp.iter_var.clone());
            bound.extend(comp.iter_var2.clone());
            bound.push(comp.accu_var.clone());
            walk(&comp.loop_cond, bound, free, variables_used);
            walk(&comp.loop_step, bound, free, variables_used);
            walk(&comp.result, bound, free, variables_used);
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for elem in &list.elements {
                walk(elem, bound, free, variables_used);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => {
                        walk(&field.value, bound, free, variables_used)
                    }
                    EntryExpr::MapEntry(m) => {
                        walk(&m.key, bound, free, variables_used);
                        walk(&m.value, bound, free, variables_used);
                    }
                }
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => {
                        walk(&field.value, bound, free, variables_used)
                    }
                    EntryExpr::MapEntry(m) => {
                        walk(&m.key, bound, free, variables_used);
                        walk(&m.value, bound, free, variables_used);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DECLARED: &[&str] = &["object", "variables"];

    #[test]
    fn undeclared_references_are_refused_and_comprehension_variables_are_not_free() {
        let e = Expression::compile("object.spec.containers.all(c, c.name != '')", DECLARED)
            .expect("compiles");
        assert!(e.variables_used().is_empty());
        let err = Expression::compile("authorizer.group('').check('get').allowed()", DECLARED)
            .expect_err("undeclared");
        assert_eq!(
            err.0,
            "ERROR: <input>:1:1: undeclared reference to 'authorizer' (in container '')\n | authorizer.group('').check('get').allowed()\n | ^"
        );
        let err = Expression::compile("object.a == 1 && obj.b", DECLARED).expect_err("typo");
        assert!(err.0.starts_with("ERROR: <input>:1:18: undeclared reference to 'obj'"), "{err}");
        assert!(Expression::compile("object.a ==", DECLARED).is_err());
    }

    #[test]
    fn expressions_evaluate_over_json_and_variables() {
        let e = Expression::compile("object.spec.replicas <= variables.max", DECLARED)
            .expect("compiles");
        assert_eq!(e.variables_used().iter().collect::<Vec<_>>(), vec!["max"]);
        let mut a = Activation::default();
        a.bind_json("object", &json!({"spec": {"replicas": 6}}));
        a.bind("variables", Bound::map([("max".to_owned(), Bound::json(&json!(5)))]));
        assert_eq!(e.eval(&a).expect("evaluates").as_bool(), Some(false));
        let missing = Expression::compile("object.spec.nope > 1", DECLARED).expect("compiles");
        assert_eq!(missing.eval(&a).expect_err("no key").0, "no such key: nope");
    }
}
