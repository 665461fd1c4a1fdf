"""The official Python client's core usage of Services against a tenant: a Service created gets a
cluster IP of the Service network; a pod it selects shows up ready in its Endpoints and in its
EndpointSlice (discovery.k8s.io/v1), with the named target port resolved; an address already
taken is refused with kube-apiserver's 422; a NodePort Service gets a port of the range; deleting
the Service frees its address for another.

Usage: services.py <kubeconfig>. Exits non-zero with a message on the first thing that fails."""

import ipaddress
import sys
import time

from kubernetes import client, config
from kubernetes.client.rest import ApiException

config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
discovery = client.DiscoveryV1Api()
NS = "default"
NETWORK = ipaddress.ip_network("10.96.0.0/12")


def fail(message):
    sys.exit(message)


def until(what, check, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    fail(f"timed out waiting for {what}")


def service(name, **spec):
    return client.V1Service(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ServiceSpec(
            selector={"app": "api"},
            ports=[client.V1ServicePort(name="http", port=80, target_port="web")],
            **spec,
        ),
    )


created = core.create_namespaced_service(NS, service("api"))
ip = created.spec.cluster_ip
if ipaddress.ip_address(ip) not in NETWORK:
    fail(f"cluster IP {ip} is not in {NETWORK}")
if created.spec.cluster_ips != [ip] or created.spec.ip_families != ["IPv4"]:
    fail(f"single-stack fields: {created.spec.cluster_ips} {created.spec.ip_families}")

pod = client.V1Pod(
    metadata=client.V1ObjectMeta(name="api-0", labels={"app": "api"}),
    spec=client.V1PodSpec(
        containers=[
            client.V1Container(
                name="c",
                image="nginx",
                ports=[client.V1ContainerPort(name="web", container_port=8080)],
            )
        ]
    ),
)
core.create_namespaced_pod(NS, pod)
pod_ip = until("the pod's IP", lambda: core.read_namespaced_pod("api-0", NS).status.pod_ip)


def ready_in_endpoints():
    endpoints = core.read_namespaced_endpoints("api", NS)
    for subset in endpoints.subsets or []:
        ips = [a.ip for a in subset.addresses or []]
        ports = [p.port for p in subset.ports or []]
        if ips == [pod_ip] and ports == [8080]:
            return True
    return False


def ready_in_slice():
    slices = discovery.list_namespaced_endpoint_slice(
        NS, label_selector="kubernetes.io/service-name=api"
    ).items
    for s in slices:
        ready = [
            e.addresses[0]
            for e in s.endpoints or []
            if e.conditions and e.conditions.ready
        ]
        if ready == [pod_ip] and [p.port for p in s.ports or []] == [8080]:
            return s
    return None


def not_found(read):
    try:
        read()
    except ApiException as e:
        return e.status == 404
    return False


until("the pod ready in the Service's Endpoints", ready_in_endpoints)
found = until("the pod ready in the Service's EndpointSlice", ready_in_slice)
if found.address_type != "IPv4":
    fail(f"address type {found.address_type}")

try:
    core.create_namespaced_service(NS, service("again", cluster_ip=ip))
    fail("a taken cluster IP was given again")
except ApiException as e:
    if e.status != 422 or "provided IP is already allocated" not in e.body:
        fail(f"a taken cluster IP: {e.status} {e.body}")

node_port = core.create_namespaced_service(NS, service("np", type="NodePort"))
port = node_port.spec.ports[0].node_port
if not 30000 <= port <= 32767:
    fail(f"node port {port} is not in 30000-32767")

core.delete_namespaced_service("api", NS)
until("the Service gone", lambda: not_found(lambda: core.read_namespaced_service("api", NS)))
reused = core.create_namespaced_service(NS, service("reuse", cluster_ip=ip))
if reused.spec.cluster_ip != ip:
    fail(f"a freed cluster IP: {reused.spec.cluster_ip}")
print("ok")
