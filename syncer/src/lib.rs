//! The syncer.
