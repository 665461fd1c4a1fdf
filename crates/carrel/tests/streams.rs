//! A pod's streams through the tenant's own API, end to end: `carrel up` with a simulated GPU
//! node, real kubectl (WebSocket, `v5.channel.k8s.io`) and the official Python client exec'ing
//! into and forwarding ports of tenant pods, carried to the host pods and played by the
//! simulated kubelet; and what is refused, in kube-apiserver's words.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use carrel_e2e::{fails, kubectl_path, ok};
use common::{apply, create, eventually, kube_client, kubectls, python_args, wait_running, Up};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

const TRAIN: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: train\nspec:\n  containers:\n  - name: main\n    image: cuda\n    env:\n    - name: GREETING\n      value: hello from the pod\n    ports:\n    - containerPort: 8888\n    resources:\n      limits:\n        nvidia.com/mig-1g.18gb: 1\n";

/// Run kubectl `binary` with `input` on its standard input.
fn with_input(up: &Up, binary: &Path, kubeconfig: &Path, args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", up.home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    child.stdin.take().expect("stdin").write_all(input).expect("write stdin");
    child.wait_with_output().expect("kubectl output")
}

/// Run kubectl `binary` on a pseudo-terminal of 40 rows and 100 columns (util-linux `script`),
/// as a user at a terminal runs it: what the terminal shows, and kubectl's exit code.
fn on_terminal(up: &Up, binary: &Path, kubeconfig: &Path, args: &[&str]) -> (String, Option<i32>) {
    let quoted: Vec<String> = [binary.to_string_lossy().as_ref(), "--kubeconfig"]
        .into_iter()
        .chain([kubeconfig.to_string_lossy().as_ref()])
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let line = format!("stty rows 40 cols 100; {}", quoted.join(" "));
    let mut child = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .env("HOME", up.home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run script");
    // Nobody types, and nobody ends the input either (`script` would send the terminal's EOF).
    let typing = child.stdin.take();
    let mut shown = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut shown)
        .expect("the terminal's output");
    let status = child.wait().expect("script ends");
    drop(typing);
    (shown, status.code())
}

/// `kubectl port-forward pod/<pod> :<port>` running, and the local port it listens on.
fn port_forward(
    up: &Up,
    kubectl: &Path,
    kubeconfig: &Path,
    pod: &str,
    port: u16,
) -> (std::process::Child, u16) {
    use std::io::BufRead;
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "port-forward",
            &format!("pod/{pod}"),
            &format!(":{port}"),
            "--address",
            "127.0.0.1",
        ])
        .env("HOME", up.home.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run kubectl port-forward");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    // "Forwarding from 127.0.0.1:41234 -> 8888"
    let line = lines.next().expect("a line").expect("readable");
    let local = line
        .strip_prefix("Forwarding from 127.0.0.1:")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("port-forward said {line:?}"));
    // The rest of what it says is read away, so that it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, local)
}

/// The body of `GET /` on a local port, or what went wrong.
fn http_get(port: u16) -> Result<String, String> {
    use std::io::Read;
    let mut socket =
        std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    socket.write_all(b"GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).map_err(|e| format!("{e}; read so far: {answer:?}"))?;
    if !answer.starts_with("HTTP/1.1 200") {
        return Err(answer);
    }
    Ok(answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
}

/// The MIG devices `carrel gpu map` shows held, as (tenant, pod, uuid).
fn held(up: &Up) -> Vec<(String, String, String)> {
    let map: Value = serde_json::from_str(&ok(up.carrel(&["gpu", "map", "-o", "json"]))).unwrap();
    let mut out = Vec::new();
    for node in map["nodes"].as_array().expect("nodes") {
        for gpu in node["gpus"].as_array().expect("gpus") {
            for i in gpu["instances"].as_array().expect("instances") {
                if let Some(tenant) = i["tenant"].as_str() {
                    let pod = i["pod"].as_str().unwrap_or_default().to_owned();
                    out.push((
                        tenant.to_owned(),
                        pod,
                        i["uuid"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn kubectl_and_the_python_client_exec_and_forward_ports_into_their_own_pods_only() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let a = create(&up, "team-a", &["--gpu", "1g.18gb=1"]);
    let b = create(&up, "team-b", &["--gpu", "1g.18gb=1"]);
    apply(&up, &a, "train", TRAIN);
    apply(&up, &b, "other", &TRAIN.replace("name: train", "name: other"));
    wait_running(&up, &a, "train");
    wait_running(&up, &b, "other");
    let held = held(&up);
    let mine: Vec<&str> =
        held.iter().filter(|h| h.0 == "team-a" && h.1 == "train").map(|h| h.2.as_str()).collect();
    let theirs: Vec<&str> = held.iter().filter(|h| h.0 == "team-b").map(|h| h.2.as_str()).collect();
    assert_eq!((mine.len(), theirs.len()), (1, 1), "{held:?}");

    // kubectl 1.27 speaks SPDY/3.1; from 1.30 on, exec goes over WebSocket (v5.channel.k8s.io),
    // and port forwarding tunnels SPDY in WebSocket messages from 1.31 on.
    let mut clients = vec![("1.27", kubectl_path("kubectl.1.27"))];
    clients.extend(kubectls());
    for (version, kubectl) in clients {
        let run = |args: &[&str]| up.kubectl_at(&kubectl, &a, args);
        assert_eq!(
            ok(run(&["exec", "train", "--", "echo", "hello"])),
            "hello\n",
            "kubectl {version}"
        );
        // The exit code of the command is kubectl's.
        let out = run(&["exec", "train", "--", "sh", "-c", "echo before; exit 3"]);
        assert_eq!(out.status.code(), Some(3), "kubectl {version}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "before\n");
        // Standard error apart from standard output, and the pod's environment.
        let out = run(&["exec", "train", "--", "sh", "-c", "printenv GREETING; ls /nowhere"]);
        assert_eq!(out.status.code(), Some(2), "kubectl {version}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from the pod\n");
        assert!(String::from_utf8_lossy(&out.stderr).contains("ls: cannot access '/nowhere'"));
        // Standard input, to its end.
        let out = with_input(
            &up,
            &kubectl,
            &a,
            &["exec", "-i", "train", "--", "cat"],
            b"line one\nline two\n",
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "line one\nline two\n",
            "kubectl {version}: {out:?}"
        );
        assert!(out.status.success());
        // On a terminal: the command gets one of the terminal's size, and its exit code is
        // still kubectl's; nothing else is said (no write to a connection already reset).
        let (shown, code) =
            on_terminal(&up, &kubectl, &a, &["exec", "-it", "train", "--", "stty", "size"]);
        assert_eq!((shown.as_str(), code), ("40 100\r\n", Some(0)), "kubectl {version}");
        // (It lasts a moment: one that ends at once can end before kubectl 1.27 has sent the
        // terminal's first size, a write that then fails and that kubectl logs.)
        let (shown, code) = on_terminal(
            &up,
            &kubectl,
            &a,
            &["exec", "-it", "train", "--", "sh", "-c", "sleep 0.2; echo in a tty; exit 5"],
        );
        let said = "in a tty\r\ncommand terminated with exit code 5\r\n";
        assert_eq!((shown.as_str(), code), (said, Some(5)), "kubectl {version}");
        // The pod's own MIG device, by the UUID `carrel gpu map` shows, and no other.
        let smi = ok(run(&["exec", "train", "--", "nvidia-smi", "-L"]));
        assert!(smi.starts_with("GPU 0: NVIDIA H200 (UUID: GPU-"), "{smi}");
        assert!(smi.contains(&format!("MIG 1g.18gb     Device  0: (UUID: {})", mine[0])), "{smi}");
        assert!(!smi.contains(theirs[0]), "{smi}");
        assert_eq!(smi.matches("MIG-").count(), 1, "{smi}");
        // `kubectl cp` there and back (tar over exec).
        let local = up.home.path().join(format!("weights-{version}.txt"));
        std::fs::write(&local, format!("weights for {version}\n")).unwrap();
        let there = format!("train:/tmp/weights-{version}.txt");
        ok(run(&["cp", &local.to_string_lossy(), &there]));
        let read = ok(run(&["exec", "train", "--", "cat", &format!("/tmp/weights-{version}.txt")]));
        assert_eq!(read, format!("weights for {version}\n"), "kubectl {version}");
        let back = up.home.path().join(format!("back-{version}.txt"));
        ok(run(&["cp", &there, &back.to_string_lossy()]));
        assert_eq!(std::fs::read_to_string(&back).unwrap(), format!("weights for {version}\n"));
        // A local port forwarded to the pod's 8888, twice over one forward.
        let (mut forward, port) = port_forward(&up, &kubectl, &a, "train", 8888);
        for _ in 0..2 {
            assert_eq!(http_get(port).as_deref(), Ok("train\n"), "kubectl {version}");
        }
        let _ = forward.kill();
        let _ = forward.wait();
    }

    // The Python client: exec with every stream, the exit code, and port forwarding.
    python_args("streams.py", &a, &["train"]);

    // Attach: the container's output, until it ends.
    let short = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: short\n  annotations:\n    sim.carrel.dev/run-seconds: \"6\"\n    sim.carrel.dev/log: \"epoch 1\\nepoch 2\"\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: x\n";
    apply(&up, &a, "short", short);
    wait_running(&up, &a, "short");
    let attached = ok(up.kubectl(&a, &["attach", "short"]));
    assert!(attached.ends_with("epoch 1\nepoch 2\n"), "{attached}");
    let err = fails(up.kubectl(&a, &["attach", "short"]));
    assert!(err.contains("completed pod; current phase is Succeeded"), "{err}");

    // Refusals, as kube-apiserver words them.
    let err = fails(up.kubectl(&a, &["exec", "other", "--", "ls"]));
    assert!(err.contains("pods \"other\" not found"), "another tenant's pod: {err}");
    let err = fails(up.kubectl(&a, &["exec", "train-x-default", "--", "ls"]));
    assert!(err.contains("pods \"train-x-default\" not found"), "a host pod's name: {err}");
    // A user who may read pods but not enter them.
    ok(up.kubectl(&a, &["create", "role", "pod-reader", "--verb=get,list", "--resource=pods"]));
    ok(up
        .kubectl(&a, &["create", "rolebinding", "jane-reads", "--role=pod-reader", "--user=jane"]));
    let err = fails(up.kubectl(&a, &["exec", "--as", "jane", "train", "--", "ls"]));
    assert!(
        err.contains("User \"jane\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"default\""),
        "{err}"
    );
    // A pod no node can take waits, and cannot be entered.
    let waiting = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: waiting\nspec:\n  nodeSelector:\n    nowhere: \"true\"\n  containers:\n  - name: main\n    image: x\n";
    apply(&up, &a, "waiting", waiting);
    let err = fails(up.kubectl(&a, &["exec", "waiting", "--", "ls"]));
    assert!(err.contains("pod waiting does not have a host assigned"), "{err}");
    let err = fails(up.kubectl(&a, &["exec", "train", "-c", "nope", "--", "ls"]));
    assert!(err.contains("container nope is not valid for pod train"), "{err}");
}

/// The state of ephemeral container `container` of tenant pod `pod`.
fn ephemeral_state(up: &Up, kubeconfig: &Path, pod: &str, container: &str) -> Value {
    let out = up.kubectl(kubeconfig, &["get", "pod", pod, "-o", "json"]);
    let pod: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let statuses = pod.pointer("/status/ephemeralContainerStatuses").and_then(Value::as_array);
    let found = statuses.into_iter().flatten().find(|s| s["name"] == container);
    found.map(|s| s["state"].clone()).unwrap_or(Value::Null)
}

#[test]
fn kubectl_debug_runs_an_ephemeral_container_in_the_pod_under_the_tenants_pod_security() {
    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1", "--sim-gpus", "h200x1"]);
    let a = create(&up, "team-debug", &["--gpu", "1g.18gb=1"]);
    apply(&up, &a, "train", TRAIN);
    wait_running(&up, &a, "train");

    let mut clients = vec![("1.27", kubectl_path("kubectl.1.27"))];
    clients.extend(kubectls());
    for (version, kubectl) in clients {
        let run = |args: &[&str]| up.kubectl_at(&kubectl, &a, args);
        let name = format!("dbg-{}", version.replace('.', "-"));
        // A command: it runs beside the pod's containers, and what it prints is its log.
        let script = "echo debugging $HOSTNAME; ls /nowhere; exit 4";
        // (`--profile=baseline`: the default profile of newer kubectls adds SYS_PTRACE, which
        // the tenant's baseline refuses, as kube-apiserver's would.)
        let args = [
            "debug",
            "train",
            "--image=busybox",
            "--profile=baseline",
            "-c",
            &name,
            "--target=main",
            "--",
        ];
        ok(run(&[&args[..], &["sh", "-c", script]].concat()));
        let ended = eventually(&format!("{name} terminated"), WAIT, || {
            let state = ephemeral_state(&up, &a, "train", &name);
            (state["terminated"].is_object(), state)
        });
        assert_eq!(ended["terminated"]["exitCode"], 4, "kubectl {version}: {ended}");
        let log = ok(run(&["logs", "train", "-c", &name]));
        assert_eq!(
            log, "debugging train\nls: cannot access '/nowhere': No such file or directory\n",
            "kubectl {version}"
        );
        // Interactive: what is typed reaches its shell, and its answers come back, until it
        // exits.
        let interactive = format!("{name}-i");
        let out = with_input(
            &up,
            &kubectl,
            &a,
            &[
                "debug",
                "-i",
                "train",
                "--image=busybox",
                "--profile=baseline",
                "-c",
                &interactive,
                "--",
                "sh",
            ],
            b"echo typed into $HOSTNAME\nexit 0\n",
        );
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(shown.contains("typed into train"), "kubectl {version}: {out:?}");
        let state = ephemeral_state(&up, &a, "train", &interactive);
        assert_eq!(state["terminated"]["exitCode"], 0, "kubectl {version}: {state}");
    }
    // The pod's own container ran on throughout.
    let statuses = ok(up.kubectl(
        &a,
        &["get", "pod", "train", "-o", "jsonpath={.status.containerStatuses[0].state.running}"],
    ));
    assert!(statuses.contains("startedAt"), "{statuses}");

    // On the host, the host pod has them too, with Carrel's last word on the GPU runtime.
    let host = up.host_kubeconfig();
    let out = ok(up.kubectl(
        &host,
        &["get", "pod", "train-x-default", "-n", "carrel-team-debug", "-o", "json"],
    ));
    let host_pod: Value = serde_json::from_str(&out).unwrap();
    let added = host_pod["spec"]["ephemeralContainers"].as_array().expect("on the host pod");
    assert_eq!(added.len(), 8, "two for each kubectl");
    for container in added {
        let env = container["env"].as_array().expect("env");
        assert_eq!(
            env.last(),
            Some(&serde_json::json!({"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"})),
            "{container}"
        );
    }

    // The tenant's pod security applies to the debugger: baseline refuses a privileged one.
    let err = fails(
        up.kubectl(&a, &["debug", "train", "--image=busybox", "--profile=sysadmin", "--", "true"]),
    );
    assert!(err.contains("violates PodSecurity \"baseline:latest\": privileged"), "{err}");
    // And RBAC: reading pods is not debugging them.
    ok(up.kubectl(
        &a,
        &["create", "role", "pod-reader", "--verb=get,list,watch", "--resource=pods"],
    ));
    ok(up
        .kubectl(&a, &["create", "rolebinding", "jane-reads", "--role=pod-reader", "--user=jane"]));
    let err =
        fails(up.kubectl(&a, &["debug", "--as", "jane", "train", "--image=busybox", "--", "true"]));
    assert!(
        err.contains("User \"jane\" cannot patch resource \"pods/ephemeralcontainers\""),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kube_rs_program_execs_with_attach_params_and_forwards_a_port() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, AttachParams, PostParams};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let data = tempfile::tempdir().unwrap();
    let up = Up::start_args(data.path(), &["--sim-nodes", "1"]);
    let kubeconfig = create(&up, "team-rs", &[]);
    let pods: Api<Pod> = Api::default_namespaced(kube_client(&kubeconfig).await);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "notebook"},
        "spec": {"containers": [{"name": "lab", "image": "jupyter", "ports": [{"containerPort": 8888}]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let running =
        kube::runtime::wait::await_condition(pods.clone(), "notebook", |p: Option<&Pod>| {
            p.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Running")
        });
    tokio::time::timeout(WAIT, running).await.expect("Running in time").unwrap();

    // Standard input in, standard output and the exit status out.
    let params = AttachParams::default().stdin(true).stderr(false);
    let mut process = pods.exec("notebook", ["sh", "-c", "cat; exit 7"], &params).await.unwrap();
    let mut stdin = process.stdin().expect("stdin");
    stdin.write_all(b"from kube-rs\n").await.unwrap();
    stdin.shutdown().await.unwrap();
    let mut out = String::new();
    let mut stdout = process.stdout().expect("stdout");
    let reading = stdout.read_to_string(&mut out);
    tokio::time::timeout(WAIT, reading).await.expect("the output ends in time").unwrap();
    assert_eq!(out, "from kube-rs\n");
    let status = process.take_status().expect("status").await.expect("a status");
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"), "{status:?}");
    let code = status.details.and_then(|d| d.causes?.into_iter().next()?.message);
    assert_eq!(code.as_deref(), Some("7"));

    // A terminal: the shell sees the size the client gives it, and each resize.
    let params = AttachParams::interactive_tty();
    let mut process = pods.exec("notebook", ["sh"], &params).await.unwrap();
    let mut sizes = process.terminal_size().expect("a terminal");
    let mut stdin = process.stdin().expect("stdin");
    let mut stdout = process.stdout().expect("stdout");
    let mut shown = String::new();
    for (width, height) in [(100u16, 40u16), (132, 43)] {
        use futures::SinkExt;
        sizes.send(kube::api::TerminalSize { width, height }).await.unwrap();
        let wanted = format!("{height} {width}\r\n");
        // The resize and the typing travel apart: ask until the new size shows.
        let seen = async {
            while !shown.contains(&wanted) {
                stdin.write_all(b"stty size\n").await.unwrap();
                let mut chunk = [0u8; 1024];
                let n = stdout.read(&mut chunk).await.unwrap();
                shown.push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        };
        tokio::time::timeout(WAIT, seen)
            .await
            .unwrap_or_else(|_| panic!("{wanted:?} in {shown:?}"));
    }
    stdin.write_all(b"exit\n").await.unwrap();
    drop(stdin);
    let status = process.take_status().expect("status").await.expect("a status");
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

    // A port, through Portforwarder.
    let mut forwarder = pods.portforward("notebook", &[8888]).await.unwrap();
    let mut stream = forwarder.take_stream(8888).expect("a stream");
    stream.write_all(b"GET / HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut answer = String::new();
    let reading = stream.read_to_string(&mut answer);
    tokio::time::timeout(WAIT, reading).await.expect("the answer ends in time").unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("\r\n\r\nnotebook\n"),
        "{answer}"
    );
    drop(stream);
    forwarder.abort();
}
