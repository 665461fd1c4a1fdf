//! `additionalPrinterColumns`: the columns `kubectl get` prints for a custom resource, each a
//! JSONPath into the object.

use jsonpath_rust::parser::errors::JsonPathError;
use jsonpath_rust::JsonPath;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
use serde_json::{json, Value};

/// One printer column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// The header.
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    /// An OpenAPI format hint.
    pub format: String,
    /// The description.
    pub description: String,
    /// 0 for `kubectl get`; higher only under `-o wide`.
    pub priority: i32,
    /// The JSONPath, as Kubernetes writes it (`.spec.replicas`).
    pub json_path: String,
}

/// The columns of a version: its own, or the default Age column.
pub fn of(columns: Option<&[ext::CustomResourceColumnDefinition]>) -> Vec<Column> {
    match columns {
        Some(columns) if !columns.is_empty() => columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                type_: c.type_.clone(),
                format: c.format.clone().unwrap_or_default(),
                description: c.description.clone().unwrap_or_default(),
                priority: c.priority.unwrap_or(0),
                json_path: c.json_path.clone(),
            })
            .collect(),
        _ => vec![Column {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: "CreationTimestamp is a timestamp representing the server time when this \
                          object was created."
                .into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }],
    }
}

/// A Kubernetes JSONPath (`.spec.x`, `{.spec.x}`) as an RFC 9535 query (`$.spec.x`).
fn query_of(json_path: &str) -> String {
    let trimmed = json_path.trim();
    let inner = trimmed.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(trimmed);
    let inner = inner.strip_prefix('$').unwrap_or(inner);
    format!("${inner}")
}

/// Why a column cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ColumnError {
    /// Its JSONPath does not parse; the parser's complaint.
    #[error(transparent)]
    Path(#[from] JsonPathError),
}

/// Whether a column's JSONPath parses; the parser's complaint if not.
pub fn check_path(json_path: &str) -> Result<(), ColumnError> {
    jsonpath_rust::parser::parse_json_path(&query_of(json_path))
        .map(drop)
        .map_err(ColumnError::from)
}

/// The text of a value in a string column: strings as they are, anything else as JSON.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A value in a column of a type other than string: a number, a boolean, or for a date the age
/// kubectl prints (`<invalid>` for a string that is not a timestamp); null when the value is not
/// of the column's type.
fn typed_cell(type_: &str, value: &Value) -> Value {
    match (type_, value) {
        ("integer", Value::Number(n)) => n
            .as_i64()
            .map(Value::from)
            .or_else(|| n.as_f64().map(|f| json!(f as i64)))
            .unwrap_or(Value::Null),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => match chrono::DateTime::parse_from_rfc3339(s) {
            Ok(_) => json!(crate::table::human_age(Some(s))),
            Err(_) => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// The cells of one row: the name, then each column's value (null when the path finds nothing,
/// which kubectl prints as `<none>`). Date columns hold the timestamp; kubectl shows it as an age.
pub fn cells(columns: &[Column], object: &Value) -> Vec<Value> {
    let mut cells = vec![object.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
    for column in columns {
        let found: Vec<&Value> = object.query(&query_of(&column.json_path)).unwrap_or_default();
        let cell = match found.as_slice() {
            [] => Value::Null,
            [one] if column.type_ == "string" => json!(text(one)),
            [one] => typed_cell(&column.type_, one),
            many => json!(many.iter().map(|v| text(v)).collect::<Vec<_>>().join(",")),
        };
        cells.push(cell);
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, type_: &str, path: &str) -> Column {
        Column {
            name: name.into(),
            type_: type_.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        }
    }

    #[test]
    fn cells_follow_json_paths() {
        let object = json!({
            "metadata": {"name": "train"},
            "spec": {"replicas": 3, "image": "pytorch"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Done", "status": "False"},
            ]},
        });
        let columns = [
            column("Replicas", "integer", ".spec.replicas"),
            column("Image", "string", "{.spec.image}"),
            column("Ready", "string", ".status.conditions[?(@.type==\"Ready\")].status"),
            column("Missing", "string", ".spec.nothing"),
            column("Types", "string", ".status.conditions[*].type"),
        ];
        assert_eq!(
            cells(&columns, &object),
            vec![
                json!("train"),
                json!(3),
                json!("pytorch"),
                json!("True"),
                Value::Null,
                json!("Ready,Done")
            ]
        );
    }

    #[test]
    fn bad_paths_are_reported() {
        assert!(check_path(".spec.replicas").is_ok());
        assert!(check_path(".spec[").is_err());
    }

    #[test]
    fn the_default_column_is_age() {
        let columns = of(None);
        assert_eq!(columns.len(), 1);
        assert_eq!((columns[0].name.as_str(), columns[0].type_.as_str()), ("Age", "date"));
    }
}
