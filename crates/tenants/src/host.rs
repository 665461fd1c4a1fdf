//! The host API as the manager uses it: JSON objects read and written through a `kube::Client`,
//! so that what the manager writes is exactly what it read, changed where it means to (it keeps
//! fields it does not know of, as a typed round trip might not). Every write names the
//! manager's field manager.

use kube::api::{DeleteParams, GetParams, ListParams, PostParams, Preconditions};
use kube::core::Request;
use serde_json::Value;

use crate::manager::MANAGER;

/// The tenants' collection path.
pub const TENANTS: &str = "/apis/carrel.dev/v1alpha1/tenants";
/// The host namespaces' collection path.
pub const NAMESPACES: &str = "/api/v1/namespaces";

/// The Secrets' collection path in `namespace`.
pub fn secrets(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/secrets")
}

/// The Leases' collection path in `namespace`.
pub fn leases(namespace: &str) -> String {
    format!("/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases")
}

/// The HTTP status code of a refusal by the host API; `None` for any other error.
pub fn code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A client of the host API.
#[derive(Clone)]
pub struct Host {
    client: kube::Client,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

fn writes() -> PostParams {
    PostParams { field_manager: Some(MANAGER.to_owned()), ..PostParams::default() }
}

fn body(object: &Value) -> Result<Vec<u8>, kube::Error> {
    serde_json::to_vec(object).map_err(kube::Error::SerdeError)
}

impl Host {
    /// The host API through `client`.
    pub fn new(client: kube::Client) -> Host {
        Host { client }
    }

    /// The client.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// GET `name` in the collection at `path`.
    pub async fn get(&self, path: &str, name: &str) -> Result<Value, kube::Error> {
        let request = Request::new(path)
            .get(name, &GetParams::default())
            .map_err(kube::Error::BuildRequest)?;
        self.client.request(request).await
    }

    /// GET, `None` when there is no such object.
    pub async fn get_opt(&self, path: &str, name: &str) -> Result<Option<Value>, kube::Error> {
        match self.get(path, name).await {
            Ok(object) => Ok(Some(object)),
            Err(e) if code(&e) == Some(404) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The items of the collection at `path`, those matching `labels` when given.
    pub async fn list(&self, path: &str, labels: Option<&str>) -> Result<Vec<Value>, kube::Error> {
        let mut params = ListParams::default();
        if let Some(labels) = labels {
            params = params.labels(labels);
        }
        let request = Request::new(path).list(&params).map_err(kube::Error::BuildRequest)?;
        let mut list: Value = self.client.request(request).await?;
        Ok(match list["items"].take() {
            Value::Array(items) => items,
            _ => Vec::new(),
        })
    }

    /// POST `object` to the collection at `path`.
    pub async fn create(&self, path: &str, object: &Value) -> Result<Value, kube::Error> {
        let request = Request::new(path)
            .create(&writes(), body(object)?)
            .map_err(kube::Error::BuildRequest)?;
        self.client.request(request).await
    }

    /// PUT `object` as `name`.
    pub async fn replace(
        &self,
        path: &str,
        name: &str,
        object: &Value,
    ) -> Result<Value, kube::Error> {
        let request = Request::new(path)
            .replace(name, &writes(), body(object)?)
            .map_err(kube::Error::BuildRequest)?;
        self.client.request(request).await
    }

    /// PUT `object` as `name`'s status subresource.
    pub async fn replace_status(
        &self,
        path: &str,
        name: &str,
        object: &Value,
    ) -> Result<Value, kube::Error> {
        let request = Request::new(path)
            .replace_subresource("status", name, &writes(), body(object)?)
            .map_err(kube::Error::BuildRequest)?;
        self.client.request(request).await
    }

    /// DELETE `name`; only the object with `uid`, when given.
    pub async fn delete(
        &self,
        path: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(), kube::Error> {
        let params = DeleteParams {
            preconditions: uid
                .map(|uid| Preconditions { uid: Some(uid.to_owned()), resource_version: None }),
            ..DeleteParams::default()
        };
        let request =
            Request::new(path).delete(name, &params).map_err(kube::Error::BuildRequest)?;
        let _: Value = self.client.request(request).await?;
        Ok(())
    }
}
