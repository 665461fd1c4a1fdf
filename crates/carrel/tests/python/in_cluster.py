"""The official client's in-cluster configuration, loaded as a pod's process loads it.

Usage: in_cluster.py POD_DIR EXPECTED_PODS

POD_DIR holds what the pod has mounted at /var/run/secrets/kubernetes.io/serviceaccount
(`token`, `ca.crt`, `namespace`); the environment has the pod's KUBERNETES_SERVICE_HOST and
KUBERNETES_SERVICE_PORT. `load_incluster_config()` reads its files from module constants, which
are pointed at POD_DIR. The pods of the pod's namespace must be EXPECTED_PODS (comma-separated),
and secrets must be forbidden to its service account.
"""

import os
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config import incluster_config

pod_dir, expected = sys.argv[1], sys.argv[2]
incluster_config.SERVICE_TOKEN_FILENAME = os.path.join(pod_dir, "token")
incluster_config.SERVICE_CERT_FILENAME = os.path.join(pod_dir, "ca.crt")
config.load_incluster_config()
with open(os.path.join(pod_dir, "namespace")) as f:
    namespace = f.read().strip()

core = client.CoreV1Api()
names = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace).items)
assert names == sorted(expected.split(",")), names
try:
    core.list_namespaced_secret(namespace)
    raise AssertionError("secrets listed by a service account that may only view")
except ApiException as e:
    assert e.status == 403, e
print("ok")
