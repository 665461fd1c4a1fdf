//! The write-ahead log: what makes a write durable without flushing sled.
//!
//! Each acknowledged write is appended here as one record — its revision and its event, exactly as
//! the history log stores it — and the file is `fdatasync`ed before the writers it covers are
//! woken: one device round trip per group commit. sled itself is flushed (and synced) only at
//! checkpoints, after which the log is emptied. On open, records newer than what sled recovered
//! are applied to sled again.
//!
//! ```text
//! record: [payload length u32 LE][crc32 of payload u32 LE][revision u64 BE][event record]
//! batch:  [payload length u32 LE][crc32 of payload u32 LE][first revision u64 BE][0xff]
//!         [count u32 BE] count × ([event record length u32 BE][event record])
//! ```
//!
//! A batch record holds the events of one [`crate::Store::create_all`], at consecutive revisions
//! from the first: one checksum covers them all, so recovery finds all of them or none. (An event
//! record starts with its version, 1 or 2, never with the batch tag.)
//!
//! A torn or corrupt tail (a crash mid-append) ends the log: everything before it is kept and the
//! rest is ignored, because nothing after the first bad record was ever acknowledged. So does a
//! record whose revision does not follow its predecessor's: a leftover of the log before the last
//! checkpoint.
//!
//! The file is allocated ahead, zero-filled, in chunks, and records are written into it in place:
//! then an `fdatasync` has only data to flush and no file size to commit, which makes it markedly
//! cheaper than on a growing file. Emptying the log after a checkpoint zeroes its first header.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::faults::{self, FaultPoint};
use crate::io::Failure;
use crate::{Result, Revision};

/// The log's file name inside the store directory.
pub(crate) const WAL_FILE: &str = "carrel.wal";
const HEADER: usize = 8;
/// The byte after the revision that marks a batch record.
const BATCH: u8 = 0xff;
/// How much zero-filled space the log allocates at a time.
const CHUNK: u64 = 1024 * 1024;

/// The write-ahead log of one store.
#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    /// The store directory (which names the store to injected faults).
    dir: PathBuf,
    /// Where the next record goes: the end of the valid records.
    position: u64,
    /// The file's allocated, zero-filled size.
    allocated: u64,
}

/// One record read back.
pub(crate) struct WalRecord {
    pub revision: Revision,
    pub event: Vec<u8>,
}

/// Append one record for `revision` to `out`.
pub(crate) fn encode(revision: Revision, event: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(8 + event.len()).expect("records are bounded by max_value_bytes");
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&revision.to_be_bytes());
    hasher.update(event);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&hasher.finalize().to_le_bytes());
    out.extend_from_slice(&revision.to_be_bytes());
    out.extend_from_slice(event);
}

/// Append one batch record holding `events`, the event records of revisions `first`,
/// `first + 1`, and so on. `None` (and nothing appended) if they do not fit in one record.
pub(crate) fn encode_batch(first: Revision, events: &[Vec<u8>], out: &mut Vec<u8>) -> Option<()> {
    let body: usize = events.iter().map(|e| 4 + e.len()).sum();
    let len = u32::try_from(8 + 1 + 4 + body).ok()?;
    let count = u32::try_from(events.len()).ok()?;
    let start = out.len();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&first.to_be_bytes());
    out.push(BATCH);
    out.extend_from_slice(&count.to_be_bytes());
    for event in events {
        debug_assert_ne!(event.first(), Some(&BATCH), "an event record never starts with the tag");
        let event_len = u32::try_from(event.len()).ok()?;
        out.extend_from_slice(&event_len.to_be_bytes());
        out.extend_from_slice(event);
    }
    let crc = crc32fast::hash(&out[start + HEADER..]);
    out[start + 4..start + HEADER].copy_from_slice(&crc.to_le_bytes());
    Some(())
}

/// The events of a batch record's body (after the tag), each with its revision from `first`;
/// `None` if the body is malformed.
fn decode_batch(first: Revision, body: &[u8]) -> Option<Vec<WalRecord>> {
    let word = |at: usize| -> Option<u32> {
        Some(u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?))
    };
    let count = word(0)? as usize;
    let mut records = Vec::with_capacity(count.min(body.len() / 4));
    let mut at = 4;
    for i in 0..count {
        let len = word(at)? as usize;
        let event = body.get(at + 4..(at + 4).checked_add(len)?)?;
        records.push(WalRecord { revision: first.checked_add(i as u64)?, event: event.to_vec() });
        at += 4 + len;
    }
    (at == body.len() && count > 0).then_some(records)
}

/// Split `bytes` into its valid records (a batch record into the records of its events); the
/// second value is how many bytes they take.
fn decode(bytes: &[u8]) -> (Vec<WalRecord>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while bytes.len() - at >= HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let start = at + HEADER;
        if len < 8 || bytes.len() - start < len {
            break;
        }
        let payload = &bytes[start..start + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        let revision = Revision::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
        if records.last().is_some_and(|r: &WalRecord| r.revision + 1 != revision) {
            break;
        }
        match payload.get(8) {
            Some(&BATCH) => match decode_batch(revision, &payload[9..]) {
                Some(batch) => records.extend(batch),
                None => break,
            },
            _ => records.push(WalRecord { revision, event: payload[8..].to_vec() }),
        }
        at = start + len;
    }
    (records, at)
}

impl Wal {
    /// Open (or create) the log in `dir` and read back its valid records.
    pub(crate) fn open(dir: &Path) -> Result<(Wal, Vec<WalRecord>)> {
        let path = dir.join(WAL_FILE);
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let (records, valid) = decode(&bytes);
        let mut wal = Wal {
            file,
            path,
            dir: dir.to_path_buf(),
            position: valid as u64,
            allocated: bytes.len() as u64,
        };
        if wal.allocated < CHUNK {
            wal.allocate(CHUNK).map_err(|f| f.error)?;
        }
        Ok((wal, records))
    }

    /// Write all of `bytes` at `offset`. A failure says whether any of them reached the file
    /// first: after a partial write what the file holds there is no longer known.
    fn write_at(
        &self,
        point: FaultPoint,
        bytes: &[u8],
        offset: u64,
    ) -> Result<(), (io::Error, bool)> {
        if let Err((landed, e)) = faults::hit_write(&self.dir, point, bytes.len()) {
            if landed > 0 {
                self.file.write_all_at(&bytes[..landed], offset).map_err(|e| (e, true))?;
            }
            return Err((e, landed > 0));
        }
        let mut done = 0;
        while done < bytes.len() {
            match self.file.write_at(&bytes[done..], offset + done as u64) {
                Ok(0) => return Err((io::ErrorKind::WriteZero.into(), done > 0)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err((e, done > 0)),
            }
        }
        Ok(())
    }

    /// `fdatasync` (or, with `all`, `fsync`) the log; a failure leaves its contents uncertain.
    fn sync(&self, point: FaultPoint, all: bool) -> Result<(), Failure> {
        faults::hit(&self.dir, point)
            .and_then(|()| if all { self.file.sync_all() } else { self.file.sync_data() })
            .map_err(Failure::sync)
    }

    /// Zero-fill the file up to `size` and make that durable. A failed zero-fill is passing even
    /// when part of it landed: it lies beyond the records and `allocated` is not advanced, so a
    /// retry writes it again.
    fn allocate(&mut self, size: u64) -> Result<(), Failure> {
        let zeros = vec![0u8; 64 * 1024];
        let mut at = self.allocated;
        while at < size {
            let n = (size - at).min(zeros.len() as u64) as usize;
            self.write_at(FaultPoint::WalGrow, &zeros[..n], at)
                .map_err(|(e, _)| Failure::write(e, false))?;
            at += n as u64;
        }
        self.sync(FaultPoint::WalSync, true)?;
        self.allocated = size;
        Ok(())
    }

    /// Append encoded records and make them durable.
    pub(crate) fn append(&mut self, records: &[u8]) -> Result<(), Failure> {
        let end = self.position + records.len() as u64;
        if end > self.allocated {
            self.allocate(end.div_ceil(CHUNK) * CHUNK)?;
        }
        self.write_at(FaultPoint::WalWrite, records, self.position)
            .map_err(|(e, landed)| Failure::write(e, landed))?;
        self.sync(FaultPoint::WalSync, false)?;
        self.position = end;
        Ok(())
    }

    /// How many bytes of records the log holds.
    pub(crate) fn len(&self) -> u64 {
        self.position
    }

    /// Empty the log, once everything in it is durable elsewhere.
    pub(crate) fn reset(&mut self) -> Result<(), Failure> {
        if self.position == 0 {
            return Ok(());
        }
        self.write_at(FaultPoint::WalResetWrite, &[0u8; HEADER], 0)
            .map_err(|(e, landed)| Failure::write(e, landed))?;
        self.sync(FaultPoint::WalResetSync, false)?;
        self.position = 0;
        tracing::trace!(path = %self.path.display(), "write-ahead log emptied");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_torn_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, records) = Wal::open(dir.path()).unwrap();
        assert!(records.is_empty());
        let mut buf = Vec::new();
        encode(1, b"first", &mut buf);
        encode(2, b"second", &mut buf);
        wal.append(&buf).unwrap();
        drop(wal);

        // A crash mid-append: half a record at the end.
        let mut torn = Vec::new();
        encode(3, b"third, never acknowledged", &mut torn);
        let path = dir.path().join(WAL_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&torn[..torn.len() / 2]);
        std::fs::write(&path, &bytes).unwrap();

        let (mut wal, records) = Wal::open(dir.path()).unwrap();
        let seen: Vec<_> = records.iter().map(|r| (r.revision, r.event.clone())).collect();
        assert_eq!(seen, vec![(1, b"first".to_vec()), (2, b"second".to_vec())]);
        // The next record overwrites the torn one.
        let mut next = Vec::new();
        encode(3, b"third", &mut next);
        wal.append(&next).unwrap();
        drop(wal);
        let (mut wal, records) = Wal::open(dir.path()).unwrap();
        assert_eq!(records.iter().map(|r| r.revision).collect::<Vec<_>>(), vec![1, 2, 3]);

        // Emptied after a checkpoint: older records left behind in the file are not replayed,
        // even when a new record ends exactly where an old one begins.
        wal.reset().unwrap();
        assert!(Wal::open(dir.path()).unwrap().1.is_empty());
        let mut newer = Vec::new();
        encode(10, b"first", &mut newer);
        wal.append(&newer).unwrap();
        drop(wal);
        let records = Wal::open(dir.path()).unwrap().1;
        assert_eq!(records.iter().map(|r| r.revision).collect::<Vec<_>>(), vec![10]);
    }

    #[test]
    fn the_log_grows_by_zero_filled_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        let path = dir.path().join(WAL_FILE);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), CHUNK);
        let mut big = Vec::new();
        encode(1, &vec![7u8; CHUNK as usize], &mut big);
        wal.append(&big).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 2 * CHUNK);
        drop(wal);
        assert_eq!(Wal::open(dir.path()).unwrap().1.len(), 1);
    }

    #[test]
    fn a_corrupt_record_ends_the_log() {
        let mut buf = Vec::new();
        encode(1, b"ok", &mut buf);
        let first = buf.len();
        encode(2, b"flipped", &mut buf);
        encode(3, b"after", &mut buf);
        buf[first + HEADER + 9] ^= 0xff;
        let (records, valid) = decode(&buf);
        assert_eq!(records.len(), 1);
        assert_eq!(valid, first);
        for cut in 0..buf.len() {
            let (records, valid) = decode(&buf[..cut]);
            assert!(valid <= cut && records.len() <= 1);
        }
    }

    #[test]
    fn a_batch_is_one_record_read_back_as_its_events_or_not_at_all() {
        let events = vec![b"one".to_vec(), Vec::new(), b"three".to_vec()];
        let mut buf = Vec::new();
        encode(1, b"single", &mut buf);
        let before = buf.len();
        encode_batch(2, &events, &mut buf).unwrap();
        let batch_end = buf.len();
        encode(5, b"after", &mut buf);
        let (records, valid) = decode(&buf);
        let seen: Vec<_> = records.iter().map(|r| (r.revision, r.event.clone())).collect();
        assert_eq!(
            seen,
            vec![
                (1, b"single".to_vec()),
                (2, b"one".to_vec()),
                (3, Vec::new()),
                (4, b"three".to_vec()),
                (5, b"after".to_vec()),
            ]
        );
        assert_eq!(valid, buf.len());

        // Cut anywhere inside the batch: none of its events is read back.
        for cut in before..batch_end {
            let (records, valid) = decode(&buf[..cut]);
            assert_eq!(records.iter().map(|r| r.revision).collect::<Vec<_>>(), vec![1], "{cut}");
            assert_eq!(valid, before);
        }
        // A record after the batch must follow its last revision.
        let mut gap = buf[..batch_end].to_vec();
        encode(4, b"not next", &mut gap);
        assert_eq!(decode(&gap).0.len(), 4);
    }

    #[test]
    fn an_appended_batch_is_read_back_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        let mut buf = Vec::new();
        encode_batch(7, &[b"a".to_vec(), b"b".to_vec()], &mut buf).unwrap();
        wal.append(&buf).unwrap();
        drop(wal);
        let records = Wal::open(dir.path()).unwrap().1;
        assert_eq!(records.iter().map(|r| r.revision).collect::<Vec<_>>(), vec![7, 8]);
    }
}
