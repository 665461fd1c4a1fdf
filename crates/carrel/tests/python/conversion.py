"""A custom resource read, listed and watched in both versions of a definition whose webhook
converts them (v1 `spec.color`, v2 `spec.colour`), with the official client.

Usage: conversion.py KUBECONFIG

The tenant holds shirts `red` (written in v1) and `blue` (written in v2) in `default`.
"""

import sys

from kubernetes import client, config, watch

config.load_kube_config(sys.argv[1])
custom = client.CustomObjectsApi()
group, plural, ns = "wear.carrel.dev", "shirts", "default"
fields = {"v1": "color", "v2": "colour"}
colours = {"red": "red", "blue": "blue"}

for version, field in fields.items():
    shirt = custom.get_namespaced_custom_object(group, version, ns, plural, "red")
    assert shirt["apiVersion"] == f"{group}/{version}", shirt
    assert shirt["spec"] == {field: "red"}, shirt
    listed = custom.list_namespaced_custom_object(group, version, ns, plural)
    got = {i["metadata"]["name"]: i["spec"][field] for i in listed["items"]}
    assert got == colours, got
    seen = {}
    stream = watch.Watch().stream(
        custom.list_namespaced_custom_object, group, version, ns, plural, timeout_seconds=5
    )
    for event in stream:
        obj = event["object"]
        assert obj["apiVersion"] == f"{group}/{version}", obj
        seen[obj["metadata"]["name"]] = obj["spec"][field]
        if seen == colours:
            break
    assert seen == colours, seen
print("ok")
