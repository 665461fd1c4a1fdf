//! The check of `default`s (`pkg/apiserver/schema/defaulting/validation.go`): a default must be
//! pruned and valid against its schema.

use crate::error::{child, key, Bad, FieldError};
use crate::node::Node;
use crate::validator::{embedded_walk, FPath, OpenApi};

pub(super) fn validate_defaults(
    s: &Node,
    path: &str,
    inside_meta: bool,
    is_root: bool,
    errs: &mut Vec<FieldError>,
) {
    let embedded = s.embedded || is_root;
    let inside_meta = inside_meta && !s.embedded;
    if let Some(default) = &s.default {
        if !inside_meta {
            let default_path = child(path, "default");
            let mut pruned = default.clone();
            crate::prune::prune(&mut pruned, Some(s), s.embedded, &mut Vec::new());
            if &pruned != default {
                errs.push(FieldError::invalid(
                    default_path.clone(),
                    Bad::Json(default.clone()),
                    "must not have unknown fields",
                ));
            }
            let mut meta = Vec::new();
            embedded_walk(&FPath::named(&default_path), default, Some(s), &mut meta);
            if meta.is_empty() {
                OpenApi { prefix: Some(&default_path) }.check(s, default, "", errs);
            } else {
                errs.extend(meta);
            }
        }
    }
    if let Some(items) = &s.items {
        validate_defaults(items, &child(path, "items"), inside_meta, false, errs);
    }
    for (k, p) in &s.properties {
        let sub_inside =
            inside_meta || (embedded && matches!(k.as_str(), "metadata" | "apiVersion" | "kind"));
        validate_defaults(p, &key(&child(path, "properties"), k), sub_inside, false, errs);
    }
}
