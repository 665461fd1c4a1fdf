//! Store errors. Each variant is one thing the API layer answers differently.

use std::path::PathBuf;

use crate::Revision;

/// What went wrong in a store operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No object under the key (Kubernetes: 404 NotFound).
    #[error("key {key:?} not found")]
    NotFound {
        /// The key asked for.
        key: String,
    },

    /// `create` on a key that exists (Kubernetes: 409 AlreadyExists).
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The key written.
        key: String,
    },

    /// A revision precondition did not hold (Kubernetes: 409 Conflict).
    #[error("key {key:?} is at revision {actual}, not {expected}")]
    Conflict {
        /// The key written.
        key: String,
        /// The revision the caller expected.
        expected: Revision,
        /// The revision the object is at.
        actual: Revision,
    },

    /// The history needed is no longer kept (Kubernetes: 410 Expired / Gone).
    #[error("revision {requested} has been compacted; the oldest available is {oldest_available}")]
    Expired {
        /// The revision asked for.
        requested: Revision,
        /// The oldest revision a watch or continued list may start from now.
        oldest_available: Revision,
    },

    /// A watcher fell too far behind and was ended rather than buffer without bound
    /// (Kubernetes: a watch ERROR event with 410, after which clients relist).
    #[error("watch fell behind at revision {last_delivered} and was ended; start a new one")]
    WatcherTooSlow {
        /// The last revision the watcher received.
        last_delivered: Revision,
    },

    /// A revision newer than the store's current one (Kubernetes: 504 Timeout, "Too large
    /// resource version", for a list).
    #[error("revision {requested} is newer than the current revision {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The store's current revision.
        current: Revision,
    },

    /// A value over the size limit (Kubernetes: 413 RequestEntityTooLarge).
    #[error("value of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The value's size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },

    /// A write that would take the store past its [`crate::Quota`] (Kubernetes: 403 Forbidden,
    /// "exceeded quota").
    #[error("exceeded quota: requested: {resource}={requested}, used: {resource}={used}, limited: {resource}={limited}")]
    QuotaExceeded {
        /// What the quota bounds.
        resource: QuotaResource,
        /// How much the write would add.
        requested: u64,
        /// How much the store holds.
        used: u64,
        /// The bound.
        limited: u64,
    },

    /// A key the store cannot hold.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key given.
        key: String,
        /// Why it is refused.
        reason: &'static str,
    },

    /// A continue token that this store did not issue, or one for another prefix
    /// (Kubernetes: 400 BadRequest).
    #[error("invalid continue token: {reason}")]
    InvalidContinue {
        /// Why it is refused.
        reason: &'static str,
    },

    /// The store directory does not exist and creating it was not asked for.
    #[error("store directory {path} does not exist")]
    Missing {
        /// The directory.
        path: PathBuf,
    },

    /// Another process (or another handle in this one) has the store open.
    #[error("store directory {path} is locked by another process")]
    Locked {
        /// The directory.
        path: PathBuf,
    },

    /// The directory holds data this store cannot read.
    #[error("store directory {path} is corrupt or not a Carrel store: {detail}")]
    Corrupt {
        /// The directory.
        path: PathBuf,
        /// What was found.
        detail: String,
    },

    /// Persisting to disk failed. After a failed sync the store refuses all further writes: the
    /// kernel may have dropped the dirty pages, so nothing later could be trusted to be durable.
    /// (Errors that leave the disk as it was are retried instead: see [`Error::Unavailable`].)
    #[error("storage I/O failed: {0}")]
    Io(#[from] std::io::Error),

    /// The embedded database reported an error.
    #[error("embedded database error: {0}")]
    Sled(#[source] Box<sled::Error>),

    /// An earlier sync failed; the store accepts no more writes until it is reopened.
    #[error("the store is failed after an earlier sync error ({0}) and accepts no writes")]
    Failed(String),

    /// A passing I/O error (no free file descriptor, no memory, no space before anything was
    /// written) outlasted its retries, so this write's durability could not be confirmed. Nothing
    /// on disk was harmed and the store stays writable: the write is still queued and becomes
    /// durable with the next sync, so a retry may find it done (Kubernetes: 503
    /// ServiceUnavailable).
    #[error("storage is temporarily unavailable ({0}); the write was not confirmed, retry")]
    Unavailable(String),

    /// The store was closed.
    #[error("the store is closed")]
    Closed,
}

/// What a [`crate::Quota`] bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuotaResource {
    /// The number of objects.
    Count,
    /// The bytes of keys and values.
    Bytes,
}

impl std::fmt::Display for QuotaResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuotaResource::Count => "count",
            QuotaResource::Bytes => "bytes",
        })
    }
}

impl Error {
    /// Whether this is one of the errors Kubernetes reports as 410 Expired, after which clients
    /// relist and watch again.
    pub fn is_expired(&self) -> bool {
        matches!(self, Error::Expired { .. } | Error::WatcherTooSlow { .. })
    }

    /// Whether the same request may succeed if retried soon: a passing I/O error.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }
}

impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Io(io) => Error::Io(io),
            other => Error::Sled(Box::new(other)),
        }
    }
}

/// The store's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
