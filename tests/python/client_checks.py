"""Scenarios run with the official Kubernetes Python client against a Carrel API server.

Usage: client_checks.py SERVER_URL SCENARIO. Exits non-zero (with a traceback) when a check fails.
"""

import os
import sys
import tempfile
import threading
import time

from kubernetes import client, utils, watch


def api_client(url):
    config = client.Configuration()
    config.host = url
    return client.ApiClient(config)


def watch_replays_from_a_resource_version(api):
    core = client.CoreV1Api(api)
    first = core.create_namespaced_config_map(
        "default", {"metadata": {"name": "a"}, "data": {"k": "1"}}
    )
    start = first.metadata.resource_version
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "2"}})
    core.create_namespaced_config_map("default", {"metadata": {"name": "b"}, "data": {}})
    seen = []
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        "default",
        resource_version=start,
        timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:
            w.stop()
    assert seen == [("MODIFIED", "a"), ("ADDED", "b")], seen


def create_from_yaml_takes_every_document(api):
    manifest = """
apiVersion: v1
kind: Namespace
metadata:
  name: team
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: team
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
"""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(manifest)
        path = f.name
    try:
        utils.create_from_yaml(api, path)
    finally:
        os.unlink(path)
    core = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    assert core.read_namespaced_config_map("settings", "team").data == {"mode": "fast"}
    deployment = apps.read_namespaced_deployment("web", "team")
    assert deployment.spec.replicas == 2
    assert deployment.metadata.generation == 1
    assert deployment.spec.template.spec.containers[0].image == "nginx:1.27"


def lists_paginate_and_select(api):
    core = client.CoreV1Api(api)
    for i in range(7):
        labels = {"parity": "even" if i % 2 == 0 else "odd"}
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"cm{i}", "labels": labels}}
        )
    names = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map("default", limit=3, _continue=token)
        pages += 1
        names += [item.metadata.name for item in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"cm{i}" for i in range(7)], names
    assert pages == 3, pages
    even = core.list_namespaced_config_map("default", label_selector="parity=even")
    assert [i.metadata.name for i in even.items] == ["cm0", "cm2", "cm4", "cm6"]


def errors_are_status_objects(api):
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    try:
        core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
        raise AssertionError("a duplicate create succeeded")
    except client.exceptions.ApiException as e:
        assert e.status == 409, e.status
        assert '"reason":"AlreadyExists"' in e.body, e.body
    current = core.read_namespaced_config_map("x", "default")
    stale = current.metadata.resource_version
    core.patch_namespaced_config_map("x", "default", {"data": {"a": "b"}})
    current.metadata.resource_version = stale
    try:
        core.replace_namespaced_config_map("x", "default", current)
        raise AssertionError("a stale update succeeded")
    except client.exceptions.ApiException as e:
        assert e.status == 409, e.status
        assert '"reason":"Conflict"' in e.body, e.body
    assert core.read_namespaced_config_map("x", "default").data == {"a": "b"}


def strategic_merge_patch_of_service_ports(api):
    core = client.CoreV1Api(api)
    core.create_namespaced_service(
        "default",
        {
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"app": "web"},
                "ports": [
                    {"name": "http", "port": 80, "targetPort": 8080},
                    {"name": "https", "port": 443, "targetPort": 8443},
                ],
            },
        },
    )
    # A dict body is sent as a strategic merge patch: ports merge by their port number.
    core.patch_namespaced_service(
        "web", "default", {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}
    )
    ports = {p.port: p for p in core.read_namespaced_service("web", "default").spec.ports}
    assert set(ports) == {80, 443}, ports
    assert ports[80].target_port == 9090, ports[80]
    assert ports[80].name == "http", ports[80]
    assert ports[443].target_port == 8443, ports[443]


def informer_converges_through_relists_and_rewatches(api):
    """An informer as client-go runs one: a paginated LIST, then WATCHes from the list's
    resourceVersion with bookmarks and a short timeout, each new watch resuming from the last
    resourceVersion seen; a label selector makes objects enter and leave its view."""
    core = client.CoreV1Api(api)
    selector = "app=informer"
    labels = {"app": "informer"}
    for i in range(5):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"cm{i}", "labels": labels}, "data": {"i": str(i)}}
        )
    core.create_namespaced_config_map("default", {"metadata": {"name": "outsider"}})

    cache = {}
    events = []
    done = threading.Event()
    errors = []

    def run():
        try:
            token, rv = None, None
            while True:
                page = core.list_namespaced_config_map(
                    "default", label_selector=selector, limit=2, _continue=token
                )
                for item in page.items:
                    cache[item.metadata.name] = item.metadata.resource_version
                rv = rv or page.metadata.resource_version
                token = page.metadata._continue
                if not token:
                    break
            w = watch.Watch()
            while not done.is_set():
                for event in w.stream(
                    core.list_namespaced_config_map,
                    "default",
                    label_selector=selector,
                    resource_version=rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=1,
                ):
                    kind, obj = event["type"], event["object"]
                    events.append(kind)
                    if kind == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    rv = obj.metadata.resource_version
                    if kind == "DELETED":
                        cache.pop(obj.metadata.name, None)
                    else:
                        cache[obj.metadata.name] = obj.metadata.resource_version
        except Exception as e:  # reported by the main thread
            errors.append(e)

    informer = threading.Thread(target=run, daemon=True)
    informer.start()
    time.sleep(0.5)
    for i in range(5, 8):
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": f"cm{i}", "labels": labels}}
        )
    core.patch_namespaced_config_map("cm1", "default", {"data": {"i": "changed"}})
    core.delete_namespaced_config_map("cm2", "default")
    # Leaving the selector is a DELETED for the informer; joining it an ADDED.
    core.patch_namespaced_config_map("cm3", "default", {"metadata": {"labels": {"app": "other"}}})
    core.patch_namespaced_config_map("outsider", "default", {"metadata": {"labels": labels}})
    time.sleep(1.5)  # past a watch timeout: the informer re-watches from where it was
    core.patch_namespaced_config_map("cm0", "default", {"data": {"i": "late"}})

    expected = {
        i.metadata.name: i.metadata.resource_version
        for i in core.list_namespaced_config_map("default", label_selector=selector).items
    }
    deadline = time.time() + 10
    while time.time() < deadline and cache != expected and not errors:
        time.sleep(0.1)
    done.set()
    assert not errors, errors
    assert cache == expected, (cache, expected)
    assert set(expected) == {"cm0", "cm1", "cm4", "cm5", "cm6", "cm7", "outsider"}, expected
    assert "DELETED" in events and "MODIFIED" in events, events


def dynamic_client_on_custom_resources(api):
    from kubernetes import dynamic
    from kubernetes.client.rest import ApiException

    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "gpupools.infra.carrel.dev"},
            "spec": {
                "group": "infra.carrel.dev",
                "scope": "Namespaced",
                "names": {"plural": "gpupools", "singular": "gpupool", "kind": "GPUPool"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "properties": {
                                            "slices": {"type": "integer", "minimum": 0},
                                            "profile": {"type": "string", "default": "1g.18gb"},
                                        },
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }
    )
    crd = ext.read_custom_resource_definition("gpupools.infra.carrel.dev")
    established = [c for c in crd.status.conditions if c.type == "Established"]
    assert established and established[0].status == "True", crd.status

    dyn = dynamic.DynamicClient(api)
    pools = dyn.resources.get(api_version="infra.carrel.dev/v1", kind="GPUPool")
    created = pools.create(
        body={
            "apiVersion": "infra.carrel.dev/v1",
            "kind": "GPUPool",
            "metadata": {"name": "small"},
            "spec": {"slices": 2},
        },
        namespace="default",
    )
    assert created.spec.profile == "1g.18gb", created
    pools.patch(
        name="small",
        namespace="default",
        body={"spec": {"slices": 3}},
        content_type="application/merge-patch+json",
    )
    got = pools.get(name="small", namespace="default")
    assert got.spec.slices == 3 and got.metadata.generation == 2, got
    try:
        pools.create(
            body={"apiVersion": "infra.carrel.dev/v1", "kind": "GPUPool",
                  "metadata": {"name": "bad"}, "spec": {"slices": -1}},
            namespace="default",
        )
        raise AssertionError("a negative slice count was accepted")
    except ApiException as e:
        assert e.status == 422, e
        assert "spec.slices" in e.body, e.body
    listed = pools.get(namespace="default")
    assert [i.metadata.name for i in listed.items] == ["small"], listed
    pools.delete(name="small", namespace="default")
    assert pools.get(namespace="default").items == []


SCENARIOS = {
    f.__name__: f
    for f in [
        watch_replays_from_a_resource_version,
        create_from_yaml_takes_every_document,
        lists_paginate_and_select,
        errors_are_status_objects,
        strategic_merge_patch_of_service_ports,
        informer_converges_through_relists_and_rewatches,
        dynamic_client_on_custom_resources,
    ]
}

if __name__ == "__main__":
    url, scenario = sys.argv[1], sys.argv[2]
    SCENARIOS[scenario](api_client(url))
    print(f"{scenario}: ok")
