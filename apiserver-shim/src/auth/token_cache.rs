//! Service-account tokens that verified recently, kept for a short time as kube-apiserver's token
//! cache keeps them (10 s of success, no failures): a client that sends the same token with every
//! request pays for its signature check and its service-account lookup once per
//! [`TokenCache::TTL`], not once per request. A service account deleted is refused once its
//! token's entry expires, as on kube-apiserver.
//!
//! Entries are keyed by a SHA-256 digest of the token and the audiences asked for, so the cache
//! holds no token.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use ring::digest;

use crate::auth::UserInfo;

/// The most entries a cache holds; when full, expired entries go, and if none has, all of them.
const CAPACITY: usize = 1024;

/// Recently verified tokens, with the user each one is.
#[derive(Debug, Default)]
pub struct TokenCache {
    entries: Mutex<HashMap<Key, Entry>>,
}

type Key = [u8; 32];

#[derive(Debug)]
struct Entry {
    user: UserInfo,
    until: Instant,
}

impl TokenCache {
    /// How long a verified token is taken as verified.
    pub const TTL: Duration = Duration::from_secs(10);

    /// The key of `token` asked for `audiences`.
    pub fn key(token: &str, audiences: &[&str]) -> Key {
        let mut context = digest::Context::new(&digest::SHA256);
        // Each part after its length: ("a", ["bc"]) is not ("ab", ["c"]).
        for part in std::iter::once(&token).chain(audiences) {
            context.update(&(part.len() as u64).to_be_bytes());
            context.update(part.as_bytes());
        }
        let mut key = [0u8; 32];
        key.copy_from_slice(context.finish().as_ref());
        key
    }

    /// The user of a token verified less than [`TokenCache::TTL`] before `now`, that has not
    /// expired since.
    pub fn get(&self, key: &Key, now: Instant) -> Option<UserInfo> {
        let entries = self.entries.lock();
        entries.get(key).filter(|entry| now < entry.until).map(|entry| entry.user.clone())
    }

    /// `key`'s token verified at `now` as `user`; it expires at `expires` (its `exp`).
    pub fn insert(&self, key: Key, user: UserInfo, now: Instant, expires: SystemTime) {
        let left = expires.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO);
        let until = now + left.min(Self::TTL);
        let mut entries = self.entries.lock();
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, entry| now < entry.until);
            if entries.len() >= CAPACITY {
                entries.clear();
            }
        }
        entries.insert(key, Entry { user, until });
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> UserInfo {
        UserInfo { name: name.to_owned(), ..UserInfo::default() }
    }

    fn in_an_hour() -> SystemTime {
        SystemTime::now() + Duration::from_secs(3600)
    }

    #[test]
    fn a_verified_token_is_taken_for_the_ttl_and_no_longer() {
        let cache = TokenCache::default();
        let now = Instant::now();
        let key = TokenCache::key("token", &["api"]);
        assert_eq!(cache.get(&key, now), None);
        cache.insert(key, user("sa"), now, in_an_hour());
        assert_eq!(cache.get(&key, now + Duration::from_secs(9)), Some(user("sa")));
        assert_eq!(cache.get(&key, now + TokenCache::TTL), None);
    }

    #[test]
    fn a_token_about_to_expire_is_kept_only_until_it_does() {
        let cache = TokenCache::default();
        let now = Instant::now();
        let key = TokenCache::key("token", &["api"]);
        cache.insert(key, user("sa"), now, SystemTime::now() + Duration::from_secs(2));
        assert_eq!(cache.get(&key, now + Duration::from_secs(1)), Some(user("sa")));
        assert_eq!(cache.get(&key, now + Duration::from_secs(3)), None);
        // One expired already is never taken.
        let old = TokenCache::key("old", &["api"]);
        cache.insert(old, user("sa"), now, SystemTime::now() - Duration::from_secs(1));
        assert_eq!(cache.get(&old, now), None);
    }

    #[test]
    fn the_audiences_asked_for_are_part_of_the_key() {
        let cache = TokenCache::default();
        let now = Instant::now();
        cache.insert(TokenCache::key("token", &["api"]), user("sa"), now, in_an_hour());
        assert_eq!(cache.get(&TokenCache::key("token", &["vault"]), now), None);
        assert_eq!(cache.get(&TokenCache::key("token", &[]), now), None);
        assert_ne!(TokenCache::key("a", &["bc"]), TokenCache::key("ab", &["c"]));
        assert_ne!(TokenCache::key("t", &["a", "b"]), TokenCache::key("t", &["a\0b"]));
        assert_ne!(TokenCache::key("ta", &[]), TokenCache::key("t", &["a"]));
    }

    #[test]
    fn a_full_cache_drops_expired_entries_first_and_stays_bounded() {
        let cache = TokenCache::default();
        let now = Instant::now();
        let soon = SystemTime::now() + Duration::from_secs(1);
        for i in 0..CAPACITY / 2 {
            cache.insert(TokenCache::key(&format!("short{i}"), &[]), user("a"), now, soon);
        }
        for i in 0..CAPACITY / 2 {
            cache.insert(TokenCache::key(&format!("long{i}"), &[]), user("b"), now, in_an_hour());
        }
        assert_eq!(cache.len(), CAPACITY);
        let later = now + Duration::from_secs(2);
        let key = TokenCache::key("new", &[]);
        cache.insert(key, user("c"), later, in_an_hour());
        assert_eq!(cache.len(), CAPACITY / 2 + 1, "the expired half went");
        assert_eq!(cache.get(&TokenCache::key("long0", &[]), later), Some(user("b")));
        for i in 0..CAPACITY {
            cache.insert(TokenCache::key(&format!("more{i}"), &[]), user("d"), later, in_an_hour());
        }
        assert!(cache.len() <= CAPACITY);
    }
}
