//! Opening a store: its directory and lock, sled itself, and what was acknowledged recovered
//! from sled and the write-ahead log.

use super::*;

/// A store's state on disk, recovered.
pub(super) struct Loaded {
    pub(super) db: sled::Db,
    pub(super) revision: Revision,
    pub(super) compacted: Revision,
    pub(super) usage: Usage,
    pub(super) disk: DiskSync,
    pub(super) wal: Wal,
}

/// Open sled in `path`, replay the write-ahead log onto it and make the result durable.
pub(super) fn load(path: &Path, options: &Options) -> Result<Loaded> {
    let config =
        sled::Config::new().path(path).cache_capacity(options.cache_capacity).flush_every_ms(None);
    let db = open_sled(path, &config)?;

    let corrupt = |detail: String| Error::Corrupt { path: path.to_path_buf(), detail };
    let (mut revision, compacted) = recover(&db).map_err(|e| corrupt(e.to_string()))?;
    let mut usage = recover_usage(&db, revision).map_err(|e| corrupt(e.to_string()))?;
    // Acknowledged writes newer than what sled recovered are in the write-ahead log.
    let (mut wal, records) = Wal::open(path)?;
    for record in &records {
        if record.revision <= revision {
            continue;
        }
        if record.revision != revision + 1 {
            return Err(corrupt(format!(
                "the write-ahead log continues at revision {} but the database ends at {revision}",
                record.revision
            )));
        }
        let event = codec::decode_event(record.revision, &record.event)
            .map_err(|e| corrupt(e.to_string()))?
            .event;
        usage = usage.after(&event);
        db.apply_batch(event_batch(&event, &record.event, usage))?;
        revision = record.revision;
    }
    // Make what was recovered durable in sled itself; then the log can start afresh.
    let disk = DiskSync::open(path, &db)?;
    wal.reset().map_err(|f| f.error)?;
    Ok(Loaded { db, revision, compacted, usage, disk, wal })
}

pub(super) fn prepare_dir(path: &Path, create: bool) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(Error::Corrupt { path: path.into(), detail: "not a directory".into() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if !create {
                return Err(Error::Missing { path: path.into() });
            }
            std::fs::create_dir_all(path)?;
            if let Some(parent) = path.parent() {
                sync_dir(parent)?;
            }
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// How long to wait for sled's own lock, which its background IO threads can keep for a moment
/// after the previous handle on the directory was dropped.
const SLED_LOCK_GRACE: Duration = Duration::from_secs(2);

/// Open sled's database. Holding our lock file, we know no other handle is live, so sled's lock
/// being taken can only be the previous handle's threads finishing: retry for a bounded time.
pub(super) fn open_sled(path: &Path, config: &sled::Config) -> Result<sled::Db> {
    let deadline = Instant::now() + SLED_LOCK_GRACE;
    loop {
        let error = match catch_unwind(AssertUnwindSafe(|| config.open())) {
            Ok(Ok(db)) => return Ok(db),
            Ok(Err(e)) => open_error(path, e),
            Err(panic) => {
                return Err(Error::Corrupt {
                    path: path.into(),
                    detail: panic_message(panic.as_ref()),
                });
            }
        };
        match error {
            Error::Locked { .. } if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            other => return Err(other),
        }
    }
}

fn open_error(path: &Path, e: sled::Error) -> Error {
    match e {
        sled::Error::Corruption { .. } | sled::Error::Unsupported(_) => {
            Error::Corrupt { path: path.into(), detail: e.to_string() }
        }
        sled::Error::Io(io) if io.to_string().contains("could not acquire lock") => {
            Error::Locked { path: path.into() }
        }
        other => other.into(),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    format!("the database could not be read: {what}")
}

/// Read the revision counters back, checking the layout version; a fresh database gets one.
fn recover(db: &sled::Db) -> std::result::Result<(Revision, Revision), RecoverError> {
    match db.get(codec::META_FORMAT)? {
        Some(v) => {
            let format = codec::decode_u64(&v)?;
            match format {
                codec::FORMAT => {}
                // Layout 1 differs only in log records of an older version, which are still read:
                // upgrade in place, so that a build that reads only layout 1 refuses the database
                // rather than meet newer records it cannot read.
                codec::FORMAT_WITHOUT_PREV_REVISION => {
                    db.insert(codec::META_FORMAT, &codec::encode_u64(codec::FORMAT))?;
                }
                _ => return Err(RecoverError::Format(format)),
            }
        }
        None if db.first()?.is_some() => return Err(RecoverError::Foreign),
        None => {
            db.insert(codec::META_FORMAT, &codec::encode_u64(codec::FORMAT))?;
        }
    }
    let meta = |key| -> std::result::Result<Revision, RecoverError> {
        Ok(match db.get(key)? {
            Some(v) => codec::decode_u64(&v)?,
            None => 0,
        })
    };
    let mut revision = meta(codec::META_REVISION)?;
    let mut compacted = meta(codec::META_COMPACTED)?;
    let log = db.scan_prefix([codec::LOG_PREFIX]);
    let mut log_keys = log.keys();
    match log_keys.next() {
        Some(first) => {
            let first = codec::revision_of_log_key(&first?)?;
            compacted = compacted.max(first - 1);
            if let Some(last) = db.scan_prefix([codec::LOG_PREFIX]).keys().next_back() {
                revision = revision.max(codec::revision_of_log_key(&last?)?);
            }
        }
        None => compacted = compacted.max(revision),
    }
    Ok((revision, compacted))
}

/// The usage as of `revision`: the one recorded with the last write, or, when there is none for
/// this revision (a store written by a build that did not record it), counted from the objects.
fn recover_usage(db: &sled::Db, revision: Revision) -> std::result::Result<Usage, RecoverError> {
    if let Some(v) = db.get(codec::META_USAGE)? {
        let (at, usage) = codec::decode_usage(&v)?;
        if at == revision {
            return Ok(usage);
        }
        tracing::info!(recorded_at = at, revision, "the recorded usage is stale: counting objects");
    }
    let mut usage = Usage::default();
    for entry in db.scan_prefix([codec::OBJECT_PREFIX]) {
        let (k, v) = entry?;
        let key = codec::key_of_object_key(&k)?;
        let object = codec::decode_object(key.to_owned(), v)?;
        usage.objects += 1;
        usage.bytes += Usage::bytes_of(key, &object.value);
    }
    Ok(usage)
}

#[derive(Debug, thiserror::Error)]
enum RecoverError {
    #[error("{0}")]
    Sled(#[from] sled::Error),
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("layout version {0} is not one this build reads")]
    Format(u64),
    #[error("the database holds data but no Carrel layout version")]
    Foreign,
}
