//! Every name the syncer gives a host object, and the labels and annotations that record which
//! tenant object it stands for. Nothing else in the syncer makes up a host name.

use std::collections::BTreeMap;

use ring::digest;

/// Longest host object name the syncer writes: a DNS label, so it also fits label values.
pub const MAX_NAME: usize = 63;
/// Hex digits of the hash that keeps shortened names distinct.
const HASH_HEX: usize = 10;

/// Label on every host object the syncer writes: the tenant.
pub const LABEL_TENANT: &str = "carrel.dev/tenant";
/// Label on every host object the syncer writes.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "carrel-syncer";
/// Annotation: the tenant object's namespace.
pub const ANNOTATION_NAMESPACE: &str = "carrel.dev/tenant-namespace";
/// Annotation: the tenant object's name.
pub const ANNOTATION_NAME: &str = "carrel.dev/tenant-name";
/// Annotation: the tenant object's UID.
pub const ANNOTATION_UID: &str = "carrel.dev/tenant-uid";
/// Annotation on a host token Secret: the tenant service account.
pub const ANNOTATION_SERVICE_ACCOUNT: &str = "carrel.dev/tenant-service-account";
/// Annotation on a host token Secret: when its token expires (RFC 3339).
pub const ANNOTATION_TOKEN_EXPIRES: &str = "carrel.dev/token-expires";
/// Annotation on a host pod: the CDI devices it is given.
pub const ANNOTATION_CDI: &str = "cdi.k8s.io/carrel-gpu";
/// Label on the tenant's virtual nodes.
pub const LABEL_VIRTUAL_NODE: &str = "carrel.dev/virtual-node";
/// The volume carrying the tenant's service-account token in a host pod.
pub const TOKEN_VOLUME: &str = "carrel-tenant-token";

/// The host name of tenant object `name` in tenant namespace `namespace`: `<name>-x-<namespace>`,
/// or, beyond [`MAX_NAME`] characters, its first characters, a dash and a hash of both names.
/// A namespace containing `-x-` also gets the hashed form, so that the last `-x-` of a plain name
/// always separates the two and no two pairs share a plain name (`a-x-b` in `c` against `a` in
/// `b-x-c`).
pub fn host_name(namespace: &str, name: &str) -> String {
    let plain = format!("{name}-x-{namespace}");
    if plain.len() <= MAX_NAME && !namespace.contains("-x-") {
        return plain;
    }
    let hash = digest::digest(&digest::SHA256, format!("{namespace}/{name}").as_bytes());
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let keep = MAX_NAME - HASH_HEX - 1;
    let head: String = plain.chars().take(keep).collect();
    // A name must end in an alphanumeric character before the dash.
    let head = head.trim_end_matches(['-', '.']);
    format!("{head}-{}", &hex[..HASH_HEX])
}

/// The host pod of a tenant pod.
pub fn host_pod(namespace: &str, name: &str) -> String {
    host_name(namespace, name)
}

/// The host Secret that carries the token of tenant service account `account` in `namespace`,
/// shared by its pods. The `.sa-token` suffix puts a dot after the namespace part, which no
/// namespace (a DNS label) has, so no copied tenant object can have this name.
pub fn token_secret(namespace: &str, account: &str) -> String {
    format!("{}.sa-token", host_name(namespace, account))
}

/// Labels of a host object written for `tenant`.
pub fn host_labels(tenant: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_TENANT.to_owned(), tenant.to_owned()),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// The label selector of every host object written for `tenant`.
pub fn host_selector(tenant: &str) -> String {
    format!("{LABEL_TENANT}={tenant},{LABEL_MANAGED_BY}={MANAGED_BY}")
}

/// Annotations of a host object standing for a tenant object.
pub fn host_annotations(namespace: &str, name: &str, uid: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (ANNOTATION_NAMESPACE.to_owned(), namespace.to_owned()),
        (ANNOTATION_NAME.to_owned(), name.to_owned()),
        (ANNOTATION_UID.to_owned(), uid.to_owned()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX_NAME
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
    }

    #[test]
    fn short_names_read_as_they_are() {
        assert_eq!(host_pod("default", "train-0"), "train-0-x-default");
        assert_eq!(token_secret("ml", "default"), "default-x-ml.sa-token");
        // A tenant Secret named "default" in namespace "ml-sa-token" cannot take its name.
        assert_ne!(token_secret("ml", "default"), host_name("ml-sa-token", "default"));
    }

    #[test]
    fn long_names_are_shortened_and_stay_distinct() {
        let long = "a".repeat(60);
        let a = host_pod("default", &long);
        let b = host_pod("default2", &long);
        let c = host_pod("default", &format!("{long}b"));
        for n in [&a, &b, &c] {
            assert!(dns_label(n), "{n}");
            assert_eq!(n.len(), MAX_NAME);
        }
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!(a, host_pod("default", &long), "deterministic");
    }

    #[test]
    fn the_separator_cannot_make_two_pairs_collide() {
        let a = host_name("c", "a-x-b");
        let b = host_name("b-x-c", "a");
        assert_eq!(a, "a-x-b-x-c");
        assert_ne!(a, b);
        assert!(dns_label(&b), "{b}");
        let one = host_name(&"n".repeat(40), &"p".repeat(30));
        let two = host_name(&"n".repeat(41), &"p".repeat(29));
        assert_ne!(one, two);
        assert!(dns_label(&one) && dns_label(&two));
    }
}
