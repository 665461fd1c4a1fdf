//! How much event history a store keeps for watches and continued lists.

use std::time::Duration;

/// The history window: an event is discarded only once it is both older than `min_age` and more
/// than `min_events` revisions behind the newest one. So a store keeps the larger of the two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryWindow {
    /// Keep every event at least this long.
    pub min_age: Duration,
    /// Keep at least this many of the newest events.
    pub min_events: u64,
}

impl Default for HistoryWindow {
    /// The larger of 5 minutes and 10,000 events.
    fn default() -> Self {
        HistoryWindow { min_age: Duration::from_secs(5 * 60), min_events: 10_000 }
    }
}

impl HistoryWindow {
    /// The newest revision this window allows discarding, given the newest revision.
    /// The age rule is applied separately, by reading event timestamps.
    pub(crate) fn count_bound(&self, newest: u64) -> u64 {
        newest.saturating_sub(self.min_events)
    }
}
