//! JSON as kube-apiserver writes it, byte for byte: Go's `encoding/json` over Go types.
//!
//! - A built-in kind's object has its fields in the order of its Go struct: `kind` and
//!   `apiVersion` (the inlined `TypeMeta`), then `metadata`, `spec`, `status`, and inside each
//!   the struct's own order (`ObjectMeta`: `name`, `generateName`, `namespace`, `selfLink`,
//!   `uid`, `resourceVersion`, …). The order comes from the protobuf table of
//!   [`crate::protobuf`], whose messages list their fields as the Go structs declare them.
//!   Fields the table does not know (newer than it) follow, by name.
//! - Items of a built-in kind's list carry no `kind` and `apiVersion`, as Go's typed lists
//!   write them.
//! - Maps, custom resources and their lists (Go's `map[string]interface{}`) have their keys
//!   sorted, as `serde_json` keeps them.
//! - The few apimachinery types that are no kind of the table (`Status`, `Table`, `ListMeta`,
//!   `WatchEvent`, `PartialObjectMetadata`, discovery documents) have their orders here.
//! - Strings are escaped as Go escapes them: `<`, `>`, `&`, U+2028 and U+2029 as `\u003c`,
//!   `\u003e`, `\u0026`, `\u2028`, `\u2029`, besides what JSON itself requires.
//!
//! Nothing here ends a value with the newline Go's encoder adds: the HTTP layer does that.

use std::io;

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::protobuf::{self, Card, Message, Shape, Ty};

/// `value` as kube-apiserver writes it, its order decided by its `apiVersion` and `kind`.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(&mut out, value);
    out
}

/// [`to_vec`], appended to `out`.
pub fn write(out: &mut Vec<u8>, value: &Value) {
    encode(out, value, Order::Object);
}

/// An item of a list as the list writes it: an object of a kind of the table without its
/// `kind` and `apiVersion`, anything else as [`write()`] writes it.
pub fn write_item(out: &mut Vec<u8>, value: &Value) {
    let order = match object_order(value) {
        Order::Root(message) => Order::Item(message),
        other => other,
    };
    encode(out, value, order);
}

/// Whether objects of this kind are Go structs whose order the table knows, so that their
/// stored JSON starts with `{"kind":`.
pub fn is_typed(api_version: &str, kind: &str) -> bool {
    protobuf::kind_message(api_version, kind).is_some()
}

/// A list's own fields, `items` aside, in the order its encoder writes them: `kind`,
/// `apiVersion`, `metadata` for a typed list; sorted (`apiVersion`, then `items`, then `kind`
/// and `metadata`) for a custom resource's.
pub fn list_head(api_version: &str, kind: &str, typed: bool, metadata: &Value) -> ListHead {
    let mut meta = Vec::new();
    encode(&mut meta, metadata, LIST_META);
    let quoted = |s: &str| {
        let mut out = Vec::new();
        encode(&mut out, &Value::from(s), Order::Plain);
        out
    };
    let (api_version, kind) = (quoted(api_version), quoted(kind));
    let mut head = Vec::new();
    let mut tail = Vec::new();
    if typed {
        head.extend_from_slice(b"{\"kind\":");
        head.extend_from_slice(&kind);
        head.extend_from_slice(b",\"apiVersion\":");
        head.extend_from_slice(&api_version);
        head.extend_from_slice(b",\"metadata\":");
        head.extend_from_slice(&meta);
        head.extend_from_slice(b",\"items\":[");
        tail.extend_from_slice(b"]}");
    } else {
        head.extend_from_slice(b"{\"apiVersion\":");
        head.extend_from_slice(&api_version);
        head.extend_from_slice(b",\"items\":[");
        tail.extend_from_slice(b"],\"kind\":");
        tail.extend_from_slice(&kind);
        tail.extend_from_slice(b",\"metadata\":");
        tail.extend_from_slice(&meta);
        tail.push(b'}');
    }
    ListHead { head, tail }
}

/// What a list's JSON holds around its items.
#[derive(Debug)]
pub struct ListHead {
    /// Up to and including `"items":[`.
    pub head: Vec<u8>,
    /// From the `]` that closes the items.
    pub tail: Vec<u8>,
}

/// In the stored JSON of a typed object (see [`is_typed`]), where the members after its
/// leading `kind` and `apiVersion` begin (or its closing brace): what `{` and the rest make
/// the object as an item of its list. `None` for bytes that do not start with them.
pub fn type_meta_end(json: &[u8]) -> Option<usize> {
    let quoted_end = |from: usize| {
        let rest = json.get(from..)?;
        Some(from + memchr::memchr(b'"', rest)? + 1)
    };
    let at = quoted_end(json.strip_prefix(b"{\"kind\":\"").map(|_| 9)?)?;
    let at = if json[at..].starts_with(b",\"apiVersion\":\"") { at + 15 } else { return None };
    let at = quoted_end(at)?;
    match json.get(at)? {
        b',' => Some(at + 1),
        b'}' => Some(at),
        _ => None,
    }
}

/// How a value's members are ordered.
#[derive(Clone, Copy)]
enum Order {
    /// As they are: sorted keys (Go maps, unstructured objects), arrays element by element.
    Plain,
    /// An embedded object (`runtime.Object`, `RawExtension`): ordered by its own kind.
    Object,
    /// An object of a kind of the table: `kind`, `apiVersion`, then its message's fields.
    Root(&'static Message),
    /// A typed list's item: its message's fields, without `kind` and `apiVersion`.
    Item(&'static Message),
    /// A message of the table.
    Message(&'static Message),
    /// A message of the table, by its proto name.
    Named(&'static str),
    /// A map whose values are messages of the table.
    MapOf(&'static Message),
    /// A typed list: `kind`, `apiVersion`, `metadata`, then items of this message.
    List(&'static Message),
    /// A struct the table does not hold: its fields in this order.
    Fixed(&'static [(&'static str, Order)]),
}

const OBJECT_META: Order = Order::Named("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
const LIST_META: Order = Order::Fixed(&[
    ("selfLink", Order::Plain),
    ("resourceVersion", Order::Plain),
    ("continue", Order::Plain),
    ("remainingItemCount", Order::Plain),
]);
const STATUS: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("metadata", LIST_META),
    ("status", Order::Plain),
    ("message", Order::Plain),
    ("reason", Order::Plain),
    (
        "details",
        Order::Fixed(&[
            ("name", Order::Plain),
            ("group", Order::Plain),
            ("kind", Order::Plain),
            ("uid", Order::Plain),
            (
                "causes",
                Order::Fixed(&[
                    ("reason", Order::Plain),
                    ("message", Order::Plain),
                    ("field", Order::Plain),
                ]),
            ),
            ("retryAfterSeconds", Order::Plain),
        ]),
    ),
    ("code", Order::Plain),
]);
const TABLE: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("metadata", LIST_META),
    (
        "columnDefinitions",
        Order::Fixed(&[
            ("name", Order::Plain),
            ("type", Order::Plain),
            ("format", Order::Plain),
            ("description", Order::Plain),
            ("priority", Order::Plain),
        ]),
    ),
    (
        "rows",
        Order::Fixed(&[
            ("cells", Order::Plain),
            (
                "conditions",
                Order::Fixed(&[
                    ("type", Order::Plain),
                    ("status", Order::Plain),
                    ("reason", Order::Plain),
                    ("message", Order::Plain),
                ]),
            ),
            ("object", Order::Object),
        ]),
    ),
]);
const PARTIAL_OBJECT_METADATA: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("metadata", OBJECT_META),
]);
const PARTIAL_OBJECT_METADATA_LIST: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("metadata", LIST_META),
    ("items", PARTIAL_OBJECT_METADATA),
]);
const WATCH_EVENT: Order = Order::Fixed(&[("type", Order::Plain), ("object", Order::Object)]);
const GROUP_VERSION: Order =
    Order::Fixed(&[("groupVersion", Order::Plain), ("version", Order::Plain)]);
const SERVER_ADDRESSES: Order =
    Order::Fixed(&[("clientCIDR", Order::Plain), ("serverAddress", Order::Plain)]);
const API_GROUP: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("name", Order::Plain),
    ("versions", GROUP_VERSION),
    ("preferredVersion", GROUP_VERSION),
    ("serverAddressByClientCIDRs", SERVER_ADDRESSES),
]);
const API_GROUP_LIST: Order =
    Order::Fixed(&[("kind", Order::Plain), ("apiVersion", Order::Plain), ("groups", API_GROUP)]);
const API_VERSIONS: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("versions", Order::Plain),
    ("serverAddressByClientCIDRs", SERVER_ADDRESSES),
]);
const API_RESOURCE_LIST: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("groupVersion", Order::Plain),
    (
        "resources",
        Order::Fixed(&[
            ("name", Order::Plain),
            ("singularName", Order::Plain),
            ("namespaced", Order::Plain),
            ("group", Order::Plain),
            ("version", Order::Plain),
            ("kind", Order::Plain),
            ("verbs", Order::Plain),
            ("shortNames", Order::Plain),
            ("categories", Order::Plain),
            ("storageVersionHash", Order::Plain),
        ]),
    ),
]);
const GROUP_VERSION_KIND: Order =
    Order::Fixed(&[("group", Order::Plain), ("version", Order::Plain), ("kind", Order::Plain)]);
const API_GROUP_DISCOVERY: Order = Order::Fixed(&[
    ("metadata", OBJECT_META),
    (
        "versions",
        Order::Fixed(&[
            ("version", Order::Plain),
            (
                "resources",
                Order::Fixed(&[
                    ("resource", Order::Plain),
                    ("responseKind", GROUP_VERSION_KIND),
                    ("scope", Order::Plain),
                    ("singularResource", Order::Plain),
                    ("verbs", Order::Plain),
                    ("shortNames", Order::Plain),
                    ("categories", Order::Plain),
                    (
                        "subresources",
                        Order::Fixed(&[
                            ("subresource", Order::Plain),
                            ("responseKind", GROUP_VERSION_KIND),
                            ("acceptedTypes", GROUP_VERSION_KIND),
                            ("verbs", Order::Plain),
                        ]),
                    ),
                ]),
            ),
            ("freshness", Order::Plain),
        ]),
    ),
]);
const API_GROUP_DISCOVERY_LIST: Order = Order::Fixed(&[
    ("kind", Order::Plain),
    ("apiVersion", Order::Plain),
    ("metadata", LIST_META),
    ("items", API_GROUP_DISCOVERY),
]);

/// The order of a value that stands for itself (a response, a stored object, an embedded
/// object): by its `kind`, and its `apiVersion` where the kind alone does not say.
fn object_order(value: &Value) -> Order {
    let Some(map) = value.as_object() else { return Order::Plain };
    let field = |name: &str| map.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if let Some(message) = protobuf::kind_message(api_version, kind) {
        return Order::Root(message);
    }
    let meta = api_version == "v1" || api_version == "meta.k8s.io/v1";
    match kind {
        "Status" if meta => STATUS,
        "WatchEvent" if meta => WATCH_EVENT,
        "Table" if api_version.starts_with("meta.k8s.io/") => TABLE,
        "PartialObjectMetadata" if api_version.starts_with("meta.k8s.io/") => {
            PARTIAL_OBJECT_METADATA
        }
        "PartialObjectMetadataList" if api_version.starts_with("meta.k8s.io/") => {
            PARTIAL_OBJECT_METADATA_LIST
        }
        "APIGroup" if meta => API_GROUP,
        "APIGroupList" if meta => API_GROUP_LIST,
        "APIVersions" if meta => API_VERSIONS,
        "APIResourceList" if meta => API_RESOURCE_LIST,
        "APIGroupDiscoveryList" if api_version.starts_with("apidiscovery.k8s.io/") => {
            API_GROUP_DISCOVERY_LIST
        }
        _ => match kind.strip_suffix("List").and_then(|k| protobuf::kind_message(api_version, k)) {
            Some(message) if map.contains_key("items") => Order::List(message),
            _ => Order::Plain,
        },
    }
}

fn encode(out: &mut Vec<u8>, value: &Value, order: Order) {
    let mut serializer = serde_json::Serializer::with_formatter(out, GoFormatter);
    // Writing a `Value` (string keys only) into a `Vec` cannot fail.
    let _ = Ordered(value, order).serialize(&mut serializer);
}

/// A value with the order to write it in.
struct Ordered<'a>(&'a Value, Order);

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Ordered(value, order) = *self;
        match (value, order) {
            (_, Order::Plain) => value.serialize(serializer),
            (Value::Array(items), _) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Ordered(item, order))?;
                }
                seq.end()
            }
            (Value::Object(map), _) => ordered_map(map, value, order, serializer),
            _ => value.serialize(serializer),
        }
    }
}

fn ordered_map<S: Serializer>(
    map: &Map<String, Value>,
    value: &Value,
    order: Order,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let order = match order {
        Order::Object => object_order(value),
        Order::Named(name) => protobuf::message_named(name).map_or(Order::Plain, Order::Message),
        other => other,
    };
    if let Order::Plain = order {
        return value.serialize(serializer);
    }
    let mut out = serializer.serialize_map(Some(map.len()))?;
    let mut written = 0;
    let mut entry = |out: &mut S::SerializeMap, key: &str, order: Order| match map.get(key) {
        Some(v) => {
            written += 1;
            out.serialize_entry(key, &Ordered(v, order))
        }
        None => Ok(()),
    };
    match order {
        Order::Root(message) => {
            entry(&mut out, "kind", Order::Plain)?;
            entry(&mut out, "apiVersion", Order::Plain)?;
            each_field(message, &mut |key, order| entry(&mut out, key, order))?;
        }
        Order::Item(message) | Order::Message(message) => {
            each_field(message, &mut |key, order| entry(&mut out, key, order))?;
        }
        Order::MapOf(message) => {
            for (key, v) in map {
                out.serialize_entry(key, &Ordered(v, Order::Message(message)))?;
            }
            return out.end();
        }
        Order::List(message) => {
            entry(&mut out, "kind", Order::Plain)?;
            entry(&mut out, "apiVersion", Order::Plain)?;
            entry(&mut out, "metadata", LIST_META)?;
            entry(&mut out, "items", Order::Item(message))?;
        }
        Order::Fixed(fields) => {
            for &(key, order) in fields {
                entry(&mut out, key, order)?;
            }
        }
        Order::Plain | Order::Object | Order::Named(_) => unreachable!("resolved above"),
    }
    if written < map.len() {
        for (key, v) in map {
            if !is_known(order, key) {
                out.serialize_entry(key, v)?;
            }
        }
    }
    out.end()
}

/// Whether `key` is one of the members `order` writes in its place (or, for a list item, drops).
fn is_known(order: Order, key: &str) -> bool {
    let in_message = |message: &'static Message| {
        let mut found = false;
        let _ = each_field::<()>(message, &mut |name, _| {
            found |= name == key;
            Ok(())
        });
        found
    };
    match order {
        Order::Root(message) | Order::Item(message) => {
            key == "kind" || key == "apiVersion" || in_message(message)
        }
        Order::Message(message) => in_message(message),
        Order::List(_) => matches!(key, "kind" | "apiVersion" | "metadata" | "items"),
        Order::Fixed(fields) => fields.iter().any(|(name, _)| *name == key),
        Order::Plain | Order::Object | Order::Named(_) | Order::MapOf(_) => true,
    }
}

/// Each field of a message with the order of its value, in declaration order, the fields of
/// inlined (embedded) messages in their place.
fn each_field<E>(
    message: &'static Message,
    f: &mut dyn FnMut(&'static str, Order) -> Result<(), E>,
) -> Result<(), E> {
    for field in message.fields {
        let Ty::Msg(index) = field.ty else {
            f(field.json, Order::Plain)?;
            continue;
        };
        let inner = protobuf::message_at(index);
        match (field.card, inner.shape) {
            (Card::Inline, _) => each_field(inner, f)?,
            (Card::Map(_), Shape::Object) => f(field.json, Order::MapOf(inner))?,
            (_, Shape::Object) => f(field.json, Order::Message(inner))?,
            (_, Shape::EmbeddedJson) => f(field.json, Order::Object)?,
            _ => f(field.json, Order::Plain)?,
        }
    }
    Ok(())
}

/// `serde_json`'s compact output with Go's escapes: Go's encoder escapes the characters that
/// are special in HTML, and the line and paragraph separators JavaScript reads as line ends.
struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let bytes = fragment.as_bytes();
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            // The escape, and where the escaped character began.
            let (escape, from): (&[u8], usize) = match b {
                b'<' => (b"\\u003c", i),
                b'>' => (b"\\u003e", i),
                b'&' => (b"\\u0026", i),
                // U+2028 and U+2029 are E2 80 A8 and E2 80 A9 in UTF-8.
                0xA8 | 0xA9 if i >= 2 && bytes[i - 2..i] == [0xE2, 0x80] => {
                    (if b == 0xA8 { b"\\u2028" } else { b"\\u2029" }, i - 2)
                }
                _ => continue,
            };
            writer.write_all(&bytes[start..from])?;
            writer.write_all(escape)?;
            start = i + 1;
        }
        writer.write_all(&bytes[start..])
    }
}

#[cfg(test)]
mod tests;
