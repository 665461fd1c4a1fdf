//! JSON decoding that notices duplicate fields, which `serde_json::Value` silently collapses (the
//! last one wins, as in Go). Under `fieldValidation=Strict` a duplicate is an error, under `Warn` a
//! warning, as kube-apiserver reports them.

use std::cell::RefCell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A JSON document and the paths of the fields that appeared more than once in it.
///
/// `serde_json` refuses documents nested deeper than 128 as it reads them. Paths are only
/// written out for a duplicate: each value knows its parent's segment, so a long key over a long
/// list costs nothing per item (building every item's path would be quadratic).
pub fn parse(bytes: &[u8]) -> serde_json::Result<(Value, Vec<String>)> {
    let duplicates = RefCell::new(Vec::new());
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Seed { path: None, duplicates: &duplicates }.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok((value, duplicates.into_inner()))
}

/// Where a value sits: its segment and its parent's place.
struct Place<'a> {
    parent: Option<&'a Place<'a>>,
    segment: Segment<'a>,
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

impl Place<'_> {
    /// The path as kube-apiserver prints it: `spec.containers[0].image`.
    fn render(&self) -> String {
        let mut segments = vec![&self.segment];
        let mut at = self.parent;
        while let Some(place) = at {
            segments.push(&place.segment);
            at = place.parent;
        }
        let mut out = String::new();
        for segment in segments.into_iter().rev() {
            match segment {
                Segment::Key(key) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

struct Seed<'a> {
    path: Option<&'a Place<'a>>,
    duplicates: &'a RefCell<Vec<String>>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            let place = Place { parent: self.path, segment: Segment::Index(items.len()) };
            match seq.next_element_seed(Seed { path: Some(&place), duplicates: self.duplicates })? {
                Some(item) => items.push(item),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let place = Place { parent: self.path, segment: Segment::Key(&key) };
            let value =
                map.next_value_seed(Seed { path: Some(&place), duplicates: self.duplicates })?;
            if out.contains_key(&key) {
                self.duplicates.borrow_mut().push(place.render());
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_found_at_every_depth() {
        let (value, duplicates) = parse(
            br#"{"metadata":{"name":"a","name":"b"},"spec":{"containers":[{"image":"x","image":"y"}]},"kind":"Pod","kind":"Pod"}"#,
        )
        .unwrap();
        assert_eq!(value["metadata"]["name"], "b", "the last one wins, as in Go");
        assert_eq!(duplicates, ["metadata.name", "spec.containers[0].image", "kind"]);
    }

    #[test]
    fn plain_documents_parse_as_serde_json_does() {
        let text = br#"{"a":[1,-2,3.5,true,null,"s"],"b":{}}"#;
        let (value, duplicates) = parse(text).unwrap();
        assert!(duplicates.is_empty());
        assert_eq!(value, serde_json::from_slice::<Value>(text).unwrap());
        assert!(parse(b"{\"a\":1} trailing").is_err());
        assert!(parse(b"{\"a\":").is_err());
    }

    #[test]
    fn long_keys_over_long_lists_parse_in_linear_time() {
        // A 1 MB key over a list of 500,000 items: writing each item's path out would copy
        // 500 GB; the test finishing shows it is not done.
        let key = "k".repeat(1_000_000);
        let items = vec!["1"; 500_000].join(",");
        let text = format!("{{\"{key}\":[{items}],\"{key}\":[]}}");
        let (value, duplicates) = parse(text.as_bytes()).unwrap();
        assert_eq!(value[key.as_str()], Value::Array(Vec::new()));
        assert_eq!(duplicates, [key]);
        // serde_json's depth limit holds.
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(deep.as_bytes()).is_err());
    }
}
