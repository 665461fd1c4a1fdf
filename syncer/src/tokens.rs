//! Service-account tokens: a host Secret per service account with a token the tenant API issued,
//! renewed at half its life and deleted when no running pod uses it.

use crate::*;

/// Lifetime of the tokens the syncer asks for.
pub(crate) const TOKEN_SECONDS: i64 = 86_400;

/// The service account (namespace, name) whose token pod `pod` is given; `None` when it opts
/// out.
pub(crate) fn token_key(pod: &Value) -> Option<Key> {
    account_of(
        pod.pointer("/metadata/namespace").and_then(Value::as_str),
        pod.pointer("/spec/serviceAccountName").and_then(Value::as_str),
        pod.pointer("/spec/automountServiceAccountToken").and_then(Value::as_bool),
    )
}

/// [`token_key`] of a typed pod.
pub(crate) fn token_key_of(pod: &Pod) -> Option<Key> {
    let spec = pod.spec.as_ref();
    account_of(
        pod.metadata.namespace.as_deref(),
        spec.and_then(|s| s.service_account_name.as_deref()),
        spec.and_then(|s| s.automount_service_account_token),
    )
}

pub(crate) fn account_of(
    namespace: Option<&str>,
    account: Option<&str>,
    automount: Option<bool>,
) -> Option<Key> {
    if automount == Some(false) {
        return None;
    }
    let account = account.filter(|s| !s.is_empty()).unwrap_or("default");
    Some((namespace.unwrap_or_default().to_owned(), account.to_owned()))
}

impl Syncer {
    /// The host Secret with a token the tenant API issued for the pod's service account, its CA
    /// and namespace, shared by the account's pods and renewed when half its life is gone;
    /// `None` when the pod opts out of a token or the account does not exist.
    pub(crate) async fn token_secret(&self, pod: &Value) -> Result<Option<String>, SyncError> {
        let Some((namespace, account)) = token_key(pod) else {
            return Ok(None);
        };
        let secret_name = host_names::token_secret(&namespace, &account);
        let key = (namespace, account);
        let fresh = chrono::Utc::now() + chrono::Duration::seconds(TOKEN_SECONDS / 2);
        if self.inner.tokens.lock().get(&key).is_some_and(|e| *e > fresh) {
            return Ok(Some(secret_name));
        }
        Ok(self.write_token(&key.0, &key.1).await?.then_some(secret_name))
    }

    /// Ask the tenant API for a new token of service account `namespace/account` and write it
    /// to the account's host Secret; false when the account does not exist.
    pub(crate) async fn write_token(
        &self,
        namespace: &str,
        account: &str,
    ) -> Result<bool, SyncError> {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.inner.tenant_client.clone(), namespace);
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        });
        let answer: Value = match accounts
            .create_subresource("token", account, &PostParams::default(), &request)
            .await
        {
            Ok(a) => a,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                // No such service account (or no token service): the pod runs without a token.
                tracing::debug!(tenant = %self.inner.tenant, %account, "no token for the pod: {}", e.message);
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        };
        let token = answer.pointer("/status/token").and_then(Value::as_str).unwrap_or_default();
        let expires = answer
            .pointer("/status/expirationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_else(|| chrono::Utc::now() + chrono::Duration::seconds(TOKEN_SECONDS));
        let mut data = json!({"token": token, "namespace": namespace});
        if let Some(ca) = &self.inner.tenant_ca_pem {
            data["ca.crt"] = json!(ca);
        }
        let secret = json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": host_names::token_secret(namespace, account),
                "namespace": self.inner.host_namespace,
                "labels": host_names::host_labels(&self.inner.tenant),
                "annotations": {
                    host_names::ANNOTATION_NAMESPACE: namespace,
                    host_names::ANNOTATION_SERVICE_ACCOUNT: account,
                    host_names::ANNOTATION_TOKEN_EXPIRES: expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                },
            },
            "type": "Opaque",
            "stringData": data,
        });
        self.put_host::<Secret>(secret).await?;
        let key = (namespace.to_owned(), account.to_owned());
        self.inner.tokens.lock().insert(key, expires);
        Ok(true)
    }

    /// Renew the tokens of host token Secrets that running pods use once half their life is
    /// gone, as the kubelet refreshes a projected token, and delete those no pod uses any more.
    /// What the Secrets record (their expiry annotation) decides, so a restarted syncer renews
    /// only what is due.
    pub(crate) async fn tend_tokens(&self) -> Result<(), SyncError> {
        let Some(secrets) = self.inner.host_secrets.get() else { return Ok(()) };
        let used: HashSet<Key> = self
            .inner
            .tenant_pods
            .state()
            .iter()
            .filter(|p| !finished(p))
            .filter_map(|p| token_key_of(p))
            .collect();
        let due = chrono::Utc::now() + chrono::Duration::seconds(TOKEN_SECONDS / 2);
        let api: Api<Secret> =
            Api::namespaced(self.inner.host_client.clone(), &self.inner.host_namespace);
        for secret in secrets.state() {
            let Some(a) = secret.metadata.annotations.as_ref() else { continue };
            let (Some(namespace), Some(account)) = (
                a.get(host_names::ANNOTATION_NAMESPACE),
                a.get(host_names::ANNOTATION_SERVICE_ACCOUNT),
            ) else {
                continue;
            };
            let key = (namespace.clone(), account.clone());
            if !used.contains(&key) {
                let name = host_names::token_secret(namespace, account);
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
                self.inner.tokens.lock().remove(&key);
                continue;
            }
            let expires = a
                .get(host_names::ANNOTATION_TOKEN_EXPIRES)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc));
            if expires.is_none_or(|t| t < due) {
                self.write_token(namespace, account).await?;
            }
        }
        Ok(())
    }
}
