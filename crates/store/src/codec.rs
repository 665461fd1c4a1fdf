//! The on-disk layout: one sled tree holds objects, the event log and metadata under distinct
//! one-byte prefixes, so that one atomic batch can write all three.
//!
//! ```text
//! o<key>            -> [1][create_revision u64][mod_revision u64][value]
//! l<revision u64>   -> [2][kind u8][unix millis u64][create_revision u64][prev_mod_revision u64]
//!                      [key len u32][key][prev len u32 | u32::MAX][prev][value]
//! m<name>           -> metadata: format, revision, compacted, usage
//! musage            -> [revision u64][objects u64][bytes u64]: the usage as of that revision
//! ```
//!
//! Integers are big-endian, so log keys sort by revision. A log record carries the revision the
//! key had before the write (`prev_mod_revision`, 0 for a creation), so that a list at a past
//! revision can rebuild every object from the current state and the newer history alone, even when
//! the write that made the older state has been compacted. Layout 1 wrote log records of version 1,
//! without it; they are still read (see [`LogView::prev_mod_revision`]), and a layout 1 database
//! is upgraded in place when opened (only the layout number changes).

use bytes::Bytes;

use crate::{Event, EventKind, Object, Revision, Usage};

pub(crate) const OBJECT_PREFIX: u8 = b'o';
pub(crate) const LOG_PREFIX: u8 = b'l';
pub(crate) const META_FORMAT: &[u8] = b"mformat";
pub(crate) const META_REVISION: &[u8] = b"mrevision";
pub(crate) const META_COMPACTED: &[u8] = b"mcompacted";
pub(crate) const META_USAGE: &[u8] = b"musage";

/// The layout version written in `META_FORMAT`.
pub(crate) const FORMAT: u64 = 2;
/// The layout before log records carried the previous mod revision; still readable.
pub(crate) const FORMAT_WITHOUT_PREV_REVISION: u64 = 1;
const OBJECT_VERSION: u8 = 1;
/// Log records as written now.
const LOG_VERSION: u8 = 2;
/// Log records written by layout 1: no previous mod revision.
const LOG_VERSION_WITHOUT_PREV_REVISION: u8 = 1;
const NO_PREV: u32 = u32::MAX;

/// Why a stored record could not be read.
#[derive(Debug, thiserror::Error)]
#[error("malformed {what} record: {why}")]
pub(crate) struct DecodeError {
    what: &'static str,
    why: &'static str,
}

pub(crate) fn object_key(key: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(OBJECT_PREFIX);
    k.extend_from_slice(key.as_bytes());
    k
}

pub(crate) fn log_key(revision: Revision) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = LOG_PREFIX;
    k[1..].copy_from_slice(&revision.to_be_bytes());
    k
}

pub(crate) fn revision_of_log_key(key: &[u8]) -> Result<Revision, DecodeError> {
    let bytes: [u8; 8] = key
        .get(1..9)
        .and_then(|b| b.try_into().ok())
        .filter(|_| key.len() == 9 && key[0] == LOG_PREFIX)
        .ok_or(DecodeError { what: "log key", why: "not 9 bytes" })?;
    Ok(Revision::from_be_bytes(bytes))
}

pub(crate) fn encode_u64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

pub(crate) fn decode_u64(bytes: &[u8]) -> Result<u64, DecodeError> {
    let b: [u8; 8] =
        bytes.try_into().map_err(|_| DecodeError { what: "metadata", why: "not 8 bytes" })?;
    Ok(u64::from_be_bytes(b))
}

/// The store key of an object record's sled key.
pub(crate) fn key_of_object_key(key: &[u8]) -> Result<&str, DecodeError> {
    let bad = |why| DecodeError { what: "object key", why };
    let rest = key.strip_prefix(&[OBJECT_PREFIX]).ok_or(bad("not an object key"))?;
    std::str::from_utf8(rest).map_err(|_| bad("not UTF-8"))
}

pub(crate) fn encode_usage(revision: Revision, usage: Usage) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..8].copy_from_slice(&revision.to_be_bytes());
    out[8..16].copy_from_slice(&usage.objects.to_be_bytes());
    out[16..].copy_from_slice(&usage.bytes.to_be_bytes());
    out
}

/// The usage record: the revision it is as of, and the usage.
pub(crate) fn decode_usage(bytes: &[u8]) -> Result<(Revision, Usage), DecodeError> {
    if bytes.len() != 24 {
        return Err(DecodeError { what: "usage", why: "not 24 bytes" });
    }
    let word = |i: usize| decode_u64(&bytes[i * 8..(i + 1) * 8]);
    Ok((word(0)?, Usage { objects: word(1)?, bytes: word(2)? }))
}

pub(crate) fn encode_object(value: &[u8], create: Revision, modified: Revision) -> Vec<u8> {
    let mut out = Vec::with_capacity(17 + value.len());
    out.push(OBJECT_VERSION);
    out.extend_from_slice(&create.to_be_bytes());
    out.extend_from_slice(&modified.to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// An object record's revisions, and where its value starts.
pub(crate) struct ObjectHeader {
    pub create_revision: Revision,
    pub mod_revision: Revision,
}

const OBJECT_HEADER_LEN: usize = 17;

pub(crate) fn decode_object_header(record: &[u8]) -> Result<ObjectHeader, DecodeError> {
    let bad = |why| DecodeError { what: "object", why };
    if record.len() < OBJECT_HEADER_LEN {
        return Err(bad("shorter than its header"));
    }
    if record[0] != OBJECT_VERSION {
        return Err(bad("unknown record version"));
    }
    Ok(ObjectHeader {
        create_revision: u64::from_be_bytes(record[1..9].try_into().expect("8 bytes")),
        mod_revision: u64::from_be_bytes(record[9..17].try_into().expect("8 bytes")),
    })
}

/// Decode an object record without copying its value: the returned value shares `record`.
pub(crate) fn decode_object(key: String, record: sled::IVec) -> Result<Object, DecodeError> {
    let header = decode_object_header(&record)?;
    Ok(Object {
        key,
        value: Bytes::from_owner(record).slice(OBJECT_HEADER_LEN..),
        create_revision: header.create_revision,
        mod_revision: header.mod_revision,
    })
}

fn kind_byte(kind: EventKind) -> u8 {
    match kind {
        EventKind::Created => 1,
        EventKind::Modified => 2,
        EventKind::Deleted => 3,
    }
}

/// The log record of `event`; `prev_mod_revision` is the key's mod revision before the write (0
/// for a creation).
pub(crate) fn encode_event(
    event: &Event,
    prev_mod_revision: Revision,
    unix_millis: u64,
) -> Vec<u8> {
    let prev_len = event.prev_value.as_ref().map_or(0, |p| p.len());
    let mut out = Vec::with_capacity(42 + event.key.len() + prev_len + event.value.len());
    out.push(LOG_VERSION);
    out.push(kind_byte(event.kind));
    out.extend_from_slice(&unix_millis.to_be_bytes());
    out.extend_from_slice(&event.create_revision.to_be_bytes());
    out.extend_from_slice(&prev_mod_revision.to_be_bytes());
    out.extend_from_slice(&len_u32(event.key.len()).to_be_bytes());
    out.extend_from_slice(event.key.as_bytes());
    match &event.prev_value {
        Some(prev) => {
            out.extend_from_slice(&len_u32(prev.len()).to_be_bytes());
            out.extend_from_slice(prev);
        }
        None => out.extend_from_slice(&NO_PREV.to_be_bytes()),
    }
    out.extend_from_slice(&event.value);
    out
}

fn len_u32(len: usize) -> u32 {
    // Values are bounded far below 4 GiB by `Options::max_value_bytes`.
    u32::try_from(len).expect("record field under 4 GiB")
}

/// A decoded log record.
pub(crate) struct LogRecord {
    pub event: Event,
    pub unix_millis: u64,
}

/// A log record read in place: the fixed fields and the key, with the values left unread, so that
/// a scan of the history can skip the records of other keys without copying their values.
pub(crate) struct LogView<'a> {
    pub kind: EventKind,
    pub unix_millis: u64,
    pub create_revision: Revision,
    /// The key's mod revision before the write (0 for a creation); `None` in a record of layout
    /// 1, which did not keep it.
    pub prev_mod_revision: Option<Revision>,
    pub key: &'a str,
    prev_value: Option<&'a [u8]>,
    value: &'a [u8],
}

impl LogView<'_> {
    /// The value before the write, for a modification.
    pub(crate) fn prev_value(&self) -> Option<Bytes> {
        self.prev_value.map(Bytes::copy_from_slice)
    }

    /// The value after the write; for a deletion, the last value.
    pub(crate) fn value(&self) -> Bytes {
        Bytes::copy_from_slice(self.value)
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError { what: "log", why: "truncated" });
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

/// Read a log record in place.
pub(crate) fn view_event(record: &[u8]) -> Result<LogView<'_>, DecodeError> {
    let bad = |why| DecodeError { what: "log", why };
    let mut r = Reader { buf: record };
    let version = r.u8()?;
    if version != LOG_VERSION && version != LOG_VERSION_WITHOUT_PREV_REVISION {
        return Err(bad("unknown record version"));
    }
    let kind = match r.u8()? {
        1 => EventKind::Created,
        2 => EventKind::Modified,
        3 => EventKind::Deleted,
        _ => return Err(bad("unknown event kind")),
    };
    let unix_millis = r.u64()?;
    let create_revision = r.u64()?;
    let prev_mod_revision = match version {
        LOG_VERSION => Some(r.u64()?),
        _ => None,
    };
    let key_len = r.u32()? as usize;
    let key = std::str::from_utf8(r.take(key_len)?).map_err(|_| bad("key is not UTF-8"))?;
    let prev_value = match r.u32()? {
        NO_PREV => None,
        n => Some(r.take(n as usize)?),
    };
    Ok(LogView {
        kind,
        unix_millis,
        create_revision,
        prev_mod_revision,
        key,
        prev_value,
        value: r.buf,
    })
}

pub(crate) fn decode_event(revision: Revision, record: &[u8]) -> Result<LogRecord, DecodeError> {
    let view = view_event(record)?;
    Ok(LogRecord {
        event: Event {
            kind: view.kind,
            revision,
            key: view.key.to_owned(),
            value: view.value(),
            prev_value: view.prev_value(),
            create_revision: view.create_revision,
        },
        unix_millis: view.unix_millis,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip() {
        for prev in [None, Some(Bytes::from_static(b"")), Some(Bytes::from_static(b"old"))] {
            let event = Event {
                kind: EventKind::Modified,
                revision: 42,
                key: "/core/pods/ns/näme".into(),
                value: Bytes::from_static(b"{\"a\":1}"),
                prev_value: prev,
                create_revision: 7,
            };
            let encoded = encode_event(&event, 41, 1234);
            let record = decode_event(42, &encoded).unwrap();
            assert_eq!(record.event, event);
            assert_eq!(record.unix_millis, 1234);
            assert_eq!(view_event(&encoded).unwrap().prev_mod_revision, Some(41));
        }
    }

    /// A log record as layout 1 wrote it: no previous mod revision.
    fn encode_event_v1(event: &Event, unix_millis: u64) -> Vec<u8> {
        let mut out = vec![LOG_VERSION_WITHOUT_PREV_REVISION, kind_byte(event.kind)];
        out.extend_from_slice(&unix_millis.to_be_bytes());
        out.extend_from_slice(&event.create_revision.to_be_bytes());
        out.extend_from_slice(&len_u32(event.key.len()).to_be_bytes());
        out.extend_from_slice(event.key.as_bytes());
        match &event.prev_value {
            Some(prev) => {
                out.extend_from_slice(&len_u32(prev.len()).to_be_bytes());
                out.extend_from_slice(prev);
            }
            None => out.extend_from_slice(&NO_PREV.to_be_bytes()),
        }
        out.extend_from_slice(&event.value);
        out
    }

    #[test]
    fn layout_1_log_records_are_still_read() {
        let event = Event {
            kind: EventKind::Modified,
            revision: 9,
            key: "/k".into(),
            value: Bytes::from_static(b"new"),
            prev_value: Some(Bytes::from_static(b"old")),
            create_revision: 3,
        };
        let encoded = encode_event_v1(&event, 77);
        let record = decode_event(9, &encoded).unwrap();
        assert_eq!(record.event, event);
        assert_eq!(record.unix_millis, 77);
        assert_eq!(view_event(&encoded).unwrap().prev_mod_revision, None, "layout 1 had none");
        let mut unknown = encode_event(&event, 5, 77);
        unknown[0] = 3;
        assert!(decode_event(9, &unknown).is_err());
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let event = Event {
            kind: EventKind::Deleted,
            revision: 1,
            key: "k".into(),
            value: Bytes::from_static(b"v"),
            prev_value: None,
            create_revision: 1,
        };
        let record = encode_event(&event, 0, 0);
        // Every strict prefix that cuts into the fixed fields must fail cleanly.
        for len in 0..(record.len() - 1) {
            assert!(decode_event(1, &record[..len]).is_err(), "prefix of {len} bytes decoded");
        }
        let object = encode_object(b"v", 1, 2);
        for len in 0..OBJECT_HEADER_LEN {
            assert!(decode_object("k".into(), object[..len].into()).is_err());
        }
    }

    #[test]
    fn log_keys_sort_by_revision() {
        let mut keys: Vec<_> = [300u64, 2, 1 << 40, 255, 256].iter().map(|r| log_key(*r)).collect();
        keys.sort();
        let revs: Vec<_> = keys.iter().map(|k| revision_of_log_key(k).unwrap()).collect();
        assert_eq!(revs, vec![2, 255, 256, 300, 1 << 40]);
    }
}
