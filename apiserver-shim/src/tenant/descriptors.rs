//! Room for one more tenant in the process's open-file limit.
//!
//! Every served tenant holds descriptors: its store's files, and in `carrel up` its syncer's
//! connections (both ends, in the one process). A process at its limit fails in every tenant at
//! once (stores cannot open files, connects and accepts fail), so the manager serves a new
//! tenant only while the descriptors in use (or kept for the tenants served), plus what the new
//! one takes, stay under the limit less a reserve for the process itself; otherwise the tenant
//! goes `Failed` with reason [`REASON`], and is served as soon as room is made (the manager
//! looks again soon). What counts as in use is the caller's: the process's open descriptors
//! ([`Descriptors::of_process`]), or the listener's own reckoning, as `carrel up` counts (the
//! stores' reserves and the connections open), so that a tenant is refused before its
//! connections would be.

use std::sync::Arc;

/// The reason of a tenant refused for want of descriptors.
pub const REASON: &str = "InsufficientFileDescriptors";

/// Descriptors in use now and the limit, as [`Descriptors`] reads them.
pub type Count = Arc<dyn Fn() -> std::io::Result<(u64, u64)> + Send + Sync>;

/// What a new tenant needs, against what the process has.
#[derive(Clone)]
pub struct Descriptors {
    /// Kept for the process itself (the host store, the listener, logs, libraries).
    pub reserve: u64,
    /// What one served tenant takes at most.
    pub per_tenant: u64,
    count: Count,
}

impl std::fmt::Debug for Descriptors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Descriptors")
            .field("reserve", &self.reserve)
            .field("per_tenant", &self.per_tenant)
            .finish_non_exhaustive()
    }
}

/// Why a tenant cannot be served now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{in_use} of the process's {limit} file descriptors are in use or kept for its tenants, and \
     {reserve} for the process itself; serving another tenant takes up to {per_tenant} more: \
     delete tenants or raise the open-file limit (ulimit -n)"
)]
pub struct NoRoom {
    /// Descriptors in use or kept.
    pub in_use: u64,
    /// The soft limit.
    pub limit: u64,
    /// Kept for the process.
    pub reserve: u64,
    /// What the tenant would take.
    pub per_tenant: u64,
}

impl Descriptors {
    /// `reserve` and `per_tenant`, against this process's open descriptors (`/proc/self/fd`) and
    /// soft open-file limit.
    pub fn of_process(reserve: u64, per_tenant: u64) -> Descriptors {
        Descriptors::counted(reserve, per_tenant, Arc::new(process_count))
    }

    /// `reserve` and `per_tenant`, against what `count` says.
    pub fn counted(reserve: u64, per_tenant: u64, count: Count) -> Descriptors {
        Descriptors { reserve, per_tenant, count }
    }

    /// Whether one more tenant fits now. A count that cannot be read does not refuse.
    pub fn room_for_one(&self) -> Result<(), NoRoom> {
        let (in_use, limit) = match (self.count)() {
            Ok(count) => count,
            Err(e) => {
                tracing::warn!(error = %e, "counting open file descriptors failed");
                return Ok(());
            }
        };
        let needed = in_use.saturating_add(self.per_tenant).saturating_add(self.reserve);
        if needed > limit {
            let (reserve, per_tenant) = (self.reserve, self.per_tenant);
            return Err(NoRoom { in_use, limit, reserve, per_tenant });
        }
        Ok(())
    }
}

/// This process's open descriptors and soft open-file limit.
fn process_count() -> std::io::Result<(u64, u64)> {
    let open = std::fs::read_dir("/proc/self/fd")?.count();
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    Ok((u64::try_from(open).unwrap_or(u64::MAX), soft))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(open: u64, limit: u64) -> Count {
        Arc::new(move || Ok((open, limit)))
    }

    #[test]
    fn a_tenant_fits_while_open_plus_its_share_plus_the_reserve_is_within_the_limit() {
        let fits = Descriptors::counted(512, 48, fixed(464, 1024));
        assert_eq!(fits.room_for_one(), Ok(()));
        let full = Descriptors::counted(512, 48, fixed(465, 1024));
        let refused = full.room_for_one().unwrap_err();
        assert_eq!(refused, NoRoom { in_use: 465, limit: 1024, reserve: 512, per_tenant: 48 });
        assert!(refused.to_string().contains("465 of the process's 1024 file descriptors"));
    }

    #[test]
    fn an_unreadable_count_does_not_refuse() {
        let count: Count = Arc::new(|| Err(std::io::Error::other("no /proc")));
        assert_eq!(Descriptors::counted(512, 48, count).room_for_one(), Ok(()));
    }

    #[test]
    fn the_process_count_reads_this_process() {
        let file = tempfile::tempfile().unwrap();
        let (open, limit) = process_count().unwrap();
        // Standard input, output and error, and the file just opened, at least.
        assert!(open >= 4, "{open}");
        assert!(limit >= open, "{open} open, limit {limit}");
        drop(file);
    }
}
