//! Making sled's own writes durable with a real sync, at open and at checkpoints (acknowledged
//! writes are durable earlier, in the write-ahead log: see [`crate::wal`]).
//!
//! sled's `flush` writes its log buffers and calls `sync_file_range`, which starts and waits for
//! writeback of the data pages but neither flushes the drive's cache nor commits the file's
//! metadata (its size, as the log grows): after a power loss the data may be gone. Values too large
//! for a log segment go to separate files under `blobs/`, which sled does not sync at all. So after
//! every `flush` this module runs `fdatasync` on the log file and syncs every blob file created
//! since the last sync, and the blob directory that names them.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::Result;

/// sled's file names inside its directory.
const LOG_FILE: &str = "db";
const CONF_FILE: &str = "conf";
const BLOB_DIR: &str = "blobs";

#[derive(Debug)]
pub(crate) struct DiskSync {
    log: File,
    blob_dir: PathBuf,
    synced_blobs: HashSet<OsString>,
}

impl DiskSync {
    /// Sync everything sled has written so far, including the directory entries, and remember
    /// which blobs are on disk.
    pub(crate) fn open(dir: &Path, db: &sled::Db) -> Result<DiskSync> {
        db.flush()?;
        let log = File::open(dir.join(LOG_FILE))?;
        log.sync_all()?;
        File::open(dir.join(CONF_FILE))?.sync_all()?;
        let mut sync = DiskSync { log, blob_dir: dir.join(BLOB_DIR), synced_blobs: HashSet::new() };
        sync.sync_blobs()?;
        sync_dir(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        Ok(sync)
    }

    /// Make every write applied to `db` before this call durable.
    pub(crate) fn sync(&mut self, db: &sled::Db) -> Result<()> {
        db.flush()?;
        self.log.sync_data()?;
        self.sync_blobs()?;
        Ok(())
    }

    fn sync_blobs(&mut self) -> io::Result<()> {
        let mut seen = HashSet::with_capacity(self.synced_blobs.len());
        let mut new = false;
        let entries = match std::fs::read_dir(&self.blob_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if !self.synced_blobs.contains(&name) {
                match File::open(entry.path()) {
                    Ok(f) => f.sync_all()?,
                    // sled removed it between listing and opening: nothing to keep.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(e),
                }
                new = true;
            }
            seen.insert(name);
        }
        if new {
            sync_dir(&self.blob_dir)?;
        }
        self.synced_blobs = seen;
        Ok(())
    }
}

/// fsync a directory, so that the names of files created in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
