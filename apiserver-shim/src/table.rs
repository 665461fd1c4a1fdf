//! Table columns: what each kind's strategy prints for `kubectl get` (`as=Table` answers are
//! built by `http/table.rs`).

use serde_json::{json, Value};

/// A column of a built-in kind's table.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    /// The header.
    pub name: &'static str,
    /// The OpenAPI type of the cells.
    pub kind: &'static str,
    /// The OpenAPI format of the cells (`name` for the name column).
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0 for columns always shown, 1 for those `-o wide` adds.
    pub priority: u8,
}

/// A column shown always.
pub const fn col(name: &'static str, kind: &'static str, description: &'static str) -> Column {
    Column { name, kind, format: "", description, priority: 0 }
}

/// A string column only `-o wide` shows.
pub const fn wide(name: &'static str, description: &'static str) -> Column {
    Column { name, kind: "string", format: "", description, priority: 1 }
}

/// The name column every table starts with.
pub const NAME: Column = Column {
    name: "Name",
    kind: "string",
    format: "name",
    description: "Name must be unique within a namespace.",
    priority: 0,
};
/// The age column.
pub const AGE: Column = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);

/// A Kubernetes-style age: `5s`, `3m20s`, `4h`, `2d3h`.
pub fn human_age(created: Option<&str>) -> String {
    let Some(created) = created.and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok()) else {
        return "<unknown>".into();
    };
    let secs = (chrono::Utc::now() - created.with_timezone(&chrono::Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 8 * 3600 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s if s < 8 * 86400 => format!("{}d{}h", s / 86400, (s % 86400) / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// A string at a JSON pointer; empty if unset.
pub fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The number of entries of a map field.
pub fn count(object: &Value, field: &str) -> usize {
    object.get(field).and_then(Value::as_object).map_or(0, |m| m.len())
}

/// `<none>` for an empty cell.
pub fn or_none(s: String) -> String {
    if s.is_empty() {
        "<none>".into()
    } else {
        s
    }
}

/// The name cell of an object's row.
pub fn name_cell(o: &Value) -> Value {
    json!(str_at(o, "/metadata/name"))
}

/// The age cell of an object's row.
pub fn age_cell(o: &Value) -> Value {
    json!(human_age(o.pointer("/metadata/creationTimestamp").and_then(Value::as_str)))
}

/// The definitions of `columns`.
pub fn definitions(columns: &[Column]) -> Vec<Value> {
    columns
        .iter()
        .map(|c| definition(c.name, c.kind, c.format, c.description, c.priority.into()))
        .collect()
}

/// A column's definition in a Table.
pub fn definition(name: &str, kind: &str, format: &str, description: &str, priority: i32) -> Value {
    json!({
        "name": name,
        "type": kind,
        "format": format,
        "description": description,
        "priority": priority,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(human_age(None), "<unknown>");
        let ten_days = (chrono::Utc::now() - chrono::Duration::days(10)).to_rfc3339();
        assert_eq!(human_age(Some(&ten_days)), "10d");
    }
}
