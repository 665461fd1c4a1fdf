//! Giving freed heap back to the system after idle tenants close.
//!
//! A closed tenant frees its store's caches and buffers, but glibc's allocator keeps freed memory
//! in its arenas for reuse: at 10,000 closed tenants that is most of the process's resident
//! memory (see "Density" in `docs/benchmarks.md`). After closes, [`Trim::closed`] has the heap
//! trimmed: a moment after a burst of closes, or a while after a few.
//!
//! A trim walks the whole heap and holds each arena's lock while it does: requests that
//! allocate meanwhile wait. So one tenant closing (a few hundred KiB freed) does not trim at
//! once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often closes are counted while a trim is due;
const SETTLE: Duration = Duration::from_secs(1);
/// the heap is trimmed once this many have closed and none has in the last [`SETTLE`]…
const BURST: usize = 256;
/// …or, at the latest, this long after the first close not yet trimmed after.
const LATER: Duration = Duration::from_secs(60);

/// Trims the heap after tenants close.
#[derive(Debug)]
pub struct Trim {
    handle: tokio::runtime::Handle,
    /// Whether a trim is due.
    pending: AtomicBool,
    /// Tenants closed since the last trim.
    closes: AtomicUsize,
}

impl Trim {
    pub fn new(handle: tokio::runtime::Handle) -> Arc<Trim> {
        Arc::new(Trim { handle, pending: AtomicBool::new(false), closes: AtomicUsize::new(0) })
    }

    /// A tenant has closed: trim the heap once a burst of [`BURST`] closes has ended, or
    /// [`LATER`] after this close.
    pub fn closed(self: &Arc<Self>) {
        self.closes.fetch_add(1, Ordering::AcqRel);
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let trim = self.clone();
        self.handle.spawn(async move {
            let first = tokio::time::Instant::now();
            let mut counted = 0;
            loop {
                tokio::time::sleep(SETTLE).await;
                let closes = trim.closes.load(Ordering::Acquire);
                let quiet = closes == counted;
                counted = closes;
                if (closes >= BURST && quiet) || first.elapsed() >= LATER {
                    break;
                }
            }
            trim.closes.store(0, Ordering::Release);
            trim.pending.store(false, Ordering::Release);
            // Walks every arena: off the async workers.
            let _ = tokio::task::spawn_blocking(release_free_heap).await;
        });
    }
}

/// Return the allocator's free pages to the system.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_heap() {
    // SAFETY: `malloc_trim` takes no pointers and only releases memory glibc's allocator holds
    // free; it is safe to call from any thread at any time.
    #[allow(unsafe_code)]
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(released = released != 0, "trimmed the heap after idle tenants closed");
}

/// Other allocators return free memory by themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_heap() {}
