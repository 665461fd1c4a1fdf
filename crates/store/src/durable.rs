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

use crate::faults::{self, FaultPoint};
use crate::io::Failure;
use crate::Result;

/// sled's file names inside its directory.
const LOG_FILE: &str = "db";
const CONF_FILE: &str = "conf";
const BLOB_DIR: &str = "blobs";

#[derive(Debug)]
pub(crate) struct DiskSync {
    log: File,
    /// The store directory (which names the store to injected faults).
    dir: PathBuf,
    blob_dir: PathBuf,
    synced_blobs: HashSet<OsString>,
}

impl DiskSync {
    /// Sync everything sled has written so far, including the directory entries, and remember
    /// which blobs are on disk.
    pub(crate) fn open(dir: &Path, db: &sled::Db) -> Result<DiskSync> {
        db.flush()?;
        let log = File::open(dir.join(LOG_FILE))?;
        let mut sync = DiskSync {
            log,
            dir: dir.to_path_buf(),
            blob_dir: dir.join(BLOB_DIR),
            synced_blobs: HashSet::new(),
        };
        let synced = sync
            .fsync(&sync.log)
            .and_then(|()| sync.fsync(&File::open(dir.join(CONF_FILE)).map_err(Failure::open)?))
            .and_then(|()| sync.sync_blobs());
        synced.map_err(|f| f.error)?;
        sync_dir(dir)?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        Ok(sync)
    }

    /// Make every write applied to `db` before this call durable. A failure to open a file is
    /// passing (nothing was written; the write-ahead log still holds everything), a failed flush
    /// or sync is not.
    pub(crate) fn sync(&mut self, db: &sled::Db) -> Result<(), Failure> {
        faults::hit(&self.dir, FaultPoint::CheckpointFlush)
            .map_err(|e| Failure::sled(sled::Error::Io(e)))?;
        db.flush().map_err(Failure::sled)?;
        self.fsync(&self.log)?;
        self.sync_blobs()?;
        Ok(())
    }

    fn open_file(&self, path: &Path) -> io::Result<File> {
        faults::hit(&self.dir, FaultPoint::CheckpointOpen)?;
        File::open(path)
    }

    fn fsync(&self, file: &File) -> Result<(), Failure> {
        faults::hit(&self.dir, FaultPoint::CheckpointSync)
            .and_then(|()| file.sync_all())
            .map_err(Failure::sync)
    }

    fn sync_blobs(&mut self) -> Result<(), Failure> {
        let mut seen = HashSet::with_capacity(self.synced_blobs.len());
        let mut new = false;
        let entries = match faults::hit(&self.dir, FaultPoint::CheckpointOpen)
            .and_then(|()| std::fs::read_dir(&self.blob_dir))
        {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Failure::open(e)),
        };
        for entry in entries {
            // Reading a directory changes nothing on disk.
            let entry = entry.map_err(Failure::open)?;
            let name = entry.file_name();
            if !self.synced_blobs.contains(&name) {
                match self.open_file(&entry.path()) {
                    Ok(f) => self.fsync(&f)?,
                    // sled removed it between listing and opening: nothing to keep.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(Failure::open(e)),
                }
                new = true;
            }
            seen.insert(name);
        }
        if new {
            let dir = self.open_file(&self.blob_dir).map_err(Failure::open)?;
            self.fsync(&dir)?;
        }
        self.synced_blobs = seen;
        Ok(())
    }
}

/// fsync a directory, so that the names of files created in it survive a crash.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
