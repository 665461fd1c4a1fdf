"""The official Python client reads a tenant's resource metrics as metrics-server's: the
`metrics.k8s.io/v1beta1` pods of `default` through `CustomObjectsApi`, a list of `PodMetrics` with
each pod's containers and their usage, one of them read by name, and the nodes its pods run on.

Usage: top.py <kubeconfig> <pod> <cpu> <memory>: the pod runs in `default`, and each of its
containers uses <cpu> and <memory> as the API writes them. Exits non-zero with a message on the
first thing that fails."""

import sys

from kubernetes import client, config

config.load_kube_config(config_file=sys.argv[1])
POD, CPU, MEMORY = sys.argv[2], sys.argv[3], sys.argv[4]
custom = client.CustomObjectsApi()


def fail(message):
    sys.exit(message)


listed = custom.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", "default", "pods")
if listed.get("kind") != "PodMetricsList" or listed.get("apiVersion") != "metrics.k8s.io/v1beta1":
    fail(f"list: {listed!r}")
items = {item["metadata"]["name"]: item for item in listed["items"]}
if POD not in items:
    fail(f"{POD} is not listed: {sorted(items)}")
for item in items.values():
    if item["metadata"]["namespace"] != "default":
        fail(f"another namespace's pod: {item!r}")
    if not item["window"].endswith("s") or not item["timestamp"]:
        fail(f"no window or timestamp: {item!r}")
usage = [c["usage"] for c in items[POD]["containers"]]
if not usage or any(u != {"cpu": CPU, "memory": MEMORY} for u in usage):
    fail(f"{POD} uses {usage!r}, want {CPU} and {MEMORY}")

one = custom.get_namespaced_custom_object("metrics.k8s.io", "v1beta1", "default", "pods", POD)
if one.get("kind") != "PodMetrics" or one["containers"] != items[POD]["containers"]:
    fail(f"get: {one!r}")

nodes = custom.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
if nodes.get("kind") != "NodeMetricsList" or not nodes["items"]:
    fail(f"nodes: {nodes!r}")

print("ok")
