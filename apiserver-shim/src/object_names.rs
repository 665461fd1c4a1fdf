//! Object names as Kubernetes validates them: the rules kinds' names follow (each kind's strategy
//! says which, [`crate::registry::Strategy::name_rule`]), and the checks only the API server
//! makes. The DNS-1123 and qualified-name checks themselves are
//! `carrel_machinery::names`, re-exported here.

pub use carrel_machinery::names::{
    dns1035_label, dns1123_label, dns1123_subdomain, is_dns1123_subdomain, label_value,
    qualified_name, regex_error, LABEL_MAX, SUBDOMAIN_MAX,
};

/// The rule an object's name must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// A DNS-1123 subdomain: most objects.
    Subdomain,
    /// A DNS-1123 label: namespaces, statefulsets.
    Label,
    /// A DNS-1035 label (a DNS-1123 label that starts with a letter): services.
    Dns1035Label,
    /// Any name usable as a path segment: RBAC objects.
    PathSegment,
}

impl NameRule {
    /// Problems with `name` under this rule, in kube-apiserver's words; empty if valid.
    pub fn check(self, name: &str) -> Vec<String> {
        match self {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::Dns1035Label => dns1035_label(name),
            NameRule::PathSegment => path_segment(name),
        }
    }

    /// Problems with a `generateName` prefix under this rule: the rule's own, with a trailing
    /// dash masked (the random suffix follows it), as kube-apiserver's name functions check a
    /// prefix.
    pub fn check_prefix(self, prefix: &str) -> Vec<String> {
        match self {
            NameRule::PathSegment => ["/", "%"]
                .iter()
                .filter(|bad| prefix.contains(*bad))
                .map(|bad| format!("may not contain '{bad}'"))
                .collect(),
            _ => self.check(&mask_trailing_dash(prefix)),
        }
    }

    /// The longest `generateName` prefix that still leaves room for the random suffix.
    pub fn max_len(self) -> usize {
        match self {
            NameRule::Label | NameRule::Dns1035Label => LABEL_MAX,
            _ => SUBDOMAIN_MAX,
        }
    }
}

/// `maskTrailingDash`: a prefix's trailing dash stands for the suffix to come. (kube-apiserver
/// drops the character before the dash as well.)
fn mask_trailing_dash(prefix: &str) -> String {
    match prefix.strip_suffix('-') {
        Some(rest) if prefix.len() > 1 => {
            let mut keep = rest.len() - 1;
            while !rest.is_char_boundary(keep) {
                keep -= 1;
            }
            format!("{}a", &rest[..keep])
        }
        _ => prefix.to_owned(),
    }
}

/// Errors for a ConfigMap or Secret key, as `validation.IsConfigMapKey` words them.
pub fn config_map_key(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > SUBDOMAIN_MAX {
        errors.push(format!("must be no more than {SUBDOMAIN_MAX} characters"));
    }
    let shape = !value.is_empty()
        && value.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !shape {
        errors.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if value == "." {
        errors.push("must not be '.'".to_owned());
    } else if value == ".." {
        errors.push("must not be '..'".to_owned());
    } else if value.starts_with("..") {
        errors.push("must not start with '..'".to_owned());
    }
    errors
}

/// Errors for a port name (an IANA_SVC_NAME), as `validation.IsValidPortName` words them.
pub fn port_name(port: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if port.len() > 15 {
        errors.push("must be no more than 15 characters".to_owned());
    }
    if port.is_empty()
        || !port.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
    {
        errors.push(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_owned(),
        );
    }
    if !port.bytes().any(|c| c.is_ascii_lowercase()) {
        errors.push("must contain at least one letter (a-z)".to_owned());
    }
    if port.contains("--") {
        errors.push("must not contain consecutive hyphens".to_owned());
    }
    if port.starts_with('-') || port.ends_with('-') {
        errors.push("must not begin or end with a hyphen".to_owned());
    }
    errors
}

/// Errors for an environment variable name under the relaxed rule kube-apiserver 1.33 applies
/// (`RelaxedEnvironmentVariableValidation`).
pub fn env_var_name(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push("environment variable name must be non-empty".to_owned());
    }
    if name.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        errors.push(
            "a valid environment variable name must consist only of printable ASCII characters \
             other than '='"
                .to_owned(),
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
    fn kube_apiserver_name_rules() {
        let rule = |plural: &str| {
            crate::resource::BUILT_IN
                .iter()
                .find(|t| t.plural == plural)
                .unwrap()
                .strategy
                .name_rule()
        };
        assert_eq!(rule("services"), NameRule::Dns1035Label);
        assert_eq!(rule("statefulsets"), NameRule::Label);
        assert!(dns1035_label("web-1").is_empty());
        assert_eq!(
            dns1035_label("1web"),
            vec!["a DNS-1035 label must consist of lower case alphanumeric characters or '-', \
                  start with an alphabetic character, and end with an alphanumeric character (e.g. \
                  'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
                .to_owned()]
        );
        // A generateName prefix may end in a dash.
        assert!(NameRule::Subdomain.check_prefix("web-").is_empty());
        assert!(NameRule::Label.check_prefix("a-").is_empty());
        assert!(!NameRule::Subdomain.check_prefix("Web-").is_empty());
        assert!(!NameRule::Subdomain.check_prefix(&"p".repeat(300)).is_empty());
        assert_eq!(NameRule::PathSegment.check_prefix("a/b"), vec!["may not contain '/'"]);
    }

    #[test]
    fn qualified_names_label_values_and_keys() {
        for ok in ["a", "A.b-c_d", "example.com/Name", "k8s.io/x", &"n".repeat(63)] {
            assert!(qualified_name(ok).is_empty(), "{ok} refused");
        }
        assert_eq!(qualified_name("/x"), vec!["prefix part must be non-empty"]);
        assert_eq!(
            qualified_name(&"n".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
        assert_eq!(qualified_name("x/").len(), 2, "empty, and not matching the regex");
        assert!(qualified_name("a/b/c")[0].starts_with("a qualified name must consist of"));
        assert!(qualified_name("Bad_Prefix/x")[0].starts_with("prefix part a lowercase RFC 1123"));
        assert!(label_value("").is_empty() && label_value("v1.2_x-Y").is_empty());
        assert_eq!(label_value("-x").len(), 1);
        assert_eq!(label_value(&"v".repeat(64)), vec!["must be no more than 63 characters"]);
        assert!(config_map_key("a.b_C-1").is_empty());
        assert_eq!(config_map_key(".").last().map(String::as_str), Some("must not be '.'"));
        assert_eq!(config_map_key("..a"), vec!["must not start with '..'"]);
        assert!(port_name("http-1").is_empty());
        assert_eq!(port_name("8080"), vec!["must contain at least one letter (a-z)"]);
        assert_eq!(
            port_name("a--b-"),
            vec!["must not contain consecutive hyphens", "must not begin or end with a hyphen"]
        );
        assert!(env_var_name("MY VAR.1").is_empty());
        assert_eq!(env_var_name("A=B").len(), 1);
        assert_eq!(
            regex_error("m", "r", &["a", "b"]),
            "m (e.g. 'a',  or 'b', regex used for validation is 'r')"
        );
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
