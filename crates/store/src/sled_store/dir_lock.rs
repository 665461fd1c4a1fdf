//! The lock that keeps a second process, or a second handle, out of a store's directory.
//!
//! The lock is an advisory lock on [`LOCK_FILE`]. A handle in this process also records the
//! directory in [`HELD`] until its lock is released, so that an open meeting the lock can tell a
//! handle of its own process still closing (worth waiting for, up to [`Options::lock_wait`])
//! from another process's (refused at once).

use super::*;
use std::collections::HashMap;
use std::fs::TryLockError;
use std::sync::{Condvar, LazyLock};

/// The directories locked by handles in this process, each with the signal of its release.
static HELD: LazyLock<Mutex<HashMap<PathBuf, Arc<Release>>>> = LazyLock::new(Default::default);

/// Set once a handle's lock is released.
#[derive(Debug, Default)]
struct Release {
    done: std::sync::Mutex<bool>,
    signal: Condvar,
}

impl Release {
    /// Wait until released or `deadline`, whichever is first.
    fn wait_until(&self, deadline: Instant) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            done = self.signal.wait_timeout(done, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    fn set(&self) {
        *self.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.signal.notify_all();
    }
}

/// A store directory's lock, held until dropped.
#[derive(Debug)]
pub(super) struct DirLock {
    key: PathBuf,
    file: Option<File>,
    release: Arc<Release>,
}

impl DirLock {
    /// Lock `path`. A handle of this process that holds it is waited for until `wait` has
    /// passed; another process's lock is [`Error::Locked`] at once.
    pub(super) fn take(path: &Path, wait: Duration) -> Result<DirLock> {
        let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let deadline = Instant::now() + wait;
        // A handle may release its lock between our attempt and our look at `HELD`: one more
        // attempt tells that apart from another process's lock.
        let mut last_chance = true;
        loop {
            let file = File::options()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path.join(LOCK_FILE))?;
            match file.try_lock() {
                Ok(()) => {
                    let release = Arc::new(Release::default());
                    HELD.lock().insert(key.clone(), release.clone());
                    return Ok(DirLock { key, file: Some(file), release });
                }
                Err(TryLockError::Error(e)) => return Err(e.into()),
                Err(TryLockError::WouldBlock) => {}
            }
            let held = HELD.lock().get(&key).cloned();
            match held {
                Some(release) if Instant::now() < deadline => release.wait_until(deadline),
                None if last_chance => last_chance = false,
                _ => return Err(Error::Locked { path: path.into() }),
            }
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Closing the file releases the lock; only then is the release told.
        drop(self.file.take());
        let mut held = HELD.lock();
        if held.get(&self.key).is_some_and(|release| Arc::ptr_eq(release, &self.release)) {
            held.remove(&self.key);
        }
        drop(held);
        self.release.set();
    }
}
