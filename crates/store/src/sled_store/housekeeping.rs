//! What keeps a store within its bounds and durable: compaction and the history window,
//! checkpoints of sled, waits for a revision to be durable, and reopening a failed store in place.

use super::*;

impl Inner {
    pub(super) fn compact(&self, revision: Revision) -> Result<()> {
        let current = self.commit.durable();
        if revision > current {
            return Err(Error::FutureRevision { requested: revision, current });
        }
        self.compact_to(revision)
    }

    fn compact_to(&self, revision: Revision) -> Result<()> {
        let _compaction = self.compaction.lock();
        let compacted = self.compacted.load(Ordering::Acquire);
        if revision <= compacted {
            return Ok(());
        }
        // Announce first: a replay that meets the gap then knows it was compacted.
        self.compacted.store(revision, Ordering::Release);
        let range = codec::log_key(compacted + 1)..=codec::log_key(revision);
        let db = self.db()?;
        let mut batch = sled::Batch::default();
        let mut in_batch = 0;
        for key in db.range(range).keys() {
            batch.remove(key?);
            in_batch += 1;
            if in_batch == COMPACTION_CHUNK {
                db.apply_batch(std::mem::take(&mut batch))?;
                in_batch = 0;
            }
        }
        batch.insert(codec::META_COMPACTED, &codec::encode_u64(revision));
        db.apply_batch(batch)?;
        tracing::debug!(path = %self.path.display(), revision, "compacted history");
        Ok(())
    }

    /// Enforce the history window: discard events both older than its age and beyond its count.
    fn enforce_history(&self) -> Result<()> {
        let window = self.options.history;
        let by_count = window.count_bound(self.commit.durable());
        let compacted = self.compacted.load(Ordering::Acquire);
        if by_count <= compacted {
            return Ok(());
        }
        let cutoff = unix_millis().saturating_sub(window.min_age.as_millis() as u64);
        let mut boundary = compacted;
        let range = codec::log_key(compacted + 1)..=codec::log_key(by_count);
        for entry in self.db()?.range(range).take(COMPACTION_CHUNK) {
            let (k, v) = entry?;
            let revision = codec::revision_of_log_key(&k).map_err(|e| self.corrupt(e))?;
            let record = codec::decode_event(revision, &v).map_err(|e| self.corrupt(e))?;
            if record.unix_millis > cutoff {
                break;
            }
            boundary = revision;
        }
        self.compact_to(boundary)
    }

    /// Make sled's own state durable, then empty the write-ahead log: everything in it is now in
    /// sled on disk. No sync runs meanwhile (`Commit::exclusive`), so no append interleaves.
    /// A passing error is retried, and if it lasts, the checkpoint is put off (`false`): the log
    /// still holds everything, so nothing is at risk. An uncertain one fails the store.
    pub(super) fn checkpoint(&self) -> bool {
        if self.commit.is_failed() {
            return false;
        }
        let outcome = self.commit.exclusive(|| {
            let db = self.db().map_err(|error| Failure { error, passing: false })?;
            self.options.retry.run("checkpoint", || {
                self.disk.lock().sync(&db)?;
                self.wal.lock().reset()
            })
        });
        match outcome {
            Ok(()) => true,
            Err(f) if f.passing => {
                tracing::warn!(
                    path = %self.path.display(), error = %f.error,
                    "checkpoint put off after a passing I/O error; the write-ahead log keeps everything"
                );
                false
            }
            Err(f) => {
                self.commit.fail(format!("checkpoint failed: {}", f.error));
                false
            }
        }
    }

    /// Block until `revision` is durable, syncing as the leader when no one else is.
    pub(super) fn wait_durable(&self, revision: Revision) -> Result<()> {
        while let Some(batch) = self.commit.wait_or_lead(revision)? {
            let outcome = self
                .options
                .retry
                .run("write-ahead log append", || self.wal.lock().append(&batch.wal));
            match outcome {
                Ok(()) => {
                    self.commits.fetch_add(1, Ordering::AcqRel);
                    self.committed_revisions.fetch_add(batch.events.len() as u64, Ordering::AcqRel);
                    // Still the only leader, so events reach the publisher in revision order.
                    let sent = self
                        .publisher
                        .lock()
                        .as_ref()
                        .is_some_and(|p| p.send((batch.events, batch.through)).is_ok());
                    if !sent {
                        tracing::debug!(path = %self.path.display(), "no publisher: store closing");
                    }
                    self.commit.finish(batch.through, &Ok(()));
                }
                Err(f) if f.passing => {
                    // Nothing reached the log: the batch waits for the next leader.
                    let why = f.error.to_string();
                    self.commit.give_back(batch, why.clone());
                    return Err(Error::Unavailable(why));
                }
                Err(f) => {
                    let outcome = Err(f.error);
                    self.commit.finish(batch.through, &outcome);
                    outcome?;
                }
            }
        }
        Ok(())
    }

    /// Reopen a failed store in place: see [`SledStore::reopen`].
    pub(super) fn reopen(&self) -> Result<bool> {
        // Writers and consistent readers wait; no sync or checkpoint runs meanwhile.
        let mut writer = self.writer.write();
        if self.commit.failure().is_none() {
            return Ok(false);
        }
        let durable = self.commit.durable();
        self.commit.exclusive(|| {
            // sled's lock is released once its last handle is dropped; `open_sled` waits for
            // a replay or compaction still holding one.
            self.db.write().take();
            let loaded = load(&self.path, &self.options)?;
            if loaded.revision < durable {
                let e = self.corrupt(format!(
                    "reopened at revision {} but revision {durable} was acknowledged",
                    loaded.revision
                ));
                *self.db.write() = Some(loaded.db);
                return Err(e);
            }
            // Writes that reached the disk without being acknowledged are durable now:
            // watchers get them, in order, after everything already published.
            let mut recovered = Vec::new();
            if loaded.revision > durable {
                let range = codec::log_key(durable + 1)..=codec::log_key(loaded.revision);
                for entry in loaded.db.range(range) {
                    let (k, v) = entry?;
                    let revision = codec::revision_of_log_key(&k).map_err(|e| self.corrupt(e))?;
                    let record = codec::decode_event(revision, &v).map_err(|e| self.corrupt(e))?;
                    recovered.push(Arc::new(record.event));
                }
            }
            *self.disk.lock() = loaded.disk;
            *self.wal.lock() = loaded.wal;
            *self.db.write() = Some(loaded.db);
            *self.usage.lock() = loaded.usage;
            self.compacted.fetch_max(loaded.compacted, Ordering::AcqRel);
            *writer = loaded.revision;
            if !recovered.is_empty() {
                if let Some(p) = self.publisher.lock().as_ref() {
                    let _ = p.send((recovered, loaded.revision));
                }
            }
            self.commit.reset(loaded.revision);
            crate::io::count_reopen();
            tracing::info!(
                path = %self.path.display(), revision = loaded.revision,
                "failed store reopened; it accepts writes again"
            );
            Ok(true)
        })
    }

    pub(super) fn run_housekeeping(self: Arc<Self>) {
        let interval = self.options.compaction_interval;
        let mut last_checkpoint = Instant::now();
        // While failed: when to try reopening next, and the wait after that.
        let mut reopen: Option<(Instant, Duration)> = None;
        while self.commit.idle(interval) {
            if self.commit.is_failed() {
                let Some(first) = self.options.reopen_after else { continue };
                let (at, wait) = *reopen.get_or_insert((Instant::now() + first, first));
                if Instant::now() >= at {
                    match self.reopen() {
                        Ok(_) => reopen = None,
                        Err(e) => {
                            let wait = (wait * 2).min(Duration::from_secs(60));
                            tracing::warn!(
                                path = %self.path.display(), error = %e, ?wait,
                                "reopening the failed store failed; trying again later"
                            );
                            reopen = Some((Instant::now() + wait, wait));
                        }
                    }
                }
                continue;
            }
            // Writes whose sync was given up on after a passing error are still queued: make
            // them durable even if no writer comes along.
            let applied = self.commit.applied();
            if applied > self.commit.durable() {
                if let Err(e) = self.wait_durable(applied) {
                    tracing::debug!(path = %self.path.display(), error = %e, "sync put off");
                }
            }
            let wal_len = self.wal.lock().len();
            if wal_len >= self.options.checkpoint_bytes
                || (wal_len > 0 && last_checkpoint.elapsed() >= self.options.checkpoint_interval)
            {
                last_checkpoint = Instant::now();
                self.checkpoint();
            }
            if let Err(e) = self.enforce_history() {
                tracing::warn!(path = %self.path.display(), error = %e, "compaction failed");
            }
        }
    }
}
