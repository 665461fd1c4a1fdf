//! Names as Kubernetes validates them (`k8s.io/apimachinery/pkg/util/validation`): DNS-1123
//! labels and subdomains, DNS-1035 labels, qualified names and label values, each with
//! kube-apiserver's messages.

/// The longest DNS-1123 label.
pub const LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain.
pub const SUBDOMAIN_MAX: usize = 253;

/// `RegexError`: what a value must look like, with examples and the regex used.
pub fn regex_error(msg: &str, regex: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{regex}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{regex}')"));
    out
}

fn alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, whole string, of any length.
fn label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-')
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`, whole string, of any
/// length.
fn subdomain_shape(s: &str) -> bool {
    !s.is_empty() && s.split('.').all(label_shape)
}

/// Whether `s` is a DNS-1123 label (`validation.IsDNS1123Label` finds nothing wrong).
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= LABEL_MAX && label_shape(s)
}

/// Whether `s` is a DNS-1123 subdomain (`validation.IsDNS1123Subdomain` finds nothing wrong).
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= SUBDOMAIN_MAX && subdomain_shape(s)
}

/// Errors for a DNS-1123 label, as `validation.IsDNS1123Label` words them.
pub fn dns1123_label(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > LABEL_MAX {
        errors.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    if !label_shape(name) {
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
    if !subdomain_shape(name) {
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

/// Errors for a DNS-1035 label, as `validation.IsDNS1035Label` words them.
pub fn dns1035_label(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > LABEL_MAX {
        errors.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    let b = name.as_bytes();
    let shape = !b.is_empty()
        && b[0].is_ascii_lowercase()
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-');
    if !shape {
        errors.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start \
             with an alphabetic character, and end with an alphanumeric character",
            "[a-z]([-a-z0-9]*[a-z0-9])?",
            &["my-name", "abc-123"],
        ));
    }
    errors
}

const QUALIFIED_NAME_MAX: usize = 63;
const QUALIFIED_NAME_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and \
                                  must start and end with an alphanumeric character";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: the name part of a qualified name, and a
/// non-empty label value.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Errors for a qualified name (label keys, annotation keys, finalizers), as
/// `validation.IsQualifiedName` words them: an optional DNS subdomain prefix and `/`, then a name
/// of at most 63 characters.
pub fn qualified_name(value: &str) -> Vec<String> {
    let examples = ["MyName", "my.name", "123-abc"];
    let parts: Vec<&str> = value.split('/').collect();
    let mut errors = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_owned());
            } else {
                errors.extend(
                    dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. \
                 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_REGEX, &examples)
            )]
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_owned());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errors.push(format!("name part must be no more than {QUALIFIED_NAME_MAX} characters"));
    }
    if !is_qualified_name_part(name) {
        errors.push(format!(
            "name part {}",
            regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_REGEX, &examples)
        ));
    }
    errors
}

/// Errors for a label value, as `validation.IsValidLabelValue` words them.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_MAX {
        errors.push(format!("must be no more than {LABEL_MAX} characters"));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errors.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains() {
        for ok in ["a", "web-1", "0abc", &"x".repeat(63)] {
            assert!(is_dns1123_label(ok) && dns1123_label(ok).is_empty(), "{ok} refused");
        }
        for bad in ["", "A", "-a", "a-", "a.b", "a_b", &"x".repeat(64)] {
            assert!(!is_dns1123_label(bad) && !dns1123_label(bad).is_empty(), "{bad} accepted");
        }
        for ok in ["a", "a.b.c", "web-1.example.com", &"x".repeat(253)] {
            assert!(is_dns1123_subdomain(ok) && dns1123_subdomain(ok).is_empty(), "{ok} refused");
        }
        for bad in ["", ".", "a..b", ".a", "a.", "a.-b", "Web.com", &"x".repeat(254)] {
            assert!(
                !is_dns1123_subdomain(bad) && !dns1123_subdomain(bad).is_empty(),
                "{bad} accepted"
            );
        }
        assert_eq!(
            dns1123_subdomain(&"x".repeat(254)),
            vec!["must be no more than 253 characters"]
        );
        assert_eq!(dns1123_label("a_b").len(), 1);
        assert!(dns1035_label("web").is_empty() && !dns1035_label("1web").is_empty());
    }

    #[test]
    fn qualified_names_and_label_values() {
        assert!(qualified_name("example.com/My_Name").is_empty());
        assert_eq!(
            qualified_name("Example.com/x"),
            vec![
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case \
                  alphanumeric characters, '-' or '.', and must start and end with an \
                  alphanumeric character (e.g. 'example.com', regex used for validation is \
                  '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ]
        );
        assert!(label_value("").is_empty());
        assert_eq!(label_value("-x").len(), 1);
    }
}
