//! Telling apart the I/O errors that leave the on-disk state uncertain from those that do not,
//! and retrying the second kind.
//!
//! An error is *uncertain* when the store can no longer know what is on disk: a failed `fsync` or
//! `fdatasync` (the kernel may have dropped the dirty pages and marked them clean, so a later sync
//! succeeds without writing them), a write that failed after part of it landed, or an error from
//! sled's own flush (sled keeps it and refuses to go on). After one of these the store accepts no
//! writes until it is reopened (see [`crate::SledStore::reopen`]).
//!
//! An error is *passing* when it happened before anything reached the file: a failed open or
//! create (`EMFILE`, `ENFILE`, `ENOMEM`, `EACCES`, …), or a write that wrote nothing and failed
//! with `EMFILE`/`ENFILE`, `ENOMEM`, `EINTR`, `EAGAIN`, `ENOSPC` or `EDQUOT`. Nothing on disk
//! changed, so the step is retried with bounded exponential backoff; if the cause lasts longer,
//! the caller gets [`Error::Unavailable`] and the store stays writable.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::Error;

static FAILURES: AtomicU64 = AtomicU64::new(0);
static PASSING: AtomicU64 = AtomicU64::new(0);
static GAVE_UP: AtomicU64 = AtomicU64::new(0);
static REOPENED: AtomicU64 = AtomicU64::new(0);

/// Counts of storage I/O trouble across every store of this process, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Stores that failed (stopped accepting writes) after an uncertain error.
    pub failures: u64,
    /// Passing I/O errors met (each retried, or given up on).
    pub passing_errors: u64,
    /// Syncs or checkpoints given up after their retries, the store staying writable.
    pub gave_up: u64,
    /// Failed stores reopened.
    pub reopened: u64,
}

/// The counts so far.
pub fn io_stats() -> IoStats {
    IoStats {
        failures: FAILURES.load(Ordering::Relaxed),
        passing_errors: PASSING.load(Ordering::Relaxed),
        gave_up: GAVE_UP.load(Ordering::Relaxed),
        reopened: REOPENED.load(Ordering::Relaxed),
    }
}

pub(crate) fn count_failure() {
    FAILURES.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn count_reopen() {
    REOPENED.fetch_add(1, Ordering::Relaxed);
}

/// A failed step of the write or checkpoint path, classified.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: Error,
    /// Nothing on disk changed: retrying is safe.
    pub passing: bool,
}

impl Failure {
    /// Opening or creating a file or directory failed: nothing was written.
    pub(crate) fn open(e: io::Error) -> Failure {
        Failure { error: Error::Io(e), passing: true }
    }

    /// A write failed; `landed` says whether any of its bytes reached the file first.
    pub(crate) fn write(e: io::Error, landed: bool) -> Failure {
        let passing = !landed && is_passing(&e);
        Failure { error: Error::Io(e), passing }
    }

    /// A sync failed: what it covered may or may not be on disk.
    pub(crate) fn sync(e: io::Error) -> Failure {
        Failure { error: Error::Io(e), passing: false }
    }

    /// sled reported an error: it keeps it and refuses to go on, so the store must stop too.
    pub(crate) fn sled(e: sled::Error) -> Failure {
        Failure { error: e.into(), passing: false }
    }
}

/// Errors of a write that wrote nothing and will likely succeed later.
fn is_passing(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::EINTR | libc::EAGAIN)
            | Some(libc::ENOSPC | libc::EDQUOT)
    ) || matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::OutOfMemory
    )
}

/// How passing errors are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    /// Retries after the first attempt.
    pub attempts: u32,
    /// The wait before the first retry; each later wait doubles, up to `max_delay`.
    pub initial_delay: Duration,
    /// The longest single wait.
    pub max_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        // About 0.6 s in all: a descriptor or memory shortage usually passes within that, and a
        // write held longer would only pile up behind it.
        Retry {
            attempts: 6,
            initial_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(200),
        }
    }
}

impl Retry {
    /// Run `step` until it succeeds, fails for good, or the retries are spent.
    pub(crate) fn run<T>(
        &self,
        what: &str,
        mut step: impl FnMut() -> Result<T, Failure>,
    ) -> Result<T, Failure> {
        let mut delay = self.initial_delay;
        let mut attempt = 0;
        loop {
            let out = step();
            if out.as_ref().is_err_and(|f| f.passing) {
                PASSING.fetch_add(1, Ordering::Relaxed);
            }
            match out {
                Err(f) if f.passing && attempt < self.attempts => {
                    attempt += 1;
                    tracing::warn!(error = %f.error, attempt, ?delay, "{what}: passing I/O error, retrying");
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(self.max_delay);
                }
                Err(f) if f.passing => {
                    GAVE_UP.fetch_add(1, Ordering::Relaxed);
                    return Err(f);
                }
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    #[test]
    fn only_errors_before_anything_landed_are_passing() {
        for code in
            [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::EINTR, libc::EAGAIN, libc::ENOSPC]
        {
            assert!(Failure::write(os(code), false).passing, "{code}");
            assert!(!Failure::write(os(code), true).passing, "{code} after a partial write");
            assert!(!Failure::sync(os(code)).passing, "{code} from a sync");
            assert!(Failure::open(os(code)).passing, "{code} from an open");
        }
        assert!(!Failure::write(os(libc::EIO), false).passing);
        assert!(!Failure::sync(os(libc::EIO)).passing);
    }

    #[test]
    fn retries_are_bounded() {
        let retry = Retry { attempts: 3, initial_delay: Duration::ZERO, max_delay: Duration::ZERO };
        let mut calls = 0;
        let out: Result<(), Failure> = retry.run("test", || {
            calls += 1;
            Err(Failure::open(os(libc::EMFILE)))
        });
        assert!(out.unwrap_err().passing);
        assert_eq!(calls, 4);

        let mut calls = 0;
        let out = retry.run("test", || {
            calls += 1;
            if calls < 3 {
                Err(Failure::open(os(libc::EMFILE)))
            } else {
                Ok(calls)
            }
        });
        assert_eq!(out.unwrap(), 3);

        let mut calls = 0;
        let out: Result<(), Failure> = retry.run("test", || {
            calls += 1;
            Err(Failure::sync(os(libc::EIO)))
        });
        assert!(!out.unwrap_err().passing);
        assert_eq!(calls, 1, "an uncertain error is not retried");
    }
}
