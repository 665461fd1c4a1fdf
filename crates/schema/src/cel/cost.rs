//! What a rule costs, estimated when its schema is parsed as kube-apiserver estimates it
//! (`PerCallLimit`, the largest list or string a schema allows, comprehension nesting).

use super::*;

/// The most a rule may cost in one evaluation, in kube-apiserver's units (`PerCallLimit`).
pub(super) const PER_CALL_LIMIT: u64 = 1_000_000;

/// How deeply the comprehension macros of a CEL expression nest (string literals skipped).
pub(super) fn comprehension_nesting(src: &str) -> u32 {
    const MACROS: &[&str] = &["all", "exists", "exists_one", "map", "filter"];
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut parens, mut open, mut deepest) = (0, 0usize, Vec::<usize>::new(), 0);
    while i < chars.len() {
        match chars[i] {
            quote @ ('"' | '\'') => {
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
            }
            '(' => parens += 1,
            ')' => {
                parens = parens.saturating_sub(1);
                while open.last().is_some_and(|&at| at > parens) {
                    open.pop();
                }
            }
            '.' => {
                let name: String = chars[i + 1..]
                    .iter()
                    .take_while(|c| c.is_alphanumeric() || **c == '_')
                    .collect();
                if MACROS.contains(&name.as_str()) && chars.get(i + 1 + name.len()) == Some(&'(') {
                    open.push(parens + 1);
                    deepest = deepest.max(open.len() as u32);
                }
            }
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// The largest estimated cost one rule may have (kube-apiserver's `StaticEstimatedCostLimit`).
pub(crate) const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;

/// The largest estimated cost all rules of one schema may have together
/// (`StaticEstimatedCRDCostLimit`).
pub(crate) const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;

/// kube-apiserver's request size limit, from which it bounds lists, maps and strings that declare
/// no `maxItems`, `maxProperties` or `maxLength`.
const MAX_REQUEST_SIZE_BYTES: u64 = 3 * 1024 * 1024;

/// The fewest bytes a value of `node` takes in JSON.
fn min_serialized_size(node: Option<&Node>) -> u64 {
    match node.map(|n| n.type_name.as_str()) {
        Some("string") | Some("object") | Some("array") => 2,
        Some("boolean") => 4,
        _ => 1,
    }
}

/// The most elements a value of `node` can hold in one request: its `maxItems`,
/// `maxProperties` (of a map) or `maxLength`, else as many as fit in a request, as
/// kube-apiserver estimates them.
pub(crate) fn max_elements(node: &Node) -> u64 {
    let declared = |limit: Option<i64>| limit.map(|n| n.max(0) as u64);
    match node.type_name.as_str() {
        "array" => declared(node.max_items).unwrap_or_else(|| {
            (MAX_REQUEST_SIZE_BYTES - 2) / (min_serialized_size(node.items.as_deref()) + 1)
        }),
        "object" if node.properties.is_empty() => {
            declared(node.max_properties).unwrap_or_else(|| {
                // `"":` before each value.
                (MAX_REQUEST_SIZE_BYTES - 2) / (min_serialized_size(node.additional_schema()) + 4)
            })
        }
        "string" => declared(node.max_length).unwrap_or(MAX_REQUEST_SIZE_BYTES - 2),
        _ => 1,
    }
}

/// The largest list or map (`strings == false`), or the longest string (`strings == true`), a
/// rule at `node` can reach.
fn largest_below(node: &Node, strings: bool) -> u64 {
    let own = match node.type_name.as_str() {
        "string" if strings => max_elements(node),
        "array" if !strings => max_elements(node),
        "object" if !strings && node.properties.is_empty() => max_elements(node),
        _ => 0,
    };
    let preserved = node.preserves_unknown() || (strings && node.int_or_string);
    let children = node
        .properties
        .values()
        .chain(node.items.as_deref())
        .chain(node.additional_schema())
        .map(|child| largest_below(child, strings))
        .max()
        .unwrap_or(0);
    let unknown = if preserved { MAX_REQUEST_SIZE_BYTES - 2 } else { 0 };
    own.max(children).max(unknown)
}

/// The functions whose cost grows with the length of the strings they read.
const STRING_TRAVERSALS: &[&str] = &[
    "matches",
    "contains",
    "indexOf",
    "lastIndexOf",
    "replace",
    "split",
    "lowerAscii",
    "upperAscii",
    "trim",
    "join",
    "find",
    "findAll",
];

/// The operations of an expression: its identifiers, literals and operators.
fn operations(src: &str) -> u64 {
    let chars: Vec<char> = src.chars().collect();
    let (mut i, mut n) = (0, 0u64);
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() || matches!(c, '(' | ')' | ',' | '[' | ']' | '{' | '}') {
            i += 1;
            continue;
        }
        n += 1;
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || matches!(chars[i], '_' | '.')) {
                // `self.a.b` is a select per dot.
                if chars[i] == '.' {
                    n += 1;
                }
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    n.max(1)
}

/// The estimated cost of one evaluation of a rule at `node`, in the spirit of cel-go's static
/// estimator that kube-apiserver runs when a definition is written: each operation costs one,
/// every nested comprehension (`all`, `exists`, `map`, …) multiplies by the largest list or map
/// it can walk, and functions that read strings multiply by a tenth of the longest string (as
/// cel-go charges 0.1 per character). Sizes a schema does not bound come from the 3 MiB request
/// limit, as kube-apiserver's do.
pub(crate) fn estimated_cost(src: &str, node: &Node) -> u64 {
    let mut cost = operations(src).saturating_mul(
        largest_below(node, false).max(1).saturating_pow(comprehension_nesting(src)),
    );
    let traverses = STRING_TRAVERSALS.iter().any(|f| {
        src.match_indices(f)
            .any(|(at, _)| src[at + f.len()..].starts_with('(') && src[..at].ends_with('.'))
    });
    if traverses {
        cost = cost.saturating_mul((largest_below(node, true) / 10).max(1));
    }
    cost
}

/// kube-apiserver's words for a cost over its limit: `estimated rule cost exceeds budget by
/// factor of 2.5x (try simplifying the rule, …)`.
pub(crate) fn cost_error_message(cost_name: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{cost_name} exceeds budget by factor of {factor} (try simplifying the rule, or adding \
         maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// How many values a JSON value holds, itself included: what a rule's comprehensions walk.
pub(super) fn values_in(v: &Value) -> u64 {
    match v {
        Value::Array(items) => 1 + items.iter().map(values_in).sum::<u64>(),
        Value::Object(map) => 1 + map.values().map(values_in).sum::<u64>(),
        _ => 1,
    }
}
