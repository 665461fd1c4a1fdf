//! `x-kubernetes-validations`: CEL rules compiled when the schema is parsed and evaluated against
//! objects, as kube-apiserver's `pkg/apiserver/schema/cel` does.
//!
//! Values are bound from JSON by their schema: objects become maps (declared property names
//! escaped as kube-apiserver escapes them: `foo-bar` is `self.foo__dash__bar`), integers `int`,
//! numbers `double`, strings of format `date-time`/`date` timestamps, `duration` durations,
//! `byte` bytes. Rules run with the CEL standard library of `cel-interpreter` plus a few of
//! kube-apiserver's extensions (`lowerAscii`, `upperAscii`, `trim`, `split`, `join`, `indexOf`,
//! `lastIndexOf`, `replace`, `isSorted`, `sum`); `size()` counts characters and `matches()` uses
//! Go's regular-expression syntax.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cel_interpreter::extractors::{Arguments, This};
use cel_interpreter::objects::{Key, Map as CelMap};
use cel_interpreter::{
    Context, ExecutionError, FunctionContext, ParseErrors, Program, Value as Cel,
};
use serde_json::Value;

mod cost;
pub mod expression;
mod library;

use self::cost::{comprehension_nesting, values_in, PER_CALL_LIMIT};
pub(crate) use self::cost::{
    cost_error_message, estimated_cost, max_elements, STATIC_ESTIMATED_COST_LIMIT,
    STATIC_ESTIMATED_CRD_COST_LIMIT,
};
use self::library::base_context;
use crate::error::{Bad, FieldError, Num, Reason};
use crate::node::Node;
use crate::validator::FPath;

/// One rule as written in the schema.
#[derive(Debug, Clone, Default)]
pub(crate) struct RawRule {
    pub(crate) rule: String,
    pub(crate) message: String,
    pub(crate) message_expression: String,
    pub(crate) reason: Option<String>,
    pub(crate) field_path: String,
    pub(crate) optional_old_self: Option<bool>,
}

impl RawRule {
    /// The rule as Go prints an `apiextensions.ValidationRule` with `%#v`.
    fn go_sharp(&self) -> String {
        use crate::error::go_quote;
        let reason = if self.reason.is_some() {
            "(*apiextensions.FieldValueErrorReason)(0xc000000000)"
        } else {
            "(*apiextensions.FieldValueErrorReason)(nil)"
        };
        let optional =
            if self.optional_old_self.is_some() { "(*bool)(0xc000000000)" } else { "(*bool)(nil)" };
        format!(
            "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{reason}, FieldPath:{}, OptionalOldSelf:{optional}}}",
            go_quote(&self.rule),
            go_quote(&self.message),
            go_quote(&self.message_expression),
            go_quote(&self.field_path),
        )
    }

    /// `ruleErrorString`: the message, else the rule.
    fn error_string(&self) -> &str {
        let m = self.message.trim();
        if m.is_empty() {
            self.rule.trim()
        } else {
            m
        }
    }
}

/// A rule ready to run.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    raw: RawRule,
    program: Program,
    message_program: Option<Program>,
    reason: Option<Reason>,
    /// The normalized `fieldPath` the failure is reported at, under the node's path.
    field_path: Option<String>,
    uses_old_self: bool,
    /// How deeply the rule's comprehensions (`all`, `exists`, `map`, …) nest: its cost grows as
    /// the size of what it reads to this power.
    nesting: u32,
}

/// How deeply brackets may nest in a rule: cel-go's parser refuses expressions nested deeper
/// (its `maxRecursionDepth`).
const MAX_NESTING: usize = 250;

/// How many operator characters (`+-*/%!<>=&|?.`) a rule may hold. The parser and interpreter
/// used here recurse once per nesting level and once per operator of a chain (`1+1+…`,
/// `self.a.a.…`), so this and [`MAX_NESTING`] bound how deep they go. Characters in string
/// literals count too: the scan does not parse, it only has to over-estimate.
const MAX_OPERATORS: usize = 1_000;

/// The stack rules are parsed and evaluated on. Within the bounds above, parsing and evaluating
/// take at most about 50 MiB of stack in an unoptimized build (under 5 MiB optimized); without a
/// stack of their own, 20 nested parentheses overflowed a 2 MiB thread stack, which aborts the
/// whole process.
const CEL_STACK: usize = 64 << 20;

/// Why a CEL expression does not compile, in cel-go's words.
#[derive(Debug, thiserror::Error)]
enum CompileError {
    /// Brackets nest deeper than [`MAX_NESTING`].
    #[error("ERROR: <input>:1:1: expression recursion limit exceeded: {}", MAX_NESTING)]
    TooDeep,
    /// More than [`MAX_OPERATORS`] operator characters.
    #[error("ERROR: <input>:1:1: expression holds more than {} operators", MAX_OPERATORS)]
    TooManyOperators,
    /// The parser's errors.
    #[error(transparent)]
    Parse(#[from] ParseErrors),
    /// The expression ends before it is complete (the parser panicked on it).
    #[error(
        "ERROR: <input>:{line}:{col}: Syntax error: mismatched input '<EOF>'\n| {last}\n| {}^",
        ".".repeat(.col - 1)
    )]
    Truncated {
        /// The last line's number, from 1.
        line: usize,
        /// The column just past the end of the last line, from 1.
        col: usize,
        /// The last line.
        last: String,
    },
}

/// Why a rule is refused before parsing, if it nests deeper or holds more operators than the
/// parser and interpreter may recurse.
fn too_complex(src: &str) -> Option<CompileError> {
    let (mut depth, mut deepest, mut operators) = (0usize, 0usize, 0usize);
    for c in src.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '+' | '-' | '*' | '/' | '%' | '!' | '<' | '>' | '=' | '&' | '|' | '?' | '.' => {
                operators += 1
            }
            _ => {}
        }
    }
    if deepest > MAX_NESTING {
        Some(CompileError::TooDeep)
    } else if operators > MAX_OPERATORS {
        Some(CompileError::TooManyOperators)
    } else {
        None
    }
}

/// Parses a CEL expression. The parser panics on some truncated expressions (`self.a ==`,
/// `1 +`, an unterminated string); such a panic is reported as the syntax error at the end of the
/// input that cel-go reports for them. Expressions the parser could not parse within
/// [`CEL_STACK`] are refused first ([`too_complex`]).
fn compile(src: &str) -> Result<Program, CompileError> {
    if let Some(why) = too_complex(src) {
        return Err(why);
    }
    match stacker::grow(CEL_STACK, || catch_unwind(|| Program::compile(src))) {
        Ok(Ok(p)) => Ok(p),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => {
            let last = src.lines().last().unwrap_or("");
            let line = src.lines().count().max(1);
            let col = last.chars().count() + 1;
            Err(CompileError::Truncated { line, col, last: last.to_owned() })
        }
    }
}

/// Compiles one rule of the node at `path` (`….x-kubernetes-validations[i]`). An empty rule
/// compiles to nothing, as kube-apiserver leaves it (the API checks refuse it).
pub(crate) fn compile_rule(
    raw: &RawRule,
    node: &Node,
    path: &str,
    uncorrelatable: Option<&str>,
) -> Result<Option<CompiledRule>, Vec<FieldError>> {
    use crate::error::child;
    if raw.rule.trim().is_empty() {
        return Ok(None);
    }
    let mut errs = Vec::new();
    // A program, or the compile error under `field` (`rule`, `messageExpression`).
    let mut compiled = |src: &str, field: &str, what: &str| match compile(src) {
        Ok(p) => Some(p),
        Err(e) => {
            errs.push(FieldError::invalid(
                child(path, field),
                Bad::Raw(raw.go_sharp()),
                format!("{what}compilation failed: {e}"),
            ));
            None
        }
    };
    let program = compiled(&raw.rule, "rule", "");
    let message_program = if raw.message_expression.trim().is_empty() {
        None
    } else {
        compiled(&raw.message_expression, "messageExpression", "messageExpression ")
    };
    let Some(program) = program else {
        return Err(errs);
    };
    let uses_old_self = program.references().has_variable("oldSelf");
    if uses_old_self {
        if let Some(list) = uncorrelatable {
            errs.push(FieldError::invalid(
                child(path, "rule"),
                Bad::Str(raw.rule.clone()),
                format!("oldSelf cannot be used on the uncorrelatable portion of the schema within {list}"),
            ));
        }
    } else if let Some(optional) = raw.optional_old_self {
        errs.push(FieldError::invalid(
            child(path, "optionalOldSelf"),
            Bad::Raw(optional.to_string()),
            "may not be set if oldSelf is not used in rule",
        ));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let reason = match raw.reason.as_deref() {
        Some("FieldValueForbidden") => Some(Reason::Forbidden),
        Some("FieldValueRequired") => Some(Reason::Required),
        Some("FieldValueDuplicate") => Some(Reason::Duplicate),
        Some(_) => Some(Reason::Invalid),
        None => None,
    };
    let field_path = if raw.field_path.trim().is_empty() {
        None
    } else {
        valid_field_path(&raw.field_path, node).ok()
    };
    Ok(Some(CompiledRule {
        raw: raw.clone(),
        program,
        message_program,
        reason,
        field_path,
        uses_old_self,
        nesting: comprehension_nesting(&raw.rule),
    }))
}

// ---------------------------------------------------------------------------------------------
// fieldPath

fn tokenize(path: &str) -> Vec<String> {
    let mut toks = Vec::new();
    let chars: Vec<char> = path.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' | '[' | ']' => {
                toks.push(chars[i].to_string());
                i += 1;
            }
            '\'' => {
                let mut j = i + 1;
                while j < chars.len() && !(chars[j] == '\'' && chars[j - 1] != '\\') {
                    j += 1;
                }
                let end = (j + 1).min(chars.len());
                toks.push(chars[i..end].iter().collect());
                i = end;
            }
            _ => {
                let mut j = i;
                while j < chars.len() && !matches!(chars[j], '.' | '[' | ']') {
                    j += 1;
                }
                toks.push(chars[i..j].iter().collect());
                i = j;
            }
        }
    }
    toks
}

/// Why a rule's `fieldPath` is not a path to a field of its schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FieldPathError {
    /// A name the schema does not have.
    #[error("does not refer to a valid field")]
    NotAField,
    /// The path ends inside a step.
    #[error("unexpected end of JSON path")]
    UnexpectedEnd,
    /// `[` not followed by a single-quoted string.
    #[error("expected single quoted string but got {0}")]
    NotQuoted(String),
    /// A backslash escape that is not one of Go's, as written (`\x`, or a lone `\` at the end).
    #[error("invalid string literal: invalid escape char {0}")]
    InvalidEscape(String),
    /// A bracketed name not closed by `]`.
    #[error("expected ] but got {0}")]
    Unclosed(String),
    /// A step that starts with neither `[` nor `.`.
    #[error("expected [ or . but got: {0}")]
    NoSeparator(String),
}

fn unescape_single_quote(s: &str) -> Result<String, FieldPathError> {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('a') => out.push('\u{7}'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('t') => out.push('\t'),
            Some('v') => out.push('\u{b}'),
            Some('\'') => out.push('\''),
            Some('\\') => out.push('\\'),
            Some(other) => return Err(FieldPathError::InvalidEscape(format!("\\{other}"))),
            None => return Err(FieldPathError::InvalidEscape("\\".to_owned())),
        }
    }
    Ok(out)
}

/// Checks a rule's `fieldPath` (`.spec.ports`, `.labels['app.kubernetes.io/name']`) against the
/// node's schema and returns it as a field path (`spec.ports`, `labels[app.kubernetes.io/name]`).
pub(crate) fn valid_field_path(path: &str, node: &Node) -> Result<String, FieldPathError> {
    let toks = tokenize(path);
    let mut out = FPath::nil();
    let mut schema = Some(node);
    let mut i = 0;
    let append =
        |name: &str, out: &mut FPath, schema: &mut Option<&Node>| -> Result<(), FieldPathError> {
            let s = schema.ok_or(FieldPathError::NotAField)?;
            if !s.properties.is_empty() {
                *out = out.child(name);
                *schema = Some(s.properties.get(name).ok_or(FieldPathError::NotAField)?);
            } else if s.additional.is_some() {
                *out = out.key(name);
                *schema = s.additional_schema();
            } else {
                return Err(FieldPathError::NotAField);
            }
            Ok(())
        };
    while i < toks.len() {
        match toks[i].as_str() {
            "[" => {
                let tok = toks.get(i + 1).ok_or(FieldPathError::UnexpectedEnd)?;
                if tok.len() < 2 || !tok.starts_with('\'') || !tok.ends_with('\'') {
                    return Err(FieldPathError::NotQuoted(tok.clone()));
                }
                let name = unescape_single_quote(&tok[1..tok.len() - 1])?;
                append(&name, &mut out, &mut schema)?;
                match toks.get(i + 2).map(String::as_str) {
                    Some("]") => {}
                    Some(other) => return Err(FieldPathError::Unclosed(other.to_owned())),
                    None => return Err(FieldPathError::UnexpectedEnd),
                }
                i += 3;
            }
            "." => {
                let tok = toks.get(i + 1).ok_or(FieldPathError::UnexpectedEnd)?;
                append(tok, &mut out, &mut schema)?;
                i += 2;
            }
            other => return Err(FieldPathError::NoSeparator(other.to_owned())),
        }
    }
    Ok(out.render())
}

// ---------------------------------------------------------------------------------------------
// Values

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

/// A property name as a CEL identifier, escaped as kube-apiserver escapes it.
pub(crate) fn escape(name: &str) -> Option<String> {
    let b = name.as_bytes();
    let first_ok = b
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, b'_' | b'.' | b'-' | b'/'));
    let rest_ok =
        b.iter().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'/'));
    if !first_ok || !rest_ok {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i..].starts_with("__") {
            out.push_str("__underscores__");
            i += 2;
            continue;
        }
        match b[i] {
            b'.' => out.push_str("__dot__"),
            b'-' => out.push_str("__dash__"),
            b'/' => out.push_str("__slash__"),
            c => out.push(c as char),
        }
        i += 1;
    }
    Some(out)
}

fn number(n: &serde_json::Number, s: Option<&Node>) -> Cel {
    match (s.map(|s| s.type_name.as_str()), Num::of(n)) {
        (Some("number"), num) => Cel::Float(num.as_f64()),
        (_, Num::Int(i)) => Cel::Int(i),
        (_, Num::Float(f)) => Cel::Float(f),
    }
}

fn string(st: &str, s: Option<&Node>) -> Cel {
    if let Some(s) = s.filter(|s| s.type_name == "string") {
        match s.format.as_str() {
            "date-time" => {
                if let Some(t) = crate::formats::parse_date_time(st) {
                    return Cel::Timestamp(t);
                }
            }
            "date" => {
                if let Some(t) = crate::formats::parse_date(st) {
                    return Cel::Timestamp(t);
                }
            }
            "duration" => {
                if let Some(ns) = crate::formats::parse_duration(st) {
                    return Cel::Duration(chrono::Duration::nanoseconds(ns));
                }
            }
            "byte" => {
                if let Some(bytes) = crate::formats::decode_base64(st) {
                    return Cel::Bytes(Arc::new(bytes));
                }
            }
            _ => {}
        }
    }
    Cel::String(Arc::new(st.to_string()))
}

/// A JSON value as a CEL value, typed by its schema (`None` where the schema says nothing).
pub(crate) fn to_cel(v: &Value, s: Option<&Node>) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => number(n, s),
        Value::String(st) => string(st, s),
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            Cel::List(Arc::new(items.iter().map(|x| to_cel(x, item_schema)).collect()))
        }
        Value::Object(m) => {
            let mut out: HashMap<Key, Cel> = HashMap::with_capacity(m.len());
            for (k, x) in m {
                let (name, sub) = match s {
                    Some(s) => match s.properties.get(k) {
                        Some(p) => (escape(k).unwrap_or_else(|| k.clone()), Some(p)),
                        None => (k.clone(), s.additional_schema()),
                    },
                    None => (k.clone(), None),
                };
                out.insert(Key::String(Arc::new(name)), to_cel(x, sub));
            }
            Cel::Map(CelMap { map: Arc::new(out) })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Evaluation

/// How a rule's evaluation failed, worded as cel-go words it.
fn describe(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::UndeclaredReference(n) => format!("undeclared reference to '{n}'"),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::ValuesNotComparable(..)
        | ExecutionError::UnsupportedBinaryOperator(..)
        | ExecutionError::UnsupportedUnaryOperator(..)
        | ExecutionError::UnexpectedType { .. }
        | ExecutionError::UnsupportedTargetType { .. }
        | ExecutionError::NotSupportedAsMethod { .. }
        | ExecutionError::UnsupportedMapIndex(_)
        | ExecutionError::UnsupportedListIndex(_)
        | ExecutionError::UnsupportedIndex(..)
        | ExecutionError::UnsupportedKeyType(_)
        | ExecutionError::InvalidArgumentCount { .. } => "no such overload".to_string(),
        other => other.to_string(),
    }
}

enum Outcome {
    Value(Cel),
    Error(String),
}

/// Runs a program; a panic inside the interpreter (an expression it does not support) is an
/// evaluation error, never a crash.
fn run(program: &Program, ctx: &Context<'_>) -> Outcome {
    match catch_unwind(AssertUnwindSafe(|| program.execute(ctx))) {
        Ok(Ok(v)) => Outcome::Value(v),
        Ok(Err(e)) => Outcome::Error(describe(&e)),
        Err(_) => Outcome::Error("unsupported expression".to_string()),
    }
}

/// Evaluates every rule under `root` against `obj` (and `old` for transition rules).
/// The rules run on a stack of their own ([`CEL_STACK`]), taken once per object.
pub(crate) fn validate(root: &Node, obj: &Value, old: Option<&Value>, out: &mut Vec<FieldError>) {
    stacker::grow(CEL_STACK, || {
        let ctx = base_context();
        walk(&ctx, root, &FPath::nil(), obj, old, out);
    });
}

fn walk(
    ctx: &Context<'_>,
    s: &Node,
    path: &FPath,
    obj: &Value,
    old: Option<&Value>,
    out: &mut Vec<FieldError>,
) {
    if !s.has_rules || obj.is_null() {
        return;
    }
    let old = old.filter(|o| !o.is_null());
    if !s.rules.is_empty() {
        eval_rules(ctx, s, path, obj, old, out);
    }
    match obj {
        Value::Array(items) => {
            if let Some(item_schema) = &s.items {
                for (i, x) in items.iter().enumerate() {
                    let old_item = correlate(s, x, old);
                    walk(ctx, item_schema, &path.index(i), x, old_item, out);
                }
            }
        }
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            for (k, v) in entries {
                // A structural schema has properties or additionalProperties, not both.
                let child = match (s.properties.get(k.as_str()), s.additional_schema()) {
                    (Some(p), _) => Some((p, path.child(k))),
                    (None, Some(a)) => Some((a, path.key(k))),
                    (None, None) => None,
                };
                if let Some((schema, at)) = child {
                    walk(ctx, schema, &at, v, old.and_then(|o| o.get(k.as_str())), out);
                }
            }
        }
        _ => {}
    }
}

/// The old item of a `map` list with the same keys as `item`; other lists do not correlate.
fn correlate<'a>(s: &Node, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    if s.list_type.as_deref() != Some("map") {
        return None;
    }
    let old_items = old?.as_array()?;
    let item = item.as_object()?;
    old_items.iter().find(|o| {
        o.as_object().is_some_and(|o| s.list_map_keys.iter().all(|k| o.get(k) == item.get(k)))
    })
}

fn eval_rules(
    ctx: &Context<'_>,
    s: &Node,
    path: &FPath,
    obj: &Value,
    old: Option<&Value>,
    out: &mut Vec<FieldError>,
) {
    let self_val = to_cel(obj, Some(s));
    let old_val = old.map(|o| to_cel(o, Some(s)));
    let ty = s.type_name.clone();
    let size = values_in(obj) + old.map_or(0, values_in);
    for rule in &s.rules {
        if rule.uses_old_self && old_val.is_none() {
            continue;
        }
        // Refuse, before running it, a rule whose nested comprehensions over this much data
        // would cost more than one call may (the interpreter cannot be stopped once started).
        if size.saturating_pow(rule.nesting.max(1)) > PER_CALL_LIMIT {
            out.push(FieldError::invalid(
                path.render(),
                Bad::Str(ty.clone()),
                format!("call cost exceeds limit for rule: {}", rule.raw.error_string()),
            ));
            continue;
        }
        let mut scope = ctx.new_inner_scope();
        scope.add_variable_from_value("self", self_val.clone());
        if let Some(o) = &old_val {
            scope.add_variable_from_value("oldSelf", o.clone());
        }
        let rule_text = rule.raw.error_string().to_string();
        match run(&rule.program, &scope) {
            Outcome::Value(Cel::Bool(true)) => continue,
            Outcome::Value(Cel::Bool(false)) => {}
            Outcome::Value(_) => {
                out.push(FieldError::invalid(
                    path.render(),
                    Bad::Str(ty.clone()),
                    format!("cel expression must evaluate to a bool evaluating rule: {rule_text}"),
                ));
                continue;
            }
            Outcome::Error(e) if e == "no such overload" => {
                out.push(FieldError::invalid(
                    path.render(),
                    Bad::Str(ty.clone()),
                    format!("'{e}': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"),
                ));
                continue;
            }
            Outcome::Error(e) => {
                out.push(FieldError::invalid(
                    path.render(),
                    Bad::Str(ty.clone()),
                    format!("{e} evaluating rule: {rule_text}"),
                ));
                continue;
            }
        }
        let field = match &rule.field_path {
            Some(fp) => path.child(fp).render(),
            None => path.render(),
        };
        let detail = rule
            .message_program
            .as_ref()
            .and_then(|p| match run(p, &scope) {
                Outcome::Value(Cel::String(m)) => {
                    let m = m.trim();
                    (!m.is_empty() && !m.contains('\n') && m.len() <= 5 * 1024)
                        .then(|| m.to_string())
                }
                _ => None,
            })
            .unwrap_or_else(|| {
                let m = rule.raw.message.trim();
                if m.is_empty() {
                    format!("failed rule: {rule_text}")
                } else {
                    m.to_string()
                }
            });
        out.push(match rule.reason {
            Some(Reason::Forbidden) => FieldError::forbidden(field, detail),
            Some(Reason::Required) => FieldError::required(field, detail),
            Some(Reason::Duplicate) => FieldError::duplicate(field, Bad::Str(ty.clone())),
            _ => FieldError::invalid(field, Bad::Str(ty.clone()), detail),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comprehensions_are_counted_by_nesting() {
        assert_eq!(comprehension_nesting("self.a > 0"), 0);
        assert_eq!(comprehension_nesting("self.a.all(x, x > 0)"), 1);
        assert_eq!(comprehension_nesting("self.a.all(x, x > 0) && self.b.exists(y, y == 1)"), 1);
        assert_eq!(
            comprehension_nesting("self.a.all(x, self.a.all(y, self.a.all(z, x+y+z > 0)))"),
            3
        );
        assert_eq!(comprehension_nesting("self.s == '.all(' && self.a.map(x, x).size() > 0"), 1);
        assert_eq!(values_in(&serde_json::json!({"a": [1, 2, {"b": 3}]})), 6);
    }

    #[test]
    fn names_escape_as_kube_does() {
        assert_eq!(escape("foo").as_deref(), Some("foo"));
        assert_eq!(escape("foo-bar").as_deref(), Some("foo__dash__bar"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("__x").as_deref(), Some("__underscores__x"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("1abc"), None);
    }

    #[test]
    fn field_paths_tokenize() {
        assert_eq!(tokenize(".a.b['c.d']"), vec![".", "a", ".", "b", "[", "'c.d'", "]"]);
    }
}
