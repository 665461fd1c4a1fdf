//! Injected I/O errors, for tests of the write and checkpoint paths.
//!
//! Every step of those paths that touches the disk asks [`hit`] (or [`hit_write`]) first. Without
//! the `failpoints` feature these are empty inline functions; with it, a test arms a [`Fault`] for
//! one store directory and the step fails with the chosen `errno`, as the system call would.

use std::io;
use std::path::Path;

/// A step of the write or checkpoint path where an error can be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// Zero-filling a new chunk of the write-ahead log (a write).
    WalGrow,
    /// Writing a group of records into the write-ahead log.
    WalWrite,
    /// The `fdatasync` that makes a group of records durable (also the sync of a new chunk).
    WalSync,
    /// sled's flush at a checkpoint.
    CheckpointFlush,
    /// Opening a file or directory at a checkpoint (the blob directory, a blob, the store's
    /// directory), to sync it.
    CheckpointOpen,
    /// An `fsync` at a checkpoint (sled's log, a blob, a directory).
    CheckpointSync,
    /// Emptying the write-ahead log after a checkpoint (a write).
    WalResetWrite,
    /// The `fdatasync` after emptying the write-ahead log.
    WalResetSync,
}

/// One armed fault.
#[cfg(feature = "failpoints")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Where it fires.
    pub point: FaultPoint,
    /// The `errno` the step fails with.
    pub errno: i32,
    /// How many times it fires; `None`: until [`clear`]ed.
    pub times: Option<u32>,
    /// For a write: half of the bytes land before the error.
    pub partial: bool,
}

#[cfg(feature = "failpoints")]
impl Fault {
    /// A fault that fires `times` times at `point` with `errno`, writing nothing.
    pub fn new(point: FaultPoint, errno: i32, times: Option<u32>) -> Fault {
        Fault { point, errno, times, partial: false }
    }
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::path::PathBuf;

    use parking_lot::Mutex;

    use super::*;

    struct Armed {
        dir: PathBuf,
        fault: Fault,
        fired: u32,
    }

    static ARMED: Mutex<Vec<Armed>> = Mutex::new(Vec::new());

    /// Arm `fault` for the store in `dir` (replacing one armed at the same point).
    pub fn inject(dir: &Path, fault: Fault) {
        let mut armed = ARMED.lock();
        armed.retain(|a| !(a.dir == dir && a.fault.point == fault.point));
        armed.push(Armed { dir: dir.to_path_buf(), fault, fired: 0 });
    }

    /// Disarm every fault of the store in `dir`.
    pub fn clear(dir: &Path) {
        ARMED.lock().retain(|a| a.dir != dir);
    }

    /// How often the fault armed at `point` for `dir` has fired (0 when none is armed).
    pub fn fired(dir: &Path, point: FaultPoint) -> u32 {
        ARMED.lock().iter().find(|a| a.dir == dir && a.fault.point == point).map_or(0, |a| a.fired)
    }

    pub(super) fn take(dir: &Path, point: FaultPoint) -> Option<Fault> {
        let mut armed = ARMED.lock();
        let a = armed.iter_mut().find(|a| a.fault.point == point && a.dir == dir)?;
        if a.fault.times.is_some_and(|t| a.fired >= t) {
            return None;
        }
        a.fired += 1;
        Some(a.fault)
    }
}

#[cfg(feature = "failpoints")]
pub use armed::{clear, fired, inject};

/// The error injected at `point` for the store in `dir`, if any.
#[inline(always)]
pub(crate) fn hit(dir: &Path, point: FaultPoint) -> io::Result<()> {
    #[cfg(feature = "failpoints")]
    if let Some(fault) = armed::take(dir, point) {
        return Err(io::Error::from_raw_os_error(fault.errno));
    }
    let _ = (dir, point);
    Ok(())
}

/// For a write of `len` bytes: the error injected at `point`, with how many bytes land first.
#[inline(always)]
pub(crate) fn hit_write(
    dir: &Path,
    point: FaultPoint,
    len: usize,
) -> Result<(), (usize, io::Error)> {
    #[cfg(feature = "failpoints")]
    if let Some(fault) = armed::take(dir, point) {
        let landed = if fault.partial { len / 2 } else { 0 };
        return Err((landed, io::Error::from_raw_os_error(fault.errno)));
    }
    let _ = (dir, point, len);
    Ok(())
}
