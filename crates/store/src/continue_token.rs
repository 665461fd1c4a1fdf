//! Continue tokens: the revision a paginated list started at and the last key it returned; the
//! next page is read at that revision, so that all pages are one snapshot. Opaque to clients
//! (URL-safe base64), validated on the way back in.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use crate::{Error, Result, Revision};

const VERSION: &str = "c1";

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ContinueToken {
    pub revision: Revision,
    pub last_key: String,
}

impl ContinueToken {
    pub(crate) fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{VERSION}:{}:{}", self.revision, self.last_key))
    }

    /// Decode a token for a listing of `prefix`.
    pub(crate) fn decode(token: &str, prefix: &str) -> Result<ContinueToken> {
        let invalid = |reason| Error::InvalidContinue { reason };
        let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| invalid("not base64"))?;
        let raw = String::from_utf8(raw).map_err(|_| invalid("not UTF-8"))?;
        let mut parts = raw.splitn(3, ':');
        if parts.next() != Some(VERSION) {
            return Err(invalid("unknown token version"));
        }
        let revision =
            parts.next().and_then(|r| r.parse().ok()).ok_or_else(|| invalid("no revision"))?;
        let last_key = parts.next().ok_or_else(|| invalid("no key"))?.to_owned();
        if !last_key.starts_with(prefix) {
            return Err(invalid("token belongs to another listing"));
        }
        Ok(ContinueToken { revision, last_key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_keys_with_colons() {
        let token = ContinueToken { revision: 17, last_key: "/a/b:c/d".into() };
        assert_eq!(ContinueToken::decode(&token.encode(), "/a/").unwrap(), token);
    }

    #[test]
    fn refuses_garbage_and_foreign_tokens() {
        let token = ContinueToken { revision: 17, last_key: "/a/x".into() }.encode();
        for bad in ["", "!!!", "YWJj", &URL_SAFE_NO_PAD.encode("c1:notanumber:/a/x")] {
            assert!(
                matches!(ContinueToken::decode(bad, "/a/"), Err(Error::InvalidContinue { .. })),
                "{bad:?} accepted"
            );
        }
        assert!(matches!(ContinueToken::decode(&token, "/b/"), Err(Error::InvalidContinue { .. })));
    }
}
