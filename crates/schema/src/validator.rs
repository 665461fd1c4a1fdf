//! Validating an object against its schema, as kube-apiserver does for custom resources:
//! kube-openapi's schema validator (with the field errors `ValidateCustomResource` turns its
//! results into), the embedded-resource checks (`schema/objectmeta`) and the list-type
//! invariants (`schema/listtype`).

use serde_json::{Map, Value};

use crate::error::{child, go_json, go_quote, Bad, FieldError, Num};
use crate::node::{Additional, Node};

/// A `field.Path`: `None` is the nil path kube-apiserver validates custom resources from (printed
/// `<nil>`).
#[derive(Debug, Clone, Default)]
pub(crate) struct FPath(Option<String>);

impl FPath {
    pub(crate) fn nil() -> FPath {
        FPath(None)
    }

    pub(crate) fn named(p: &str) -> FPath {
        FPath(Some(p.to_string()))
    }

    pub(crate) fn child(&self, name: &str) -> FPath {
        FPath(Some(match &self.0 {
            None => name.to_string(),
            Some(p) => format!("{p}.{name}"),
        }))
    }

    pub(crate) fn key(&self, k: &str) -> FPath {
        FPath(Some(format!("{}[{k}]", self.0.as_deref().unwrap_or(""))))
    }

    pub(crate) fn index(&self, i: usize) -> FPath {
        FPath(Some(format!("{}[{i}]", self.0.as_deref().unwrap_or(""))))
    }

    pub(crate) fn render(&self) -> String {
        self.0.clone().unwrap_or_else(|| "<nil>".to_string())
    }
}

fn sorted_keys(m: &Map<String, Value>) -> Vec<&String> {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort();
    keys
}

/// kube-openapi's `SchemaValidator`. Value paths are kube-openapi's names (`spec.ports[0].name`,
/// `.spec` for required fields at the root); the field of an error is the name without a leading
/// dot, under `prefix` (nil for an object, `….default` for a schema's default).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpenApi<'a> {
    pub(crate) prefix: Option<&'a str>,
}

fn sub_name(name: &str, field: &str) -> String {
    if name.is_empty() {
        field.to_string()
    } else {
        format!("{name}.{field}")
    }
}

/// swag's `IsFloat64AJSONInteger`.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_992.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    if f == f.trunc() {
        return true;
    }
    if f < 0.0 {
        return false;
    }
    let g = f.trunc();
    let diff = (f - g).abs();
    if g == 0.0 {
        return diff < 1e-9 * f64::MIN_POSITIVE;
    }
    diff / (f.abs() + g.abs()) < 1e-9
}

/// Whether a value equals an enum entry, as kube-openapi compares them (numbers of either Go
/// type compare by value).
fn enum_eq(v: &Value, e: &Value) -> bool {
    match (v, e) {
        (Value::Number(a), Value::Number(b)) => match (Num::of(a), Num::of(b)) {
            (Num::Int(x), Num::Int(y)) => x == y,
            (x, y) => x.as_f64() == y.as_f64(),
        },
        _ => v == e,
    }
}

impl OpenApi<'_> {
    fn field(&self, name: &str) -> String {
        let trimmed = name.strip_prefix('.').unwrap_or(name);
        match (self.prefix, trimmed.is_empty()) {
            (None, true) => "<nil>".to_string(),
            (None, false) => trimmed.to_string(),
            (Some(p), true) => p.to_string(),
            (Some(p), false) => child(p, trimmed),
        }
    }

    /// An error that is not a `*errors.Validation` (allOf/anyOf/oneOf/not): reported at the
    /// prefix with an empty value.
    fn composite(&self, detail: String) -> FieldError {
        let field = self.prefix.map(str::to_string).unwrap_or_else(|| "<nil>".to_string());
        FieldError::invalid(field, Bad::Str(String::new()), detail)
    }

    fn is_valid(&self, s: &Node, v: &Value, name: &str) -> (bool, Vec<FieldError>) {
        let mut out = Vec::new();
        self.check(s, v, name, &mut out);
        (out.is_empty(), out)
    }

    /// Validates `v` (named `name`) against `s`, appending every failure.
    pub(crate) fn check(&self, s: &Node, v: &Value, name: &str, out: &mut Vec<FieldError>) {
        if v.is_null() {
            let types = s.types();
            if !types.is_empty() && !s.nullable {
                out.push(FieldError::type_invalid(
                    self.field(name),
                    Bad::Str("null".into()),
                    format!("{name} in body must be of type {}: \"null\"", types.join(",")),
                ));
            }
            self.check_enum(s, v, name, out);
            return;
        }
        self.check_type(s, v, name, out);
        self.check_junctions(s, v, name, out);
        match v {
            Value::String(st) => {
                self.check_string(s, st, name, out);
                self.check_format(s, st, name, out);
            }
            Value::Number(n) => self.check_number(s, Num::of(n), name, out),
            Value::Array(items) => self.check_array(s, items, name, out),
            _ => {}
        }
        self.check_enum(s, v, name, out);
        if let Value::Object(m) = v {
            self.check_object(s, m, name, out);
        }
    }

    fn check_type(&self, s: &Node, v: &Value, name: &str, out: &mut Vec<FieldError>) {
        let types = s.types();
        let format = s.effective_format();
        if types.is_empty() && format.is_empty() {
            return;
        }
        let (sch_type, data_format) = match v {
            Value::Bool(_) => ("boolean", ""),
            Value::String(_) => ("string", ""),
            Value::Number(n) => match Num::of(n) {
                Num::Int(_) => ("integer", "int64"),
                Num::Float(_) => ("number", "float64"),
            },
            Value::Array(_) => ("array", ""),
            Value::Object(_) => ("object", ""),
            Value::Null => return,
        };
        let contains = |t: &str| types.contains(&t);
        let is_float_int =
            sch_type == "number" && v.as_f64().is_some_and(is_json_integer) && contains("integer");
        let is_int_float = sch_type == "integer" && contains("number");
        let string_or_slice = matches!(v, Value::String(_) | Value::Array(_));
        let type_ok = contains(sch_type) || is_float_int || is_int_float;
        if !string_or_slice && !format.is_empty() && !type_ok && data_format != format {
            out.push(FieldError::type_invalid(
                self.field(name),
                Bad::Str(data_format.to_string()),
                format!("{name} in body must be of type {format}: {}", go_quote(data_format)),
            ));
            return;
        }
        // kube-openapi accepts a string or a list for any non-numeric type with a format.
        let numeric = contains("number") || contains("integer");
        if !numeric && !format.is_empty() && string_or_slice {
            return;
        }
        if !type_ok {
            out.push(FieldError::type_invalid(
                self.field(name),
                Bad::Str(sch_type.to_string()),
                format!(
                    "{name} in body must be of type {}: {}",
                    types.join(","),
                    go_quote(sch_type)
                ),
            ));
        }
    }

    fn check_junctions(&self, s: &Node, v: &Value, name: &str, out: &mut Vec<FieldError>) {
        let quoted = go_quote(name);
        if !s.any_of.is_empty() {
            let mut best: Option<Vec<FieldError>> = None;
            let mut succeeded = false;
            for sub in &s.any_of {
                let (ok, errs) = self.is_valid(sub, v, name);
                if ok {
                    succeeded = true;
                    best = None;
                    break;
                }
                if best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                    best = Some(errs);
                }
            }
            if !succeeded {
                out.push(
                    self.composite(format!("{quoted} must validate at least one schema (anyOf)")),
                );
            }
            out.extend(best.unwrap_or_default());
        }
        if !s.one_of.is_empty() {
            let mut best: Option<Vec<FieldError>> = None;
            let mut validated = 0;
            for sub in &s.one_of {
                let (ok, errs) = self.is_valid(sub, v, name);
                if ok {
                    validated += 1;
                    best = None;
                    continue;
                }
                if validated == 0 && best.as_ref().is_none_or(|b| errs.len() < b.len()) {
                    best = Some(errs);
                }
            }
            if validated != 1 {
                let more = if validated == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {validated} valid alternatives")
                };
                out.push(self.composite(format!(
                    "{quoted} must validate one and only one schema (oneOf). {more}"
                )));
                out.extend(best.unwrap_or_default());
            }
        }
        if !s.all_of.is_empty() {
            let mut validated = 0;
            for sub in &s.all_of {
                let (ok, errs) = self.is_valid(sub, v, name);
                if ok {
                    validated += 1;
                }
                out.extend(errs);
            }
            if validated != s.all_of.len() {
                let more = if validated == 0 { ". None validated" } else { "" };
                out.push(
                    self.composite(format!("{quoted} must validate all the schemas (allOf){more}")),
                );
            }
        }
        if let Some(not) = &s.not {
            if self.is_valid(not, v, name).0 {
                out.push(self.composite(format!("{quoted} must not validate the schema (not)")));
            }
        }
    }

    fn check_string(&self, s: &Node, st: &str, name: &str, out: &mut Vec<FieldError>) {
        let len = st.chars().count() as i64;
        if let Some(max) = s.max_length {
            if len > max {
                out.push(FieldError::too_long(self.field(name), max));
                return;
            }
        }
        if let Some(min) = s.min_length {
            if len < min {
                out.push(FieldError::invalid(
                    self.field(name),
                    Bad::Str(st.to_string()),
                    format!("{name} in body should be at least {min} chars long"),
                ));
                return;
            }
        }
        if let (Some(pattern), Some(re)) = (&s.pattern, &s.pattern_regex) {
            if !re.is_match(st) {
                out.push(FieldError::invalid(
                    self.field(name),
                    Bad::Str(st.to_string()),
                    format!("{name} in body should match '{pattern}'"),
                ));
            }
        }
    }

    fn check_format(&self, s: &Node, st: &str, name: &str, out: &mut Vec<FieldError>) {
        let format = s.effective_format();
        if format.is_empty() || !crate::formats::is_supported(format) {
            return;
        }
        if !crate::formats::validate(format, st) {
            out.push(FieldError::type_invalid(
                self.field(name),
                Bad::Str(st.to_string()),
                format!("{name} in body must be of type {format}: {}", go_quote(st)),
            ));
        }
    }

    fn check_number(&self, s: &Node, n: Num, name: &str, out: &mut Vec<FieldError>) {
        let field = || self.field(name);
        let bad = || match n {
            Num::Int(i) => Bad::Int(i),
            Num::Float(f) => Bad::Raw(crate::error::go_float(f)),
        };
        if let Some(factor) = s.multiple_of {
            let int_factor = factor as i64;
            match n {
                Num::Int(i) if int_factor != 0 => {
                    if int_factor < 0 {
                        out.push(FieldError::invalid(
                            field(),
                            Bad::Int(int_factor),
                            format!("factor MultipleOf declared for {name} must be positive: {int_factor}"),
                        ));
                    } else if i.wrapping_div(int_factor).wrapping_mul(int_factor) != i {
                        out.push(FieldError::invalid(
                            field(),
                            bad(),
                            format!("{name} in body should be a multiple of {int_factor}"),
                        ));
                    }
                }
                _ => {
                    let data = n.as_f64();
                    if factor < 0.0 {
                        out.push(FieldError::invalid(
                            field(),
                            Bad::Raw(crate::error::go_float(factor)),
                            format!(
                                "factor MultipleOf declared for {name} must be positive: {}",
                                crate::error::go_float(factor)
                            ),
                        ));
                    } else {
                        let mult = if factor < 1.0 { 1.0 / factor * data } else { data / factor };
                        if !is_json_integer(mult) {
                            out.push(FieldError::invalid(
                                field(),
                                bad(),
                                format!(
                                    "{name} in body should be a multiple of {}",
                                    crate::error::go_float(factor)
                                ),
                            ));
                        }
                    }
                }
            }
        }
        if let Some(min) = s.minimum {
            let (fails, shown) = match n {
                Num::Int(i) => {
                    let m = min as i64;
                    (
                        (!s.exclusive_minimum && i < m) || (s.exclusive_minimum && i <= m),
                        m.to_string(),
                    )
                }
                Num::Float(f) => (
                    (!s.exclusive_minimum && f < min) || (s.exclusive_minimum && f <= min),
                    crate::error::go_float(min),
                ),
            };
            if fails {
                let words =
                    if s.exclusive_minimum { "greater than" } else { "greater than or equal to" };
                out.push(FieldError::invalid(
                    field(),
                    bad(),
                    format!("{name} in body should be {words} {shown}"),
                ));
            }
        }
        if let Some(max) = s.maximum {
            let (fails, shown) = match n {
                Num::Int(i) => {
                    let m = max as i64;
                    (
                        (!s.exclusive_maximum && i > m) || (s.exclusive_maximum && i >= m),
                        m.to_string(),
                    )
                }
                Num::Float(f) => (
                    (!s.exclusive_maximum && f > max) || (s.exclusive_maximum && f >= max),
                    crate::error::go_float(max),
                ),
            };
            if fails {
                let words = if s.exclusive_maximum { "less than" } else { "less than or equal to" };
                out.push(FieldError::invalid(
                    field(),
                    bad(),
                    format!("{name} in body should be {words} {shown}"),
                ));
            }
        }
    }

    fn check_array(&self, s: &Node, items: &[Value], name: &str, out: &mut Vec<FieldError>) {
        if let Some(item_schema) = &s.items {
            for (i, item) in items.iter().enumerate() {
                self.check(item_schema, item, &format!("{name}[{i}]"), out);
            }
        }
        let size = items.len() as i64;
        if let Some(min) = s.min_items {
            if size < min {
                out.push(FieldError::invalid(
                    self.field(name),
                    Bad::Int(size),
                    format!("{name} in body should have at least {min} items"),
                ));
            }
        }
        if let Some(max) = s.max_items {
            if size > max {
                out.push(FieldError::too_many(self.field(name), size, max));
            }
        }
    }

    fn check_enum(&self, s: &Node, v: &Value, name: &str, out: &mut Vec<FieldError>) {
        if s.enum_values.is_empty() || s.enum_values.iter().any(|e| enum_eq(v, e)) {
            return;
        }
        let valid: Vec<String> = s
            .enum_values
            .iter()
            .map(|e| match e {
                Value::String(st) => st.clone(),
                other => go_json(other),
            })
            .collect();
        out.push(FieldError::not_supported(self.field(name), Bad::Json(v.clone()), &valid));
    }

    fn check_object(
        &self,
        s: &Node,
        m: &Map<String, Value>,
        name: &str,
        out: &mut Vec<FieldError>,
    ) {
        let n = m.len() as i64;
        if let Some(min) = s.min_properties {
            if n < min {
                out.push(FieldError::invalid(
                    self.field(name),
                    Bad::Int(n),
                    format!("{name} in body should have at least {min} properties"),
                ));
                return;
            }
        }
        if let Some(max) = s.max_properties {
            if n > max {
                out.push(FieldError::too_many(self.field(name), n, max));
                return;
            }
        }
        let keys = sorted_keys(m);
        match &s.additional {
            Some(Additional::Bool(false)) => {
                for k in &keys {
                    if !s.properties.contains_key(k.as_str()) {
                        out.push(FieldError::invalid(
                            self.field(name),
                            Bad::Str(k.to_string()),
                            format!("{name}.{k} in body is a forbidden property"),
                        ));
                    }
                }
            }
            Some(Additional::Schema(a)) => {
                for k in &keys {
                    if !s.properties.contains_key(k.as_str()) {
                        if let Some(v) = m.get(k.as_str()) {
                            self.check(a, v, &format!("{name}.{k}"), out);
                        }
                    }
                }
            }
            _ => {}
        }
        for (k, p) in &s.properties {
            if let Some(v) = m.get(k) {
                self.check(p, v, &sub_name(name, k), out);
            }
        }
        for k in &s.required {
            if !m.contains_key(k) {
                out.push(FieldError::required(self.field(&format!("{name}.{k}")), ""));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Embedded resources (objectmeta.Validate)

/// Checks apiVersion and kind of every `x-kubernetes-embedded-resource` object under `x`.
pub(crate) fn embedded_walk(path: &FPath, x: &Value, s: Option<&Node>, out: &mut Vec<FieldError>) {
    let Some(s) = s else { return };
    match x {
        Value::Object(m) => {
            if s.embedded {
                embedded_resource(path, m, out);
            }
            for k in sorted_keys(m) {
                let Some(v) = m.get(k) else { continue };
                if let Some(p) = s.properties.get(k) {
                    embedded_walk(&path.child(k), v, Some(p), out);
                } else if s.additional.is_some() {
                    embedded_walk(&path.key(k), v, s.additional_schema(), out);
                }
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                embedded_walk(&path.index(i), v, s.items.as_deref(), out);
            }
        }
        _ => {}
    }
}

/// apiVersion and kind of one embedded resource: required, strings, well formed.
fn embedded_resource(path: &FPath, x: &Map<String, Value>, out: &mut Vec<FieldError>) {
    if !x.contains_key("apiVersion") {
        out.push(FieldError::required(path.child("apiVersion").render(), ""));
    }
    if !x.contains_key("kind") {
        out.push(FieldError::required(path.child("kind").render(), ""));
    }
    for k in sorted_keys(x) {
        let Some(v) = x.get(k) else { continue };
        match k.as_str() {
            "apiVersion" => {
                let field = path.child("apiVersion").render();
                match v {
                    Value::String(av) if av.is_empty() => out.push(FieldError::required(field, "")),
                    Value::String(av) => {
                        if av != "/" && av.matches('/').count() > 1 {
                            out.push(FieldError::invalid(
                                field,
                                Bad::Str(av.clone()),
                                format!("unexpected GroupVersion string: {av}"),
                            ));
                        }
                    }
                    other => out.push(FieldError::invalid(
                        field,
                        Bad::Json(other.clone()),
                        "must be a string",
                    )),
                }
            }
            "kind" => {
                let field = path.child("kind").render();
                match v {
                    Value::String(kind) if kind.is_empty() => {
                        out.push(FieldError::required(field, ""))
                    }
                    Value::String(kind) => {
                        let errs = carrel_machinery::names::dns1035_label(&kind.to_lowercase());
                        if !errs.is_empty() {
                            out.push(FieldError::invalid(
                                field,
                                Bad::Str(kind.clone()),
                                format!(
                                    "may have mixed case, but should otherwise match: {}",
                                    errs.join(",")
                                ),
                            ));
                        }
                    }
                    other => out.push(FieldError::invalid(
                        field,
                        Bad::Json(other.clone()),
                        "must be a string",
                    )),
                }
            }
            "metadata" if !v.is_object() => {
                out.push(FieldError::invalid(
                    path.child("metadata").render(),
                    Bad::Json(v.clone()),
                    "must be an object",
                ));
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// List types (listtype.ValidateListSetsAndMaps)

/// Checks that `set` lists have unique items and `map` lists unique keys, under `obj`.
pub(crate) fn list_walk_map(
    path: &FPath,
    s: &Node,
    obj: &Map<String, Value>,
    out: &mut Vec<FieldError>,
) {
    let keys = sorted_keys(obj);
    if let Some(a) = s.additional_schema() {
        for k in &keys {
            if let Some(v) = obj.get(k.as_str()) {
                list_walk_value(&path.key(k), a, v, out);
            }
        }
    }
    if !s.properties.is_empty() {
        for k in &keys {
            if let (Some(p), Some(v)) = (s.properties.get(k.as_str()), obj.get(k.as_str())) {
                list_walk_value(&path.child(k), p, v, out);
            }
        }
    }
}

fn list_walk_value(path: &FPath, s: &Node, v: &Value, out: &mut Vec<FieldError>) {
    match v {
        Value::Array(items) => list_array(path, s, items, out),
        Value::Object(m) => list_walk_map(path, s, m, out),
        _ => {}
    }
}

fn list_array(path: &FPath, s: &Node, items: &[Value], out: &mut Vec<FieldError>) {
    match s.list_type.as_deref() {
        Some("set") => {
            for i in non_unique(items) {
                out.push(FieldError::duplicate(
                    path.index(i).render(),
                    Bad::Json(items[i].clone()),
                ));
            }
        }
        Some("map") => list_map(path, s, items, out),
        _ => {}
    }
    if let Some(item_schema) = &s.items {
        for (i, v) in items.iter().enumerate() {
            list_walk_value(&path.index(i), item_schema, v, out);
        }
    }
}

/// The index of the second appearance of every repeated item. Lists and maps compare by their
/// JSON; scalars as Go compares them (an integer and a float differ).
fn non_unique(items: &[Value]) -> Vec<usize> {
    let refs: Vec<Option<&Value>> = items.iter().map(Some).collect();
    non_unique_keys(&refs)
}

/// As [`non_unique`], where `None` (a missing key) equals only other `None`s.
fn non_unique_keys(items: &[Option<&Value>]) -> Vec<usize> {
    if items.len() <= 1 {
        return Vec::new();
    }
    let same = |x: Option<&Value>, y: Option<&Value>| match (x, y) {
        (None, None) => true,
        (
            Some(x @ (Value::Object(_) | Value::Array(_))),
            Some(y @ (Value::Object(_) | Value::Array(_))),
        ) => go_json(x) == go_json(y),
        (Some(x), Some(y)) => x == y,
        _ => false,
    };
    let mut seen: Vec<(Option<&Value>, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, x) in items.iter().enumerate() {
        match seen.iter_mut().find(|(y, _)| same(*x, *y)) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    out.push(i);
                }
            }
            None => seen.push((*x, 1)),
        }
    }
    out
}

fn list_map(path: &FPath, s: &Node, items: &[Value], out: &mut Vec<FieldError>) {
    for (i, x) in items.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            out.push(FieldError::invalid(
                path.index(i).render(),
                Bad::Json(x.clone()),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if items.len() <= 1 {
        return;
    }
    if s.list_map_keys.len() == 1 {
        let key_field = &s.list_map_keys[0];
        let keys: Vec<Option<&Value>> =
            items.iter().map(|x| x.as_object().and_then(|m| m.get(key_field))).collect();
        for i in non_unique_keys(&keys) {
            let bad = match keys[i] {
                None => Bad::Raw("map[string]interface {}{}".to_string()),
                Some(v) => {
                    let mut m = Map::new();
                    m.insert(key_field.clone(), v.clone());
                    Bad::Json(Value::Object(m))
                }
            };
            out.push(FieldError::duplicate(path.index(i).render(), bad));
        }
        return;
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|x| {
            let mut m = Map::new();
            if let Some(obj) = x.as_object() {
                for k in &s.list_map_keys {
                    if let Some(v) = obj.get(k) {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(m)
        })
        .collect();
    for i in non_unique(&keys) {
        out.push(FieldError::duplicate(path.index(i).render(), Bad::Json(keys[i].clone())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_integers() {
        assert!(is_json_integer(3.0));
        assert!(is_json_integer(-3.0));
        assert!(!is_json_integer(3.5));
        assert!(!is_json_integer(1e300));
    }

    #[test]
    fn duplicates_are_reported_once() {
        let items = vec![Value::from(1), Value::from(2), Value::from(1), Value::from(1)];
        assert_eq!(non_unique(&items), vec![2]);
        let items = vec![Value::from(1), Value::from(1.0)];
        assert!(non_unique(&items).is_empty());
    }
}
