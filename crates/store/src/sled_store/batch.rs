//! Several creates as one write ([`Store::create_all`]): checked together, applied to sled in one
//! atomic batch, queued for group commit as one write-ahead log record, so that they become
//! durable in one sync and a crash keeps all of them or none.

use std::collections::HashSet;

use super::*;

impl Inner {
    pub(super) fn create_all(&self, items: Vec<(String, Bytes)>) -> Result<Vec<Object>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let mut keys = HashSet::with_capacity(items.len());
        for (key, value) in &items {
            self.check_key(key)?;
            self.check_value(value)?;
            if !keys.insert(key.as_str()) {
                return Err(Error::AlreadyExists { key: key.clone() });
            }
        }
        drop(keys);

        let mut writer = self.writer.write();
        self.commit.check_writable()?;
        for (key, _) in &items {
            if self.read_object(key)?.is_some() {
                return Err(Error::AlreadyExists { key: key.clone() });
            }
        }
        let first = *writer + 1;
        let mut usage = self.usage.lock();
        let mut after = *usage;
        let events: Vec<Event> = items
            .into_iter()
            .zip(first..)
            .map(|((key, value), revision)| {
                after = after.with_created(&key, &value);
                Event {
                    kind: EventKind::Created,
                    revision,
                    key,
                    value,
                    prev_value: None,
                    create_revision: revision,
                }
            })
            .collect();
        self.quota.lock().check(*usage, after, true)?;

        let now = unix_millis();
        let records: Vec<Vec<u8>> = events.iter().map(|e| codec::encode_event(e, 0, now)).collect();
        let mut wal_record = Vec::new();
        if wal::encode_batch(first, &records, &mut wal_record).is_none() {
            let size = records.iter().map(Vec::len).sum();
            return Err(Error::TooLarge { size, limit: u32::MAX as usize });
        }
        let mut batch = sled::Batch::default();
        for (event, record) in events.iter().zip(&records) {
            add_event(&mut batch, event, record);
        }
        let last = first + events.len() as u64 - 1;
        set_revision(&mut batch, last, after);
        self.db()?.apply_batch(batch)?;
        *usage = after;
        drop(usage);
        *writer = last;
        let objects: Vec<Object> = events.iter().map(Event::object).collect();
        self.commit.record_all(events.into_iter().map(Arc::new).collect(), |wal| {
            wal.extend_from_slice(&wal_record)
        });
        drop(writer);

        self.wait_durable(last)?;
        tracing::trace!(path = %self.path.display(), first, last, "created objects in one write");
        Ok(objects)
    }
}
