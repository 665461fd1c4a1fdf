//! Defaulting (`pkg/apiserver/schema/defaulting`): `PruneNonNullableNullsWithoutDefaults`, then
//! `Default`.

use serde_json::Value;

use crate::node::{Additional, Node};

/// Removes nulls where the schema is not nullable and has no default to put there.
pub(crate) fn prune_nulls(x: &mut Value, s: Option<&Node>) {
    match x {
        Value::Object(m) => {
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let schema = s.and_then(|s| s.field_schema(&k)).flatten();
                let drop = m.get(&k).is_some_and(Value::is_null)
                    && schema.is_some_and(|sc| !sc.nullable && sc.default.is_none());
                if drop {
                    m.remove(&k);
                } else if let Some(v) = m.get_mut(&k) {
                    prune_nulls(v, schema);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.items.as_deref());
            for v in items.iter_mut() {
                prune_nulls(v, item_schema);
            }
        }
        _ => {}
    }
}

/// Sets the default of every missing property (and of every null where null is not allowed),
/// in objects, list items and additionalProperties maps, recursively.
pub(crate) fn apply(x: &mut Value, s: &Node) {
    match x {
        Value::Object(m) => {
            for (k, p) in &s.properties {
                let Some(d) = &p.default else { continue };
                let missing = match m.get(k) {
                    None => true,
                    Some(v) => v.is_null() && !p.nullable,
                };
                if missing {
                    m.insert(k.clone(), d.clone());
                }
            }
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let Some(v) = m.get_mut(&k) else { continue };
                if let Some(p) = s.properties.get(&k) {
                    apply(v, p);
                } else if let Some(Additional::Schema(a)) = &s.additional {
                    if v.is_null() && !a.nullable {
                        *v = a.default.clone().unwrap_or(Value::Null);
                    }
                    apply(v, a);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = s.items.as_deref() {
                for v in items.iter_mut() {
                    if v.is_null() && !item_schema.nullable {
                        *v = item_schema.default.clone().unwrap_or(Value::Null);
                    }
                    apply(v, item_schema);
                }
            }
        }
        _ => {}
    }
}
