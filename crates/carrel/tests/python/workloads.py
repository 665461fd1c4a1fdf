"""The official Python client's apps and batch usage against a tenant: a Job created, watched
to completion and deleted with its pods; a Deployment created, waited for and deleted.

Usage: workloads.py <kubeconfig>. Exits non-zero with a message on the first thing that fails."""

import sys
import time

from kubernetes import client, config, watch

config.load_kube_config(config_file=sys.argv[1])
batch = client.BatchV1Api()
apps = client.AppsV1Api()
core = client.CoreV1Api()
NS = "default"


def fail(message):
    sys.exit(message)


def until(what, check, seconds=60):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    fail(f"timed out waiting for {what}")


job = client.V1Job(
    metadata=client.V1ObjectMeta(name="py-job"),
    spec=client.V1JobSpec(
        completions=2,
        parallelism=2,
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(annotations={"sim.carrel.dev/run-seconds": "0.2"}),
            spec=client.V1PodSpec(
                restart_policy="Never",
                containers=[client.V1Container(name="c", image="busybox")],
            ),
        ),
    ),
)
created = batch.create_namespaced_job(NS, job)
if created.metadata.uid is None:
    fail("the created Job has no uid")

complete = False
for event in watch.Watch().stream(
    batch.list_namespaced_job, NS, field_selector="metadata.name=py-job", timeout_seconds=60
):
    status = event["object"].status
    conditions = {c.type: c.status for c in (status.conditions or [])}
    if conditions.get("Complete") == "True":
        if status.succeeded != 2:
            fail(f"complete with succeeded={status.succeeded}")
        complete = True
        break
if not complete:
    fail("the Job did not complete within the watch")

selector = f"batch.kubernetes.io/job-name=py-job"
if len(core.list_namespaced_pod(NS, label_selector=selector).items) != 2:
    fail("the Job's two pods are not there")
batch.delete_namespaced_job(
    "py-job", NS, body=client.V1DeleteOptions(propagation_policy="Background")
)
until("the Job's pods collected", lambda: not core.list_namespaced_pod(NS, label_selector=selector).items)

deployment = client.V1Deployment(
    metadata=client.V1ObjectMeta(name="py-web"),
    spec=client.V1DeploymentSpec(
        replicas=2,
        selector=client.V1LabelSelector(match_labels={"app": "py-web"}),
        template=client.V1PodTemplateSpec(
            metadata=client.V1ObjectMeta(labels={"app": "py-web"}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="web", image="nginx")]),
        ),
    ),
)
apps.create_namespaced_deployment(NS, deployment)
until(
    "the Deployment available",
    lambda: (apps.read_namespaced_deployment_status("py-web", NS).status.available_replicas or 0) == 2,
)
apps.delete_namespaced_deployment(
    "py-web", NS, body=client.V1DeleteOptions(propagation_policy="Foreground")
)
until(
    "the Deployment and its pods gone",
    lambda: not apps.list_namespaced_deployment(NS).items
    and not core.list_namespaced_pod(NS, label_selector="app=py-web").items,
)
print("ok")
