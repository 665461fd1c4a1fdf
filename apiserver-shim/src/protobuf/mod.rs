//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded into the
//! JSON the rest of the server works on.
//!
//! kubectl 1.32 and later send typed creates this way: the magic `k8s\0`, then a `runtime.Unknown`
//! envelope holding the object's `apiVersion` and `kind` and the object's own protobuf encoding.
//! The object is decoded by walking the protobuf wire format against `schema`, a table generated
//! from k8s-pb (field numbers and types) and k8s-openapi (JSON names) by
//! `cargo run -p xtask -- gen-protobuf`: there is no code per kind here, only the envelope and the
//! few well-known types whose JSON is not an object (times, durations, int-or-strings, quantities,
//! embedded JSON).
//!
//! Wire data follows Go's rules: unknown fields are skipped, a message field sent twice is merged,
//! and a number or bool that is on the wire appears even when zero (`replicas: 0`). Go writes
//! every non-pointer field, set or not, and the wire cannot tell a pointer from a value, so:
//! - an empty string or bytes field is left out unless the OpenAPI schema requires it, as Go's
//!   JSON (`omitempty`) leaves it out; otherwise `imagePullPolicy: ""` would count as set and
//!   defaults would not apply. (A `*string` set to `""` is lost the same way.)
//! - a zero number or `false` is kept, so unset value fields show up as `0` and `false`
//!   (`minReadySeconds: 0`, `hostNetwork: false`), which Kubernetes reads as unset anyway.
//!
//! Malformed input is a 400 BadRequest, never a panic.

use base64::Engine as _;
use carrel_machinery::duration::format as go_duration;
use serde_json::{Map, Number, Value};

use crate::status::ApiError;

mod schema;

/// What a Kubernetes protobuf body starts with.
pub const MAGIC: &[u8] = b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// How deep messages (and embedded objects) may nest.
const MAX_DEPTH: usize = 64;

/// Go's zero `time.Time` (0001-01-01T00:00:00Z) in Unix seconds: it is `null` in JSON.
const GO_ZERO_TIME: i64 = -62_135_596_800;

/// One message of the schema.
#[derive(Debug)]
pub(crate) struct Message {
    /// The proto name, e.g. `k8s.io.api.core.v1.ConfigMap`.
    pub(crate) name: &'static str,
    /// How the message appears in JSON.
    pub(crate) shape: Shape,
    /// Its fields, in declaration order: the order of the Go struct's fields, which is the
    /// order Go's JSON encoder writes them in.
    pub(crate) fields: &'static [Field],
}

/// How a message appears in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// An object with the fields under their JSON names.
    Object,
    /// A proto-only wrapper of a list (`ExtraValue`): the list of its `items`.
    List,
    /// `meta.v1.Time`: an RFC 3339 string to the second.
    Time,
    /// `meta.v1.MicroTime`: an RFC 3339 string to the microsecond.
    MicroTime,
    /// `meta.v1.Duration`: a Go duration string (`1h0m0s`).
    #[allow(dead_code)] // No kind in today's table holds one.
    Duration,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `runtime.RawExtension`, `meta.v1.FieldsV1`: raw bytes holding JSON (or an embedded
    /// protobuf object), which is the JSON value.
    EmbeddedJson,
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    tag: u32,
    pub(crate) json: &'static str,
    /// The type (of the elements, or of the values of a map).
    pub(crate) ty: Ty,
    pub(crate) card: Card,
}

impl Field {
    const fn new(tag: u32, json: &'static str, ty: Ty, card: Card) -> Field {
        Field { tag, json, ty, card }
    }
}

/// A field's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ty {
    String,
    Bytes,
    Bool,
    Int32,
    Int64,
    #[allow(dead_code)] // No kind in today's table holds one.
    Double,
    #[allow(dead_code)] // No kind in today's table holds one.
    Float,
    /// A message: its index in [`schema::MESSAGES`].
    Msg(usize),
}

/// A field's cardinality.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Card {
    /// Present in JSON whenever it is on the wire, zero or not.
    Optional,
    /// A string or bytes field left out of JSON when empty.
    OmitEmpty,
    /// A message whose fields are its parent's in JSON (a Go struct embedded with
    /// `json:",inline"`, like `VolumeSource` in `Volume`).
    Inline,
    /// A list.
    Repeated,
    /// A map with keys of this type.
    Map(Ty),
}

/// Decode a Kubernetes protobuf request body into the object's JSON, `apiVersion` and `kind`
/// included.
pub fn decode_request(body: &[u8]) -> Result<Value, ApiError> {
    let Some(envelope) = body.strip_prefix(MAGIC) else {
        return Err(ApiError::bad_request(
            "not a Kubernetes protobuf body: it does not start with \"k8s\\x00\"",
        ));
    };
    decode_unknown(envelope, 0).map_err(Failure::into_api_error)
}

/// The message a kind is decoded as, e.g. `k8s.io.api.core.v1.ConfigMap` for `v1`, `ConfigMap`.
pub fn message_name(api_version: &str, kind: &str) -> Option<&'static str> {
    kind_index(api_version, kind).map(|i| schema::MESSAGES[i].name)
}

/// The message of a kind, e.g. `core.v1.Pod` for `v1`, `Pod`.
pub(crate) fn kind_message(api_version: &str, kind: &str) -> Option<&'static Message> {
    kind_index(api_version, kind).map(|i| &schema::MESSAGES[i])
}

/// The message at an index of the table, as a [`Ty::Msg`] names it.
pub(crate) fn message_at(index: usize) -> &'static Message {
    &schema::MESSAGES[index]
}

/// The message with a proto name, e.g. `k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta`.
pub(crate) fn message_named(name: &str) -> Option<&'static Message> {
    let i = schema::MESSAGES.binary_search_by(|m| m.name.cmp(name)).ok()?;
    Some(&schema::MESSAGES[i])
}

fn kind_index(api_version: &str, kind: &str) -> Option<usize> {
    schema::KINDS
        .binary_search_by(|(v, k, _)| (*v, *k).cmp(&(api_version, kind)))
        .ok()
        .map(|i| schema::KINDS[i].2)
}

/// Why decoding failed.
#[derive(Debug)]
enum Failure {
    /// The body is malformed (400), at a field path.
    Malformed { path: Vec<String>, message: String },
    /// The body is well-formed but asks for something not supported (415).
    Unsupported(String),
}

impl Failure {
    fn malformed(message: impl Into<String>) -> Failure {
        Failure::Malformed { path: Vec::new(), message: message.into() }
    }

    /// The same failure, inside `segment`.
    fn at(mut self, segment: impl FnOnce() -> String) -> Failure {
        if let Failure::Malformed { path, .. } = &mut self {
            path.push(segment());
        }
        self
    }

    fn into_api_error(self) -> ApiError {
        match self {
            Failure::Unsupported(message) => ApiError::unsupported(message),
            Failure::Malformed { path, message } if path.is_empty() => {
                ApiError::bad_request(format!("malformed protobuf body: {message}"))
            }
            Failure::Malformed { mut path, message } => {
                path.reverse();
                let mut at = String::new();
                for segment in path {
                    if !at.is_empty() && !segment.starts_with('[') {
                        at.push('.');
                    }
                    at.push_str(&segment);
                }
                ApiError::bad_request(format!("malformed protobuf body at {at}: {message}"))
            }
        }
    }
}

type Result<T, E = Failure> = std::result::Result<T, E>;

/// Decode a `runtime.Unknown` (after the magic): `typeMeta` (1: `apiVersion` 1, `kind` 2), `raw`
/// (2), `contentEncoding` (3), `contentType` (4).
fn decode_unknown(envelope: &[u8], depth: usize) -> Result<Value> {
    let (mut api_version, mut kind) = (String::new(), String::new());
    let mut raw = None;
    let (mut content_encoding, mut content_type) = (String::new(), String::new());
    let mut reader = Reader::new(envelope);
    while let Some((tag, wire)) = reader.field()? {
        match tag {
            1 => {
                let mut type_meta = Reader::new(expect_len(wire, "typeMeta")?);
                while let Some((tag, wire)) = type_meta.field()? {
                    match tag {
                        1 => api_version = expect_string(wire, "typeMeta.apiVersion")?,
                        2 => kind = expect_string(wire, "typeMeta.kind")?,
                        _ => {}
                    }
                }
            }
            2 => raw = Some(expect_len(wire, "raw")?),
            3 => content_encoding = expect_string(wire, "contentEncoding")?,
            4 => content_type = expect_string(wire, "contentType")?,
            _ => {}
        }
    }
    let raw = raw.ok_or_else(|| Failure::malformed("the envelope holds no object (no raw)"))?;
    if kind.is_empty() {
        return Err(Failure::malformed("the envelope names no kind"));
    }
    if !content_encoding.is_empty() {
        return Err(Failure::Unsupported(format!(
            "protobuf bodies with contentEncoding {content_encoding:?} are not supported"
        )));
    }
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let object = match media.as_str() {
        "" | MEDIA_TYPE => {
            let Some(index) = kind_index(&api_version, &kind) else {
                return Err(Failure::Unsupported(format!(
                    "{kind} ({api_version:?}) cannot be sent as protobuf to this server; \
                     send it as application/json"
                )));
            };
            decode_message(raw, index, depth + 1)?
        }
        "application/json" => serde_json::from_slice(raw)
            .map_err(|e| Failure::malformed(format!("raw is not valid JSON: {e}")))?,
        _ => {
            return Err(Failure::Unsupported(format!(
                "protobuf envelopes with contentType {content_type:?} are not supported"
            )))
        }
    };
    let Value::Object(fields) = object else {
        return Err(Failure::malformed(format!("{kind} is not an object")));
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), api_version.into());
    out.insert("kind".into(), kind.into());
    out.extend(fields);
    Ok(Value::Object(out))
}

/// What has been read for one field of a message.
enum Slot<'a> {
    Empty,
    Value(Value),
    /// A singular message: every occurrence, merged by decoding them as one.
    Chunks(Vec<&'a [u8]>),
    List(Vec<Value>),
    Map(Map<String, Value>),
}

/// Decode one message of the schema.
fn decode_message(bytes: &[u8], index: usize, depth: usize) -> Result<Value> {
    if depth > MAX_DEPTH {
        return Err(Failure::malformed(format!("messages nest deeper than {MAX_DEPTH}")));
    }
    let message = schema::MESSAGES
        .get(index)
        .ok_or_else(|| Failure::malformed(format!("schema has no message {index}")))?;
    let mut slots: Vec<Slot<'_>> = message.fields.iter().map(|_| Slot::Empty).collect();
    let mut reader = Reader::new(bytes);
    while let Some((tag, wire)) = reader.field()? {
        let Some(i) = message.fields.iter().position(|f| f.tag == tag) else {
            continue; // An unknown field: skipped.
        };
        let field = &message.fields[i];
        read_field(field, wire, &mut slots[i], depth).map_err(|e| e.at(|| field.json.into()))?;
    }

    let mut out = Map::new();
    for (field, slot) in message.fields.iter().zip(slots) {
        let value = match slot {
            Slot::Empty => continue,
            Slot::Value(Value::String(s)) if s.is_empty() && field.card == Card::OmitEmpty => {
                continue
            }
            Slot::Value(v) => v,
            Slot::Chunks(chunks) => {
                let Ty::Msg(target) = field.ty else { continue };
                let merged;
                let bytes = match chunks.as_slice() {
                    [one] => *one,
                    many => {
                        merged = many.concat();
                        &merged
                    }
                };
                let value = decode_message(bytes, target, depth + 1)
                    .map_err(|e| e.at(|| field.json.into()))?;
                match (field.card, value) {
                    (Card::Inline, Value::Object(fields)) => {
                        out.extend(fields);
                        continue;
                    }
                    (_, value) => value,
                }
            }
            Slot::List(items) => Value::Array(items),
            Slot::Map(entries) => Value::Object(entries),
        };
        out.insert(field.json.into(), value);
    }
    shape(message, out, depth)
}

/// Read one occurrence of a field into its slot.
fn read_field<'a>(field: &Field, wire: Wire<'a>, slot: &mut Slot<'a>, depth: usize) -> Result<()> {
    match field.card {
        Card::Optional | Card::OmitEmpty | Card::Inline => match field.ty {
            Ty::Msg(_) => {
                let bytes = expect_len(wire, "a message")?;
                match slot {
                    Slot::Chunks(chunks) => chunks.push(bytes),
                    _ => *slot = Slot::Chunks(vec![bytes]),
                }
            }
            ty => *slot = Slot::Value(scalar(ty, wire)?),
        },
        Card::Repeated => {
            if !matches!(slot, Slot::List(_)) {
                *slot = Slot::List(Vec::new());
            }
            let Slot::List(items) = slot else { return Ok(()) };
            let n = items.len();
            match (field.ty, wire) {
                (Ty::Msg(target), wire) => {
                    let bytes = expect_len(wire, "a message")?;
                    items.push(
                        decode_message(bytes, target, depth + 1)
                            .map_err(|e| e.at(|| format!("[{n}]")))?,
                    );
                }
                // A packed list of numbers or bools.
                (
                    ty @ (Ty::Bool | Ty::Int32 | Ty::Int64 | Ty::Double | Ty::Float),
                    Wire::Len(bytes),
                ) => {
                    let mut packed = Reader::new(bytes);
                    while !packed.is_empty() {
                        let wire = match ty {
                            Ty::Double => Wire::Fixed64(packed.fixed64()?),
                            Ty::Float => Wire::Fixed32(packed.fixed32()?),
                            _ => Wire::Varint(packed.varint()?),
                        };
                        items.push(scalar(ty, wire)?);
                    }
                }
                (ty, wire) => items.push(scalar(ty, wire).map_err(|e| e.at(|| format!("[{n}]")))?),
            }
        }
        Card::Map(key_ty) => {
            let entry = expect_len(wire, "a map entry")?;
            let (mut key, mut value) = (None, None);
            let mut reader = Reader::new(entry);
            while let Some((tag, wire)) = reader.field()? {
                match tag {
                    1 => key = Some(scalar(key_ty, wire)?),
                    2 => value = Some(wire),
                    _ => {}
                }
            }
            let key = match key {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => String::new(),
            };
            let value = match (field.ty, value) {
                (Ty::Msg(target), value) => {
                    let bytes = match value {
                        Some(wire) => expect_len(wire, "a message")?,
                        None => &[],
                    };
                    decode_message(bytes, target, depth + 1)
                }
                (ty, Some(wire)) => scalar(ty, wire),
                (ty, None) => Ok(zero(ty)),
            }
            .map_err(|e| e.at(|| format!("[{key:?}]")))?;
            if !matches!(slot, Slot::Map(_)) {
                *slot = Slot::Map(Map::new());
            }
            let Slot::Map(entries) = slot else { return Ok(()) };
            entries.insert(key, value);
        }
    }
    Ok(())
}

/// A scalar from its wire value.
fn scalar(ty: Ty, wire: Wire<'_>) -> Result<Value> {
    Ok(match (ty, wire) {
        (Ty::String, Wire::Len(bytes)) => Value::String(utf8(bytes)?),
        (Ty::Bytes, Wire::Len(bytes)) => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
        }
        (Ty::Bool, Wire::Varint(v)) => Value::Bool(v != 0),
        // Go truncates: an int32 is sent as its sign-extended 64 bits.
        (Ty::Int32, Wire::Varint(v)) => Value::from(v as i64 as i32),
        (Ty::Int64, Wire::Varint(v)) => Value::from(v as i64),
        (Ty::Double, Wire::Fixed64(v)) => number(f64::from_bits(v))?,
        (Ty::Float, Wire::Fixed32(v)) => number(f64::from(f32::from_bits(v)))?,
        (ty, wire) => {
            return Err(Failure::malformed(format!(
                "wire type {} where {ty:?} expects {}",
                wire.wire_type(),
                expected_wire_type(ty)
            )))
        }
    })
}

/// The value of a map entry that has none.
fn zero(ty: Ty) -> Value {
    match ty {
        Ty::String | Ty::Bytes => Value::String(String::new()),
        Ty::Bool => Value::Bool(false),
        _ => Value::from(0),
    }
}

fn expected_wire_type(ty: Ty) -> u8 {
    match ty {
        Ty::Bool | Ty::Int32 | Ty::Int64 => 0,
        Ty::Double => 1,
        Ty::Float => 5,
        Ty::String | Ty::Bytes | Ty::Msg(_) => 2,
    }
}

fn number(f: f64) -> Result<Value> {
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| Failure::malformed(format!("{f} is not a finite number")))
}

fn utf8(bytes: &[u8]) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Failure::malformed("a string is not UTF-8"))
}

fn expect_len<'a>(wire: Wire<'a>, what: &str) -> Result<&'a [u8]> {
    match wire {
        Wire::Len(bytes) => Ok(bytes),
        other => Err(Failure::malformed(format!(
            "wire type {} where {what} expects 2 (length-delimited)",
            other.wire_type()
        ))),
    }
}

fn expect_string(wire: Wire<'_>, what: &str) -> Result<String> {
    utf8(expect_len(wire, what)?).map_err(|e| e.at(|| what.into()))
}

/// A decoded message in its JSON shape.
fn shape(message: &Message, mut fields: Map<String, Value>, depth: usize) -> Result<Value> {
    let int = |fields: &Map<String, Value>, name: &str| {
        fields.get(name).and_then(Value::as_i64).unwrap_or_default()
    };
    Ok(match message.shape {
        Shape::Object => Value::Object(fields),
        Shape::List => fields.remove("items").unwrap_or_else(|| Value::Array(Vec::new())),
        Shape::Time | Shape::MicroTime => {
            if fields.is_empty() {
                return Ok(Value::Null);
            }
            let (seconds, nanos) = (int(&fields, "seconds"), int(&fields, "nanos"));
            time(seconds, nanos, message.shape == Shape::MicroTime)?
        }
        Shape::Duration => Value::String(go_duration(int(&fields, "duration"))),
        Shape::IntOrString => {
            if int(&fields, "type") == 1 {
                fields.remove("strVal").unwrap_or_else(|| Value::String(String::new()))
            } else {
                Value::from(int(&fields, "intVal"))
            }
        }
        Shape::Quantity => match fields.remove("string") {
            Some(Value::String(s)) if !s.is_empty() => Value::String(s),
            _ => return Err(Failure::malformed("a quantity is empty")),
        },
        Shape::EmbeddedJson => {
            let raw = match fields.remove("raw") {
                Some(Value::String(b64)) => base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| Failure::malformed(format!("raw: {e}")))?,
                _ => Vec::new(),
            };
            if raw.is_empty() {
                Value::Null
            } else if let Some(envelope) = raw.strip_prefix(MAGIC) {
                decode_unknown(envelope, depth + 1)?
            } else {
                serde_json::from_slice(&raw).map_err(|e| {
                    Failure::malformed(format!("embedded object is not valid JSON: {e}"))
                })?
            }
        }
    })
}

/// A `Time` or `MicroTime` as Kubernetes writes it in JSON; Go's zero time is `null`.
fn time(seconds: i64, nanos: i64, micro: bool) -> Result<Value> {
    if seconds == GO_ZERO_TIME && nanos == 0 {
        return Ok(Value::Null);
    }
    let out_of_range = || Failure::malformed(format!("time {seconds}s {nanos}ns is out of range"));
    // Time keeps whole seconds only, as Kubernetes' own decoder does.
    let nanos = if micro { u32::try_from(nanos).map_err(|_| out_of_range())? } else { 0 };
    let at = chrono::DateTime::from_timestamp(seconds, nanos)
        .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)))
        .ok_or_else(out_of_range)?;
    let format = if micro { "%Y-%m-%dT%H:%M:%S%.6fZ" } else { "%Y-%m-%dT%H:%M:%SZ" };
    Ok(Value::String(at.format(format).to_string()))
}

/// One field's value on the wire.
#[derive(Clone, Copy, Debug)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Len(&'a [u8]),
    Fixed32(u32),
    /// A (deprecated) group, skipped.
    Group,
}

impl Wire<'_> {
    fn wire_type(&self) -> u8 {
        match self {
            Wire::Varint(_) => 0,
            Wire::Fixed64(_) => 1,
            Wire::Len(_) => 2,
            Wire::Group => 3,
            Wire::Fixed32(_) => 5,
        }
    }
}

/// Reads the protobuf wire format.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn varint(&mut self) -> Result<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some((&byte, rest)) = self.buf.split_first() else {
                return Err(Failure::malformed("a varint is cut off by the end of the body"));
            };
            self.buf = rest;
            if i == 9 && byte > 1 {
                return Err(Failure::malformed("a varint overflows 64 bits"));
            }
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                return Ok(value);
            }
        }
        Err(Failure::malformed("a varint is longer than 10 bytes"))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let left = self.buf.len();
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let (taken, rest) = self.buf.split_at(n);
                self.buf = rest;
                Ok(taken)
            }
            _ => Err(Failure::malformed(format!(
                "a field of {n} bytes runs past the end of the body ({left} bytes left)"
            ))),
        }
    }

    fn fixed64(&mut self) -> Result<u64> {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn fixed32(&mut self) -> Result<u32> {
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(bytes))
    }

    /// A field's key: its number and wire type.
    fn key(&mut self) -> Result<(u32, u8)> {
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 || number > (1 << 29) - 1 {
            return Err(Failure::malformed(format!("invalid field number {number}")));
        }
        Ok((number as u32, (key & 7) as u8))
    }

    /// The next field, or `None` at the end.
    fn field(&mut self) -> Result<Option<(u32, Wire<'a>)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let (number, wire_type) = self.key()?;
        let wire = match wire_type {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(self.fixed64()?),
            2 => {
                let n = self.varint()?;
                Wire::Len(self.take(n)?)
            }
            3 => {
                self.skip_group(number)?;
                Wire::Group
            }
            5 => Wire::Fixed32(self.fixed32()?),
            4 => {
                return Err(Failure::malformed(format!("field {number} ends a group never begun")))
            }
            other => return Err(Failure::malformed(format!("invalid wire type {other}"))),
        };
        Ok(Some((number, wire)))
    }

    /// Skip a group begun by field `number`, nested groups included.
    fn skip_group(&mut self, number: u32) -> Result<()> {
        let mut open = vec![number];
        while let Some(&innermost) = open.last() {
            if self.buf.is_empty() {
                return Err(Failure::malformed(format!("group {innermost} is never ended")));
            }
            let (number, wire_type) = self.key()?;
            match wire_type {
                0 => {
                    self.varint()?;
                }
                1 => {
                    self.take(8)?;
                }
                2 => {
                    let n = self.varint()?;
                    self.take(n)?;
                }
                3 if open.len() < MAX_DEPTH => open.push(number),
                3 => return Err(Failure::malformed("groups nest too deeply")),
                4 if number == innermost => {
                    open.pop();
                }
                4 => return Err(Failure::malformed(format!("group {innermost} ends as {number}"))),
                5 => {
                    self.take(4)?;
                }
                other => return Err(Failure::malformed(format!("invalid wire type {other}"))),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
