"""The official Python client's pod streams against a tenant: `kubernetes.stream` exec with
standard output, error and input and the exit code on the error channel; port forwarding to a
port the pod declares answers HTTP with the pod's name, and a port it does not declare reports
an error.

Usage: streams.py <kubeconfig> <pod>. The pod runs in `default` and declares port 8888.
Exits non-zero with a message on the first thing that fails."""

import sys

from kubernetes import client, config
from kubernetes.stream import portforward, stream

config.load_kube_config(config_file=sys.argv[1])
POD = sys.argv[2]
core = client.CoreV1Api()


def fail(message):
    sys.exit(message)


# Standard output, as one string.
out = stream(core.connect_get_namespaced_pod_exec, POD, "default",
             command=["sh", "-c", "echo out; echo err >&2"],
             stdout=True, stderr=False, stdin=False, tty=False)
if "out" not in out:
    fail(f"exec: {out!r}")

# The streams apart, standard input in, and the exit code.
ws = stream(core.connect_get_namespaced_pod_exec, POD, "default",
            command=["sh", "-c", "printenv GREETING; exit 5"],
            stdout=True, stderr=True, stdin=False, tty=False, _preload_content=False)
ws.run_forever(timeout=20)
if ws.read_stdout().strip() != "hello from the pod":
    fail("printenv: wrong output")
code = ws.returncode
if code != 5:
    fail(f"exit code {code!r}, want 5")

ws = stream(core.connect_get_namespaced_pod_exec, POD, "default", command=["cat"],
            stdout=True, stderr=True, stdin=True, tty=False, _preload_content=False)
ws.write_stdin("typed in\n")
line = ""
for _ in range(100):
    ws.update(timeout=0.2)
    line += ws.read_stdout() if ws.peek_stdout() else ""
    if "typed in" in line:
        break
ws.close()
if "typed in" not in line:
    fail(f"cat echoed {line!r}")

# A declared port answers with the pod's name.
pf = portforward(core.connect_get_namespaced_pod_portforward, POD, "default", ports="8888")
sock = pf.socket(8888)
sock.setblocking(True)
sock.sendall(b"GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n")
answer = b""
while True:
    chunk = sock.recv(4096)
    if not chunk:
        break
    answer += chunk
    if answer.endswith(POD.encode() + b"\n"):
        break
sock.close()
if not answer.startswith(b"HTTP/1.1 200") or not answer.endswith(POD.encode() + b"\n"):
    fail(f"port-forward answered {answer!r}")
pf.close()

# A port nobody listens on: the error channel says so.
pf = portforward(core.connect_get_namespaced_pod_portforward, POD, "default", ports="9999")
sock = pf.socket(9999)
sock.setblocking(True)
sock.recv(1)
error = pf.error(9999)
pf.close()
if not error or "connection refused" not in error:
    fail(f"port 9999: error {error!r}")

print("ok")
