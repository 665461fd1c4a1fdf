//! Reads over a range of keys: a list at the newest revision or rewound to a past one through the
//! history, and a watch's replay of the log up to where live delivery takes over.

use super::*;

impl Inner {
    /// A page of `prefix` at the newest revision or at a past one. A past revision's state is the
    /// current one with every key written since shown as it was then: the first write to a key
    /// after that revision says what the key held before it (nothing, for a creation).
    pub(super) fn list(&self, prefix: &str, options: &ListOptions) -> Result<ListPage> {
        let token = options
            .continue_token
            .as_deref()
            .map(|t| ContinueToken::decode(t, prefix))
            .transpose()?;
        let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        // Every page of a paginated list is read at its first page's revision.
        let at = match (&token, options.revision) {
            (Some(token), Some(revision)) if token.revision != revision => {
                return Err(Error::InvalidContinue {
                    reason: "the token is for a list at another revision",
                });
            }
            (Some(token), _) => Some(token.revision),
            (None, revision) => revision,
        };
        let after_key = token.as_ref().map(|t| t.last_key.as_str());
        let mut rewind = match at {
            Some(at) => {
                // Most of the history is read without holding writers up; only what they
                // applied meanwhile is read under the lock, below.
                let applied = *self.writer.read();
                if at > applied {
                    return Err(Error::FutureRevision { requested: at, current: applied });
                }
                let oldest_available = self.compacted.load(Ordering::Acquire);
                if at < oldest_available {
                    return Err(Error::Expired { requested: at, oldest_available });
                }
                let mut rewind =
                    Rewind { prefix, after_key, at, next: at + 1, prior: BTreeMap::new() };
                self.rewind(&mut rewind, applied)?;
                Some(rewind)
            }
            None => None,
        };

        let reader = self.writer.read();
        let read_at = *reader;
        if let Some(rewind) = &mut rewind {
            self.rewind(rewind, read_at)?;
        }
        let mut prior = rewind.map(|r| r.prior).unwrap_or_default().into_iter().peekable();
        let start = match after_key {
            Some(last_key) => Bound::Excluded(codec::object_key(last_key)),
            None => Bound::Included(codec::object_key(prefix)),
        };
        let object_prefix = codec::object_key(prefix);
        let db = self.db()?;
        let mut current = db.range::<Vec<u8>, _>((start, Bound::Unbounded));
        let mut next_current: Option<Object> = None;
        let mut current_done = false;
        let mut items = Vec::new();
        let mut more = false;
        loop {
            if next_current.is_none() && !current_done {
                match current.next().transpose()? {
                    Some((k, v)) if k.starts_with(&object_prefix) => {
                        let key = std::str::from_utf8(&k[1..]).map_err(|e| self.corrupt(e))?;
                        let object = codec::decode_object(key.to_owned(), v);
                        next_current = Some(object.map_err(|e| self.corrupt(e))?);
                    }
                    _ => current_done = true,
                }
            }
            // The next key from either side; a key written since the list's revision shows
            // its state at that revision, and is left out if it did not exist then.
            let order = match (&next_current, prior.peek()) {
                (None, None) => break,
                (Some(object), Some((key, _))) => object.key.as_str().cmp(key.as_str()),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
            };
            let object = match order {
                std::cmp::Ordering::Less => next_current.take(),
                std::cmp::Ordering::Equal => {
                    next_current = None;
                    prior.next().and_then(|(_, then)| then)
                }
                std::cmp::Ordering::Greater => prior.next().and_then(|(_, then)| then),
            };
            let Some(object) = object else { continue };
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(object);
        }
        drop(reader);

        self.wait_durable(read_at)?;
        let revision = at.unwrap_or(read_at);
        let continue_token = match (more, items.last()) {
            (true, Some(last)) => {
                Some(ContinueToken { revision, last_key: last.key.clone() }.encode())
            }
            _ => None,
        };
        Ok(ListPage { items, revision, continue_token })
    }

    /// Read the history from `rewind.next` through `through`, keeping for each key of the listing
    /// the state its first write after `rewind.at` replaced.
    fn rewind(&self, rewind: &mut Rewind<'_>, through: Revision) -> Result<()> {
        if rewind.next > through {
            return Ok(());
        }
        let range = codec::log_key(rewind.next)..=codec::log_key(through);
        for entry in self.db()?.range(range) {
            let (k, v) = entry?;
            let revision = codec::revision_of_log_key(&k).map_err(|e| self.corrupt(e))?;
            if revision != rewind.next {
                return Err(self.history_gone(rewind.at, rewind.next));
            }
            rewind.next += 1;
            let record = codec::view_event(&v).map_err(|e| self.corrupt(e))?;
            let key = record.key;
            if !key.starts_with(rewind.prefix)
                || rewind.after_key.is_some_and(|after| key <= after)
                || rewind.prior.contains_key(key)
            {
                continue;
            }
            let then = match record.kind {
                EventKind::Created => None,
                EventKind::Modified | EventKind::Deleted => {
                    // A record written before log records kept the previous mod revision: the
                    // state before it cannot be rebuilt, as if its history were compacted.
                    let mod_revision = record.prev_mod_revision.ok_or(Error::Expired {
                        requested: rewind.at,
                        oldest_available: revision,
                    })?;
                    let value = match record.kind {
                        EventKind::Deleted => record.value(),
                        _ => record.prev_value().ok_or_else(|| {
                            self.corrupt(format!(
                                "the modification at revision {revision} has no previous value"
                            ))
                        })?,
                    };
                    Some(Object {
                        key: key.to_owned(),
                        value,
                        create_revision: record.create_revision,
                        mod_revision,
                    })
                }
            };
            rewind.prior.insert(key.to_owned(), then);
        }
        if rewind.next <= through {
            return Err(self.history_gone(rewind.at, rewind.next));
        }
        Ok(())
    }

    /// The error for a list at `at` that finds no history entry for `missing`: compaction took
    /// it (revisions are dense, so nothing else removes entries), or the database is damaged.
    fn history_gone(&self, at: Revision, missing: Revision) -> Error {
        let oldest_available = self.compacted.load(Ordering::Acquire);
        if at < oldest_available {
            Error::Expired { requested: at, oldest_available }
        } else {
            self.corrupt(format!("the history has no entry for revision {missing}"))
        }
    }

    pub(super) fn watch(self: &Arc<Self>, prefix: &str, after: Revision) -> Result<Watch> {
        let oldest_available = self.compacted.load(Ordering::Acquire);
        if after < oldest_available {
            return Err(Error::Expired { requested: after, oldest_available });
        }
        let live = self.hub.subscribe(prefix)?;
        let backlog = Replay {
            store: Arc::downgrade(self),
            prefix: prefix.to_owned(),
            next: after + 1,
            through: live.published,
            buffered: Default::default(),
        };
        Ok(Watch::new(after, Box::new(backlog), live))
    }
}

/// A list at a past revision: the keys written since, each with its state at that revision
/// (`None`: it did not exist then), read from the history.
struct Rewind<'a> {
    prefix: &'a str,
    /// Continuing a list: only keys after this one.
    after_key: Option<&'a str>,
    /// The revision listed.
    at: Revision,
    /// The next history entry to read.
    next: Revision,
    prior: BTreeMap<String, Option<Object>>,
}

/// A watch's replay of the log, from its start up to where live delivery took over.
struct Replay {
    store: Weak<Inner>,
    prefix: String,
    next: Revision,
    through: Revision,
    buffered: std::collections::VecDeque<Arc<Event>>,
}

impl Replay {
    fn fill(&mut self) -> Result<()> {
        let store = self.store.upgrade().ok_or(Error::Closed)?;
        let range = codec::log_key(self.next)..=codec::log_key(self.through);
        let mut read = 0;
        for entry in store.db()?.range(range).take(REPLAY_CHUNK) {
            let (k, v) = entry?;
            let revision = codec::revision_of_log_key(&k).map_err(|e| store.corrupt(e))?;
            if revision != self.next {
                // Revisions are dense, so a hole is history compacted under us.
                let oldest_available = store.compacted.load(Ordering::Acquire);
                if self.next <= oldest_available {
                    return Err(Error::Expired { requested: self.next - 1, oldest_available });
                }
            }
            self.next = revision + 1;
            read += 1;
            let record = codec::decode_event(revision, &v).map_err(|e| store.corrupt(e))?;
            if record.event.key.starts_with(&self.prefix) {
                self.buffered.push_back(Arc::new(record.event));
            }
        }
        if read == 0 && self.next <= self.through {
            // Nothing left in the range at all: it was compacted away entirely.
            let oldest_available = store.compacted.load(Ordering::Acquire);
            if self.next <= oldest_available {
                return Err(Error::Expired { requested: self.next - 1, oldest_available });
            }
            self.next = self.through + 1;
        }
        Ok(())
    }
}

impl Iterator for Replay {
    type Item = Result<Arc<Event>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.buffered.pop_front() {
                return Some(Ok(event));
            }
            if self.next > self.through {
                return None;
            }
            if let Err(e) = self.fill() {
                self.next = self.through + 1;
                return Some(Err(e));
            }
        }
    }
}
