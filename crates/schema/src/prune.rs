//! Pruning (`pkg/apiserver/schema/pruning`): dropping the fields a schema does not specify.

use serde_json::Value;

use crate::node::Node;

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn child(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Removes the fields of `x` that `s` does not specify and appends their paths to `pruned`
/// (`spec.foo`, `spec.ports[0].bar`). apiVersion, kind and metadata are kept in embedded resources
/// and, when `resource_root`, at the top.
pub(crate) fn prune(
    x: &mut Value,
    s: Option<&Node>,
    resource_root: bool,
    pruned: &mut Vec<String>,
) {
    prune_at(x, s, resource_root, "", pruned);
    pruned.sort();
}

fn prune_at(x: &mut Value, s: Option<&Node>, root: bool, prefix: &str, pruned: &mut Vec<String>) {
    if let Some(s) = s.filter(|s| s.preserves_unknown()) {
        skip_prune(x, s, root, prefix, pruned);
        return;
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                let mut keys: Vec<String> = m.keys().cloned().collect();
                keys.sort();
                for k in keys {
                    pruned.push(child(prefix, &k));
                }
                m.clear();
                return;
            };
            let embedded = s.embedded || root;
            let mut keys: Vec<String> = m.keys().cloned().collect();
            keys.sort();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let path = child(prefix, &k);
                match s.field_schema(&k) {
                    Some(sub) => {
                        if let Some(v) = m.get_mut(&k) {
                            prune_at(v, sub, false, &path, pruned);
                        }
                    }
                    None => {
                        m.remove(&k);
                        pruned.push(path);
                    }
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for (i, v) in items.iter_mut().enumerate() {
                prune_at(v, item_schema, false, &format!("{prefix}[{i}]"), pruned);
            }
        }
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known ones are pruned by
/// their own schema.
fn skip_prune(x: &mut Value, s: &Node, root: bool, prefix: &str, pruned: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            let embedded = s.embedded || root;
            let mut keys: Vec<String> = m.keys().cloned().collect();
            keys.sort();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let (Some(sub), Some(v)) = (s.field_schema(&k), m.get_mut(&k)) {
                    prune_at(v, sub, false, &child(prefix, &k), pruned);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.items.as_deref() {
                for (i, v) in items.iter_mut().enumerate() {
                    skip_prune(v, item_schema, false, &format!("{prefix}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}
