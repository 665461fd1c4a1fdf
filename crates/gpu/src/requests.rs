//! The GPU resources a pod asks for, read from its JSON as Kubernetes stores it. Pure code.

use std::collections::BTreeMap;

use serde_json::Value;

/// Why a `PROFILE=COUNT` quota does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    /// A pair without `=`.
    #[error("{0:?}: expected PROFILE=COUNT, such as 1g.18gb=2")]
    NotAPair(String),
    /// A count that is not a non-negative integer.
    #[error("{0:?}: the count must be a non-negative integer")]
    BadCount(String),
    /// A profile the catalogue does not know.
    #[error(
        "{pair:?}: {profile} is not a MIG profile; known profiles: {}",
        crate::known_profile_names().join(", ")
    )]
    UnknownProfile {
        /// The pair.
        pair: String,
        /// The profile as written.
        profile: String,
    },
    /// A profile given more than once.
    #[error("{0} is given twice")]
    Twice(String),
}

/// Why a pod's GPU resources cannot be read.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// A `nvidia.com/mig-…` resource the catalogue does not know.
    #[error(
        "{0} is not a MIG profile this fleet knows; known: {known}",
        known = crate::known_profile_names().join(", ")
    )]
    UnknownProfile(String),
    /// A count that is not a whole number.
    #[error("{resource}: {value} is not a whole number of devices")]
    NotWhole {
        /// The resource.
        resource: String,
        /// The count as the pod gives it.
        value: Value,
    },
}

/// `PROFILE=COUNT` pairs (`1g.18gb=2`, `mig-1g.18gb=2`, `nvidia.com/mig-1g.18gb=2`) as a quota
/// by canonical profile name; the error names the pair and what is wrong with it.
pub fn parse_quota<S: AsRef<str>>(pairs: &[S]) -> Result<BTreeMap<String, i64>, QuotaError> {
    let mut quota = BTreeMap::new();
    for pair in pairs {
        let pair = pair.as_ref();
        let Some((profile, count)) = pair.split_once('=') else {
            return Err(QuotaError::NotAPair(pair.to_owned()));
        };
        let count = count
            .parse::<i64>()
            .ok()
            .filter(|c| *c >= 0)
            .ok_or_else(|| QuotaError::BadCount(pair.to_owned()))?;
        let Some(canonical) = crate::canonical_profile_name(profile) else {
            return Err(QuotaError::UnknownProfile {
                pair: pair.to_owned(),
                profile: profile.to_owned(),
            });
        };
        if quota.insert(canonical.clone(), count).is_some() {
            return Err(QuotaError::Twice(canonical));
        }
    }
    Ok(quota)
}

/// The resource a whole GPU is asked for with (a `7g` slice in Carrel).
pub const WHOLE_GPU: &str = "nvidia.com/gpu";
const MIG_PREFIX: &str = "nvidia.com/mig-";

/// The GPU resources a pod asks for, by resource name (`nvidia.com/mig-1g.18gb`,
/// `nvidia.com/gpu`): its effective request as Kubernetes counts it, the larger of (regular
/// containers + sidecars) and, over the init containers, (each one + the sidecars started before
/// it). Limits stand for requests (extended resources
/// cannot be overcommitted). An unknown MIG profile or a count that is not a whole number is an
/// error naming it.
pub fn gpu_requests(pod: &Value) -> Result<BTreeMap<String, i64>, RequestError> {
    let of = |c: &Value| -> Result<BTreeMap<String, i64>, RequestError> {
        let mut out = BTreeMap::new();
        for field in ["limits", "requests"] {
            for (resource, value) in c
                .pointer(&format!("/resources/{field}"))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if resource != WHOLE_GPU && !resource.starts_with(MIG_PREFIX) {
                    continue;
                }
                let key = canonical_resource(resource)?;
                let n = whole_number(value).ok_or_else(|| RequestError::NotWhole {
                    resource: resource.clone(),
                    value: value.clone(),
                })?;
                out.entry(key).or_insert(n);
            }
        }
        Ok(out)
    };
    let spec = &pod["spec"];
    // Kubernetes' effective request (`AggregateContainerRequests`): regular containers and
    // sidecars (restartable init containers) run together; an init container runs beside the
    // sidecars started before it.
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for (k, n) in of(c)? {
            *sum.entry(k).or_default() += n;
        }
    }
    let mut sidecars: BTreeMap<String, i64> = BTreeMap::new();
    let mut init_peak: BTreeMap<String, i64> = BTreeMap::new();
    for c in spec["initContainers"].as_array().into_iter().flatten() {
        let own = of(c)?;
        let running = if c["restartPolicy"] == "Always" {
            for (k, n) in own {
                *sum.entry(k.clone()).or_default() += n;
                *sidecars.entry(k).or_default() += n;
            }
            sidecars.clone()
        } else {
            let mut running = sidecars.clone();
            for (k, n) in own {
                *running.entry(k).or_default() += n;
            }
            running
        };
        for (k, n) in running {
            let e = init_peak.entry(k).or_default();
            *e = (*e).max(n);
        }
    }
    for (k, n) in init_peak {
        let e = sum.entry(k).or_default();
        *e = (*e).max(n);
    }
    sum.retain(|_, n| *n > 0);
    Ok(sum)
}

/// `nvidia.com/mig-1g.18gb.me` → `nvidia.com/mig-1g.18gb.me` checked against the catalogue;
/// `nvidia.com/gpu` as is.
fn canonical_resource(resource: &str) -> Result<String, RequestError> {
    if resource == WHOLE_GPU {
        return Ok(resource.to_owned());
    }
    match crate::canonical_profile_name(resource) {
        Some(profile) => Ok(crate::resource_name(&profile)),
        None => Err(RequestError::UnknownProfile(resource.to_owned())),
    }
}

fn whole_number(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse::<i64>().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gpu_pod(limits: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]}})
    }

    #[test]
    fn requests_are_canonical_and_effective() {
        let p = json!({"spec": {
        "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/mig-1g.18gb": "3"}}}],
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.18gb": 1, "cpu": "1"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/mig-1g.18gb": "1", "nvidia.com/gpu": "1"}}},
        ]}});
        let r = gpu_requests(&p).expect("valid");
        assert_eq!(
            r,
            BTreeMap::from([("nvidia.com/gpu".into(), 1), ("nvidia.com/mig-1g.18gb".into(), 3)])
        );
        let bad = gpu_pod(json!({"nvidia.com/mig-9g.1gb": 1}));
        assert!(gpu_requests(&bad).expect_err("unknown").to_string().contains("known: "));
        let half = gpu_pod(json!({"nvidia.com/mig-1g.18gb": "500m"}));
        assert!(gpu_requests(&half).expect_err("fraction").to_string().contains("whole number"));
    }

    #[test]
    fn sidecars_count_as_kubernetes_counts_them() {
        const R: &str = "nvidia.com/mig-1g.18gb";
        let init = |n: i64| json!({"name": "i", "resources": {"limits": {R: n}}});
        let sidecar = |n: i64| json!({"name": "s", "restartPolicy": "Always", "resources": {"limits": {R: n}}});
        let main = |n: i64| json!({"name": "m", "resources": {"limits": {R: n}}});
        // (init containers in order, regular containers, effective request)
        let table: Vec<(Vec<Value>, Vec<Value>, i64)> = vec![
            (vec![], vec![main(1), main(2)], 3),
            (vec![init(5)], vec![main(1)], 5),
            (vec![init(1)], vec![main(2)], 2),
            // A sidecar runs beside the regular containers.
            (vec![sidecar(1)], vec![main(1)], 2),
            (vec![sidecar(2), sidecar(1)], vec![main(1)], 4),
            // An init container after a sidecar runs beside it…
            (vec![sidecar(2), init(3)], vec![main(1)], 5),
            // …one before it does not.
            (vec![init(3), sidecar(2)], vec![main(1)], 3),
            (vec![init(4), sidecar(1), init(3), sidecar(1)], vec![main(1)], 4),
            (vec![sidecar(1), init(1), sidecar(1), init(3)], vec![], 5),
            (vec![sidecar(3)], vec![], 3),
        ];
        for (i, (inits, mains, want)) in table.into_iter().enumerate() {
            let p = json!({"spec": {"initContainers": inits, "containers": mains}});
            let got = gpu_requests(&p).expect("valid");
            assert_eq!(got.get(R).copied().unwrap_or(0), want, "row {i}: {p}");
        }
    }
}
