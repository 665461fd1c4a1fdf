//! The descriptors kept for the process whatever client connections want ([`FdReserve`]), and
//! the open-file limit they are kept from.

use std::sync::Arc;

/// Descriptors kept for the process's own use, whatever client connections want: a number for
/// the process itself (its binaries, certificates, in-process clients of its own API) and a
/// number for each store it serves (a store's log, checkpoints and blobs).
#[derive(Clone)]
pub struct FdReserve {
    /// Descriptors kept for the process as a whole.
    pub base: u64,
    /// Descriptors kept for each served store.
    pub per_store: u64,
    stores: Arc<dyn Fn() -> usize + Send + Sync>,
}

impl std::fmt::Debug for FdReserve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdReserve")
            .field("base", &self.base)
            .field("per_store", &self.per_store)
            .field("stores", &(self.stores)())
            .finish()
    }
}

impl Default for FdReserve {
    /// 256 for the process, 16 for each of one store.
    fn default() -> FdReserve {
        FdReserve::new(256, 16, || 1)
    }
}

impl FdReserve {
    /// Keep `base` descriptors, and `per_store` for each of the `stores()` served now (asked
    /// at every accepted connection, so that stores opened later are counted).
    pub fn new(
        base: u64,
        per_store: u64,
        stores: impl Fn() -> usize + Send + Sync + 'static,
    ) -> FdReserve {
        FdReserve { base, per_store, stores: Arc::new(stores) }
    }

    /// The descriptors kept now.
    pub fn reserved(&self) -> u64 {
        let stores = u64::try_from((self.stores)()).unwrap_or(u64::MAX);
        self.base.saturating_add(self.per_store.saturating_mul(stores))
    }
}

/// The process's soft limit on open files.
pub(super) fn open_file_limit() -> u64 {
    match rlimit::getrlimit(rlimit::Resource::NOFILE) {
        Ok((soft, _)) => soft,
        Err(e) => {
            tracing::warn!(error = %e, "reading the open-file limit failed; assuming 1024");
            1024
        }
    }
}
