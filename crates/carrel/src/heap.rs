//! Giving freed heap back to the system after idle tenants close.
//!
//! A closed tenant frees its store's caches and buffers, but glibc's allocator keeps freed memory
//! in its arenas for reuse: at 10,000 closed tenants that is most of the process's resident
//! memory (see "Density" in `docs/benchmarks.md`). After closes, [`Trim::soon`] has the heap
//! trimmed once, a moment after the last of a burst.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long after a close the heap is trimmed, so that a burst of closes trims once.
const SETTLE: Duration = Duration::from_secs(1);

/// Trims the heap a moment after tenants close.
#[derive(Debug)]
pub struct Trim {
    handle: tokio::runtime::Handle,
    pending: AtomicBool,
}

impl Trim {
    pub fn new(handle: tokio::runtime::Handle) -> Arc<Trim> {
        Arc::new(Trim { handle, pending: AtomicBool::new(false) })
    }

    /// Trim the heap [`SETTLE`] from now, unless a trim is already due.
    pub fn soon(self: &Arc<Self>) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let trim = self.clone();
        self.handle.spawn(async move {
            tokio::time::sleep(SETTLE).await;
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
