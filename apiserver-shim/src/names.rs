//! Object names as Kubernetes validates them.

/// The longest DNS-1123 label.
pub const LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain.
pub const SUBDOMAIN_MAX: usize = 253;

/// The rule an object's name must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain: most objects.
    Subdomain,
    /// A DNS-1123 label: namespaces, services.
    Label,
    /// Any name usable as a path segment: RBAC objects.
    PathSegment,
}

impl NameRule {
    /// The rule for a resource.
    pub fn for_resource(group: &str, plural: &str) -> NameRule {
        match (group, plural) {
            ("", "namespaces") | ("", "services") => NameRule::Label,
            ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
            _ => NameRule::Subdomain,
        }
    }

    /// Problems with `name` under this rule, in kube-apiserver's words; empty if valid.
    pub fn check(self, name: &str) -> Vec<String> {
        match self {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::PathSegment => path_segment(name),
        }
    }

    /// The longest `generateName` prefix that still leaves room for the random suffix.
    pub fn max_len(self) -> usize {
        match self {
            NameRule::Label => LABEL_MAX,
            _ => SUBDOMAIN_MAX,
        }
    }
}

fn alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= LABEL_MAX
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-')
}

/// Errors for a DNS-1123 label, as `validation.IsDNS1123Label` words them.
pub fn dns1123_label(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > LABEL_MAX {
        errors.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    let b = name.as_bytes();
    let shape = !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-');
    if !shape {
        errors.push(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
             and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
             regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                .into(),
        );
    }
    errors
}

/// Errors for a DNS-1123 subdomain, as `validation.IsDNS1123Subdomain` words them.
pub fn dns1123_subdomain(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > SUBDOMAIN_MAX {
        errors.push(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    let shape = !name.is_empty()
        && name.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && alnum(b[0])
                && alnum(b[b.len() - 1])
                && b.iter().all(|&c| alnum(c) || c == b'-')
        });
    if !shape {
        errors.push(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character (e.g. \
             'example.com', regex used for validation is \
             '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                .into(),
        );
    }
    errors
}

/// Errors for a name used as a path segment.
pub fn path_segment(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name == "." || name == ".." {
        errors.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errors.push(format!("may not contain '{bad}'"));
        }
    }
    errors
}

/// Whether `s` is a valid namespace name (a DNS-1123 label).
pub fn is_namespace_name(s: &str) -> bool {
    is_label(s)
}

/// The five random characters `generateName` appends, from Kubernetes' alphabet (no vowels, no
/// look-alike digits).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5].iter().map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char).collect()
}

/// The name for a `generateName` prefix: truncated so the result fits, plus a random suffix.
pub fn generate(prefix: &str, rule: NameRule) -> String {
    let keep = prefix.len().min(rule.max_len() - 5);
    let mut cut = keep;
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{}", &prefix[..cut], random_suffix())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains_and_labels() {
        for ok in ["a", "web-1", "a.b.c", "0abc", &"x".repeat(253)] {
            assert!(dns1123_subdomain(ok).is_empty(), "{ok} refused");
        }
        for bad in ["", "A", "-a", "a-", "a..b", "a_b", ".a", &"x".repeat(254)] {
            assert!(!dns1123_subdomain(bad).is_empty(), "{bad} accepted");
        }
        assert!(dns1123_label("kube-system").is_empty());
        for bad in ["a.b", "", &"x".repeat(64), "Default"] {
            assert!(!dns1123_label(bad).is_empty(), "{bad} accepted");
        }
        assert!(path_segment("system:masters").is_empty());
        assert!(!path_segment("a/b").is_empty());
        assert!(!path_segment("..").is_empty());
    }

    #[test]
    fn generated_names_fit_their_rule() {
        let long = "p".repeat(300);
        let name = generate(&long, NameRule::Subdomain);
        assert_eq!(name.len(), 253);
        assert!(dns1123_subdomain(&name).is_empty());
        let name = generate("web-", NameRule::Label);
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        assert!(dns1123_label(&name).is_empty());
    }
}
