//! kube-rs, the Rust client, against a Carrel API server over TLS: typed CRUD, paginated lists,
//! and a kube-runtime watcher (list with limit/continue, then watch with bookmarks).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Config};

use carrel_e2e::TestServer;

async fn client(server: &TestServer) -> Client {
    let kubeconfig = Kubeconfig::read_from(server.kubeconfig()).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(BTreeMap::from([("k".to_string(), value.to_string())])),
        ..Default::default()
    }
}

#[test]
fn kube_rs_crud_pagination_and_watcher() {
    let server = TestServer::start_tls("/tenants/rs");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = client(&server).await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

        let created = cms.create(&PostParams::default(), &configmap("one", "1")).await.unwrap();
        let rv = created.metadata.resource_version.clone().unwrap();
        let err = cms.create(&PostParams::default(), &configmap("one", "1")).await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(ref s) if s.code == 409), "{err:?}");

        let patch = serde_json::json!({"data": {"k": "2"}});
        let patched =
            cms.patch("one", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
        assert_eq!(patched.data.unwrap()["k"], "2");
        assert_ne!(patched.metadata.resource_version.unwrap(), rv);

        for i in 0..7 {
            cms.create(&PostParams::default(), &configmap(&format!("p{i}"), "x")).await.unwrap();
        }
        let mut names = Vec::new();
        let mut params = ListParams::default().limit(3);
        loop {
            let page = cms.list(&params).await.unwrap();
            names.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break,
            }
        }
        assert_eq!(names.len(), 8, "{names:?}");

        // The watcher lists (limit 500 + continue), then watches; it must see the initial state
        // and then a new object.
        let stream = watcher::watcher(cms.clone(), watcher::Config::default().page_size(3));
        let mut stream = std::pin::pin!(stream);
        let mut initial = 0;
        loop {
            match tokio::time::timeout(Duration::from_secs(15), stream.try_next()).await {
                Ok(Ok(Some(Event::InitApply(_)))) => initial += 1,
                Ok(Ok(Some(Event::InitDone))) => break,
                Ok(Ok(Some(_))) => {}
                other => panic!("watcher ended before its initial list: {other:?}"),
            }
        }
        assert_eq!(initial, 8);
        cms.create(&PostParams::default(), &configmap("late", "x")).await.unwrap();
        let seen = tokio::time::timeout(Duration::from_secs(15), async {
            while let Some(event) = stream.next().await {
                if let Ok(Event::Apply(cm)) = event {
                    if cm.metadata.name.as_deref() == Some("late") {
                        return true;
                    }
                }
            }
            false
        })
        .await
        .unwrap_or(false);
        assert!(seen, "the watcher did not deliver the new object");

        cms.delete("late", &DeleteParams::default()).await.unwrap();
        let err = cms.get("late").await.unwrap_err();
        assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");
    });
}
