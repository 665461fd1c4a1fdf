//! Every name the syncer gives a host object, and the labels and annotations that record which
//! tenant object it stands for. Nothing else in the syncer makes up a host name.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use ring::digest;

/// Longest host object name the syncer writes: a DNS label, so it also fits label values.
pub const MAX_NAME: usize = 63;
/// Hex digits of the hash in a hashed host name: 128 bits of SHA-256, so that finding two tenant
/// objects with one hashed name takes about 2^64 tries.
const HASH_HEX: usize = 32;
/// What joins a tenant object's name and namespace in a plain host name.
const SEPARATOR: &str = "-x-";

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
/// On a virtual node whose host node is cordoned: its `spec.unschedulable` is the host's, not
/// the tenant's own cordon (which the syncer keeps, and honours when it places the tenant's pods).
pub const ANNOTATION_HOST_UNSCHEDULABLE: &str = "carrel.dev/host-unschedulable";
/// Label on the tenant's mirrors of the host's StorageClasses.
pub const LABEL_HOST_STORAGE_CLASS: &str = "carrel.dev/host-storage-class";
/// The label (set to `"true"`) of a tenant IngressClass that mirrors a host IngressClass.
pub const LABEL_HOST_INGRESS_CLASS: &str = "carrel.dev/host-ingress-class";
/// The volume carrying the tenant's service-account token in a host pod.
pub const TOKEN_VOLUME: &str = "carrel-tenant-token";
/// Label on a host pod: its tenant pod's namespace. All of a tenant's pods share one host
/// namespace; this label is what tells its tenant namespaces apart there (the tenant's
/// NetworkPolicies select by it).
pub const LABEL_NAMESPACE: &str = "carrel.dev/tenant-namespace";
/// The domain a tenant pod's labels are carried under on its host pod: label `app` as
/// `label.carrel.dev/app`, `app.kubernetes.io/name` as `app.kubernetes.io.label.carrel.dev/name`
/// ([`host_label_key`]).
pub const POD_LABEL_DOMAIN: &str = "label.carrel.dev";
/// The prefix of a carried label whose prefix is too long to be kept: its key is hashed.
const HASHED_POD_LABEL_PREFIX: &str = "hashed-label.carrel.dev";
/// Longest label key prefix (a DNS subdomain).
const MAX_LABEL_PREFIX: usize = 253;
/// The NetworkPolicy in every tenant's host namespace that admits traffic to its pods only from
/// the tenant's own pods and Carrel's. No tenant object's host name is this: [`host_name`]
/// always holds `-x-` or ends in a hash.
pub const ISOLATION_POLICY: &str = "carrel-tenant-isolation";
/// The host namespace of Carrel's own pods on a real host (`manifests/`): `carrel serve`, which
/// serves tenants' APIs and DNS and calls their admission and conversion webhooks.
pub const CARREL_NAMESPACE: &str = "carrel-system";
/// The label (key, value) of `carrel serve`'s pods in [`CARREL_NAMESPACE`].
pub const CARREL_POD_LABEL: (&str, &str) = ("app.kubernetes.io/name", "carrel-apiserver");

/// The host name of tenant object `name` in tenant namespace `namespace`: `<name>-x-<namespace>`
/// where that reads back as only this pair, else the hashed form: the plain name's first
/// characters, a dash and 32 hex digits of a hash of both names.
///
/// The mapping is injective: a plain name is used only when its last `-x-` is the separator (the
/// namespace neither contains `-x-` nor starts with `x-`), so it reads back as one pair
/// ([`tenant_of`]), and when it does not end like a hashed name (a dash and 32 hex digits), so no
/// plain name is another pair's hashed name; hashed names differ by their hash of the (length
/// prefixed, so unambiguous) pair. Every result has at most [`MAX_NAME`] characters.
pub fn host_name(namespace: &str, name: &str) -> String {
    let plain = format!("{name}{SEPARATOR}{namespace}");
    let reads_back = !format!("-{namespace}").contains(SEPARATOR);
    if plain.len() <= MAX_NAME && reads_back && !looks_hashed(&plain) {
        return plain;
    }
    let input = format!("{}:{namespace}/{name}", namespace.len());
    let hash = digest::digest(&digest::SHA256, input.as_bytes());
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let keep = MAX_NAME - HASH_HEX - 1;
    let head: String = plain.chars().take(keep).collect();
    // A name must end in an alphanumeric character before the dash.
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{head}-{}", &hex[..HASH_HEX])
}

/// Whether `name` ends like a hashed host name: a dash and [`HASH_HEX`] lowercase hex digits.
fn looks_hashed(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes.len() > HASH_HEX
        && bytes[bytes.len() - HASH_HEX - 1] == b'-'
        && bytes[bytes.len() - HASH_HEX..].iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The tenant (namespace, name) a plain host name stands for; `None` for a hashed one, whose
/// pair only its recorded annotations ([`host_annotations`]) tell.
pub fn tenant_of(host_name: &str) -> Option<(&str, &str)> {
    if looks_hashed(host_name) {
        return None;
    }
    let at = host_name.rfind(SEPARATOR)?;
    Some((&host_name[at + SEPARATOR.len()..], &host_name[..at]))
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

/// The key tenant pod label `key` has on the host pod: under [`POD_LABEL_DOMAIN`], so that no
/// tenant label is read on the host as one of the host's own (Carrel's, Kubernetes', an
/// add-on's). A key without prefix gets that domain as its prefix; a key with one gets its prefix
/// followed by the domain; a prefix too long for that is hashed (128 bits of SHA-256 of the
/// whole key) under `hashed-label.carrel.dev`, which no other form can give. Injective, and
/// the value is kept as it is, so selectors are rewritten key by key.
pub fn host_label_key(key: &str) -> String {
    match key.split_once('/') {
        None => format!("{POD_LABEL_DOMAIN}/{key}"),
        Some((prefix, name)) if prefix.len() + 1 + POD_LABEL_DOMAIN.len() <= MAX_LABEL_PREFIX => {
            format!("{prefix}.{POD_LABEL_DOMAIN}/{name}")
        }
        Some(_) => {
            let hash = digest::digest(&digest::SHA256, key.as_bytes());
            let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            format!("{HASHED_POD_LABEL_PREFIX}/{}", &hex[..HASH_HEX])
        }
    }
}

/// The labels of the host pod of a tenant pod in `namespace` labelled `labels`: the syncer's
/// ([`host_labels`]), the tenant namespace ([`LABEL_NAMESPACE`]) and each tenant label under
/// its [`host_label_key`].
pub fn host_pod_labels(
    tenant: &str,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut host = host_labels(tenant);
    host.insert(LABEL_NAMESPACE.to_owned(), namespace.to_owned());
    for (k, v) in labels {
        host.insert(host_label_key(k), v.clone());
    }
    host
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

/// The tenant object (namespace, name) a host object stands for, if it records one under its
/// own host name ([`host_name`]).
pub fn stood_for(host: &ObjectMeta) -> Option<(String, String)> {
    let a = host.annotations.as_ref()?;
    let namespace = a.get(ANNOTATION_NAMESPACE)?;
    let name = a.get(ANNOTATION_NAME)?;
    (host.name.as_deref() == Some(&host_name(namespace, name)))
        .then(|| (namespace.clone(), name.clone()))
}

/// The annotations that say which tenant object a host object stands for: its namespace, and its
/// name or (on a token Secret) its service account. Its UID is left out: a tenant object made
/// again under the same name has the same host object, replaced.
const IDENTITY: [&str; 3] = [ANNOTATION_NAMESPACE, ANNOTATION_NAME, ANNOTATION_SERVICE_ACCOUNT];

/// Whether a host object with `labels` and `annotations` was written by the syncer of `tenant`
/// for the tenant object that `wanted` (the annotations the syncer would write) names. One that
/// is not is someone else's (another tenant's, the host's, or written under a name that meant
/// another object): the syncer never adopts, replaces or deletes it.
pub fn stands_for(
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
    tenant: &str,
    wanted: &BTreeMap<String, String>,
) -> bool {
    let label = |k: &str| labels.and_then(|l| l.get(k)).map(String::as_str);
    let ours = label(LABEL_TENANT) == Some(tenant) && label(LABEL_MANAGED_BY) == Some(MANAGED_BY);
    ours && IDENTITY.iter().all(|k| annotations.and_then(|a| a.get(*k)) == wanted.get(*k))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host object name: a DNS-1123 subdomain (tenant names may hold dots) that fits a label
    /// value.
    fn dns_label(s: &str) -> bool {
        s.len() <= MAX_NAME && carrel_machinery::names::is_dns1123_subdomain(s)
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

    #[test]
    fn only_objects_recording_the_same_tenant_object_are_ours() {
        let labels = host_labels("t");
        let wanted = host_annotations("ml", "train", "uid-1");
        // The same tenant object made again (another UID) is still the one it stands for.
        let again = host_annotations("ml", "train", "uid-2");
        assert!(stands_for(Some(&labels), Some(&again), "t", &wanted));
        for other in
            [host_annotations("ml", "train2", "uid-1"), host_annotations("ml2", "train", "u")]
        {
            assert!(!stands_for(Some(&labels), Some(&other), "t", &wanted));
        }
        assert!(!stands_for(Some(&labels), None, "t", &wanted));
        assert!(!stands_for(Some(&host_labels("u")), Some(&again), "t", &wanted));
        assert!(!stands_for(None, Some(&again), "t", &wanted));
        let token = BTreeMap::from([
            (ANNOTATION_NAMESPACE.to_owned(), "ml".to_owned()),
            (ANNOTATION_SERVICE_ACCOUNT.to_owned(), "builder".to_owned()),
        ]);
        let mut other_account = token.clone();
        other_account.insert(ANNOTATION_SERVICE_ACCOUNT.to_owned(), "default".to_owned());
        assert!(stands_for(Some(&labels), Some(&token), "t", &token));
        assert!(!stands_for(Some(&labels), Some(&other_account), "t", &token));
        assert!(!stands_for(Some(&labels), Some(&wanted), "t", &token), "a copy is not a token");
    }

    #[test]
    fn tenant_pod_labels_are_carried_under_carrels_domain_only() {
        assert_eq!(host_label_key("app"), "label.carrel.dev/app");
        assert_eq!(
            host_label_key("app.kubernetes.io/name"),
            "app.kubernetes.io.label.carrel.dev/name"
        );
        // A tenant cannot pose as the syncer, its namespace label or the tenants' DNS.
        for key in [LABEL_TENANT, LABEL_MANAGED_BY, LABEL_NAMESPACE, CARREL_POD_LABEL.0] {
            assert!(host_label_key(key).contains(".label.carrel.dev/"), "{key}");
            assert_ne!(host_label_key(key), key);
        }
        let long_prefix = format!("{}.example.com", "a.".repeat(118));
        let hashed = host_label_key(&format!("{long_prefix}/name"));
        assert!(hashed.starts_with("hashed-label.carrel.dev/"), "{hashed}");
        let (prefix, name) = hashed.split_once('/').unwrap();
        assert!(carrel_machinery::names::is_dns1123_subdomain(prefix));
        assert_eq!(name.len(), HASH_HEX);
        assert_ne!(hashed, host_label_key(&format!("{long_prefix}/other")));
        let fits = format!("{}.example.com/name", "a.".repeat(110));
        assert!(host_label_key(&fits).split_once('/').unwrap().0.len() <= MAX_LABEL_PREFIX);
        let labels = BTreeMap::from([
            ("app".to_owned(), "web".to_owned()),
            (LABEL_TENANT.to_owned(), "other".to_owned()),
        ]);
        let host = host_pod_labels("t", "ml", &labels);
        assert_eq!(host.get(LABEL_TENANT).map(String::as_str), Some("t"));
        assert_eq!(host.get(LABEL_NAMESPACE).map(String::as_str), Some("ml"));
        assert_eq!(host.get("label.carrel.dev/app").map(String::as_str), Some("web"));
        assert_eq!(
            host.get("carrel.dev.label.carrel.dev/tenant").map(String::as_str),
            Some("other")
        );
        // The isolation policy's name is no tenant object's.
        assert!(!ISOLATION_POLICY.contains(SEPARATOR) && !looks_hashed(ISOLATION_POLICY));
    }

    #[test]
    fn plain_names_that_would_read_as_another_pair_are_hashed() {
        // The namespace `x-b` would make `a-x-x-b`, which reads as pod `a-x` in namespace `b`.
        assert_eq!(host_name("b", "a-x"), "a-x-x-b");
        assert_ne!(host_name("x-b", "a"), host_name("b", "a-x"));
        assert!(looks_hashed(&host_name("x-b", "a")));
        // A plain name ending like a hashed one is hashed, so it cannot be another pair's.
        let long = host_name(&"n".repeat(40), &"p".repeat(30));
        let hex = long.rsplit_once('-').unwrap().1;
        let (ns, name) = (format!("q-{hex}"), "p".to_owned());
        let plain = format!("{name}-x-{ns}");
        assert!(plain.len() <= MAX_NAME);
        assert!(looks_hashed(&plain));
        assert!(looks_hashed(&host_name(&ns, &name)));
        assert_eq!(tenant_of("train-0-x-default"), Some(("default", "train-0")));
        assert_eq!(tenant_of(&long), None);
    }

    mod injective {
        use proptest::prelude::*;

        use super::super::*;
        use super::dns_label;

        /// Pieces that make names collide if anything does: separators, halves of them, hex
        /// digits in the hashed form's shape and plain letters.
        fn piece() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("-x-".to_owned()),
                Just("x-".to_owned()),
                Just("-x".to_owned()),
                Just("x".to_owned()),
                Just("-".to_owned()),
                "[a-z0-9]{1,8}",
                "[0-9a-f]{10}",
                "[0-9a-f]{32}",
            ]
        }

        /// A DNS label or subdomain of at most `max` characters built from pieces.
        fn name(max: usize, dots: bool) -> impl Strategy<Value = String> {
            let pieces = prop::collection::vec(
                prop_oneof![
                    8 => piece(),
                    1 => Just(if dots { ".".to_owned() } else { "-".to_owned() }),
                ],
                1..40,
            );
            pieces.prop_map(move |p| {
                let joined: String = p.concat();
                // A subdomain's dots stand between labels: no two together, none next to a dash.
                let mut s = joined;
                while s.contains("..") || s.contains("-.") || s.contains(".-") {
                    s = s.replace("..", ".").replace("-.", "-").replace(".-", "-");
                }
                s.truncate(max);
                let s = s.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_owned();
                if s.is_empty() {
                    "a".to_owned()
                } else {
                    s
                }
            })
        }

        fn namespace() -> impl Strategy<Value = String> {
            name(63, false)
        }

        fn object() -> impl Strategy<Value = String> {
            name(253, true)
        }

        /// Every pair whose plain name could be `host`: `host` split at each `-x-`.
        fn splits(host: &str) -> Vec<(String, String)> {
            (0..host.len().saturating_sub(2))
                .filter(|&i| &host[i..i + 3] == "-x-")
                .map(|i| (host[i + 3..].to_owned(), host[..i].to_owned()))
                .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
                .collect()
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(1000))]

            #[test]
            fn host_names_fit_and_are_injective(
                ns1 in namespace(), n1 in object(), ns2 in namespace(), n2 in object(),
            ) {
                let h1 = host_name(&ns1, &n1);
                let h2 = host_name(&ns2, &n2);
                prop_assert!(h1.len() <= MAX_NAME, "{h1}");
                prop_assert!(dns_label(&h1), "{h1}");
                prop_assert!(token_secret(&ns1, &n1).len() <= 253);
                if (&ns1, &n1) != (&ns2, &n2) {
                    prop_assert_ne!(&h1, &h2);
                    prop_assert_ne!(token_secret(&ns1, &n1), token_secret(&ns2, &n2));
                }
                // A plain name reads back as its own pair only.
                if let Some((ns, name)) = tenant_of(&h1) {
                    prop_assert_eq!((ns, name), (ns1.as_str(), n1.as_str()));
                }
                // No other pair's plain name is this name: any such pair splits it at a `-x-`.
                for (ns, name) in splits(&h1) {
                    if (&ns, &name) != (&ns1, &n1) {
                        prop_assert_ne!(host_name(&ns, &name), h1.clone(), "{}/{} and {}/{}", ns, name, ns1, n1);
                    }
                }
            }

            #[test]
            fn a_pair_and_its_neighbours_map_apart(ns in namespace(), n in object(), cut in 1usize..64) {
                // Moving characters between the name and the namespace across the separator,
                // and names either side of the 63-character limit.
                let h = host_name(&ns, &n);
                let joined = format!("{n}-x-{ns}");
                for (ns2, n2) in splits(&joined) {
                    if (&ns2, &n2) != (&ns, &n) && ns2.len() <= 63 {
                        prop_assert_ne!(host_name(&ns2, &n2), h.clone());
                    }
                }
                let longer = format!("{n}{}", "a".repeat(cut));
                prop_assert_ne!(host_name(&ns, &longer), h.clone());
                if cut < n.len() {
                    let shorter = n[..n.len() - cut].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
                    if !shorter.is_empty() && shorter != n {
                        prop_assert_ne!(host_name(&ns, shorter), h);
                    }
                }
            }
        }
    }
}
