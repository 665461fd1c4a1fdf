//! The simulated containers' logs: lines per (namespace, pod, container), readable whole or
//! followed while the container runs; and the standard input of a container that keeps one open
//! (an ephemeral container of `kubectl debug -i`), which an attach writes to.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use chrono::{DateTime, SecondsFormat, Utc};
use parking_lot::Mutex;
use tokio::io::{AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::broadcast;

/// Bytes of standard input a container has not read yet before a writer waits.
const STDIN_BUFFER: usize = 64 * 1024;

/// Lines a follower may fall behind by before it misses some.
const FOLLOW_BUFFER: usize = 1024;

/// One line a container printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// When.
    pub time: DateTime<Utc>,
    /// The text, without its newline.
    pub text: String,
}

impl LogLine {
    /// The time as the kubelet writes it with `timestamps=true` (RFC 3339, nanoseconds).
    pub fn timestamp(&self) -> String {
        self.time.to_rfc3339_opts(SecondsFormat::Nanos, true)
    }

    /// `<timestamp> <text>`, as `kubectl logs --timestamps` shows a line.
    pub fn with_timestamp(&self) -> String {
        format!("{} {}", self.timestamp(), self.text)
    }
}

#[derive(Debug)]
struct ContainerLog {
    lines: Vec<LogLine>,
    /// Present while the container runs.
    live: Option<broadcast::Sender<LogLine>>,
    /// Its standard input, while it runs with one open.
    stdin: Option<Stdin>,
}

/// The writing end of a running container's standard input. Cheap to clone: every attach of the
/// container writes to the same input, a chunk at a time.
#[derive(Clone, Debug)]
pub struct Stdin(Arc<tokio::sync::Mutex<DuplexStream>>);

impl Stdin {
    /// Give the container `bytes`; `false` once it no longer reads.
    pub async fn write(&self, bytes: &[u8]) -> bool {
        let mut input = self.0.lock().await;
        input.write_all(bytes).await.is_ok() && input.flush().await.is_ok()
    }
}

#[derive(Debug, Default)]
struct PodLogs {
    containers: BTreeMap<String, ContainerLog>,
}

impl PodLogs {
    /// The container named, or the pod's only one when `None`.
    fn container(&self, name: Option<&str>) -> Option<&ContainerLog> {
        match name {
            Some(name) => self.containers.get(name),
            None if self.containers.len() == 1 => self.containers.values().next(),
            None => None,
        }
    }
}

/// The logs of one node's simulated containers. Cheap to clone: clones share the logs.
#[derive(Clone, Debug, Default)]
pub struct LogStore {
    pods: Arc<Mutex<HashMap<(String, String), PodLogs>>>,
}

impl LogStore {
    /// An empty store.
    pub fn new() -> LogStore {
        LogStore::default()
    }

    /// The lines of a container (`None`: the pod's only container); `None` when there is no such
    /// pod or container, or the pod has several containers and none was named.
    pub fn lines(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
    ) -> Option<Vec<LogLine>> {
        let pods = self.pods.lock();
        let log = pods.get(&(namespace.to_owned(), pod.to_owned()))?.container(container)?;
        Some(log.lines.clone())
    }

    /// The lines so far and a receiver of the lines to come; the receiver ends (`Closed`) when the
    /// container terminates, at once when it already has.
    pub fn follow(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
    ) -> Option<(Vec<LogLine>, broadcast::Receiver<LogLine>)> {
        let pods = self.pods.lock();
        let log = pods.get(&(namespace.to_owned(), pod.to_owned()))?.container(container)?;
        let receiver = match &log.live {
            Some(sender) => sender.subscribe(),
            None => broadcast::channel(1).1,
        };
        Some((log.lines.clone(), receiver))
    }

    /// Whether a container runs now (`None`: the pod's only container).
    pub fn running(&self, namespace: &str, pod: &str, container: Option<&str>) -> bool {
        let pods = self.pods.lock();
        let log =
            pods.get(&(namespace.to_owned(), pod.to_owned())).and_then(|p| p.container(container));
        log.is_some_and(|l| l.live.is_some())
    }

    /// The containers with logs in a pod.
    pub fn containers(&self, namespace: &str, pod: &str) -> Option<Vec<String>> {
        let pods = self.pods.lock();
        Some(
            pods.get(&(namespace.to_owned(), pod.to_owned()))?.containers.keys().cloned().collect(),
        )
    }

    /// A container (re)starts: its log begins anew.
    pub(crate) fn start(&self, namespace: &str, pod: &str, container: &str) {
        let mut pods = self.pods.lock();
        let logs = pods.entry((namespace.to_owned(), pod.to_owned())).or_default();
        let (sender, _) = broadcast::channel(FOLLOW_BUFFER);
        let log = ContainerLog { lines: Vec::new(), live: Some(sender), stdin: None };
        logs.containers.insert(container.to_owned(), log);
    }

    /// A container starts with its standard input open: its log begins anew, and what an attach
    /// writes to [`LogStore::stdin`] is read from the stream returned.
    pub(crate) fn start_with_stdin(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> DuplexStream {
        self.start(namespace, pod, container);
        let (writer, reader) = tokio::io::duplex(STDIN_BUFFER);
        let mut pods = self.pods.lock();
        let log = pods
            .get_mut(&(namespace.to_owned(), pod.to_owned()))
            .and_then(|p| p.containers.get_mut(container));
        if let Some(log) = log {
            log.stdin = Some(Stdin(Arc::new(tokio::sync::Mutex::new(writer))));
        }
        reader
    }

    /// The standard input of a running container that keeps one open.
    pub fn stdin(&self, namespace: &str, pod: &str, container: &str) -> Option<Stdin> {
        let pods = self.pods.lock();
        let log = pods.get(&(namespace.to_owned(), pod.to_owned()))?.containers.get(container)?;
        log.stdin.clone()
    }

    /// What a container writes, as lines of its log (a line ends at `\n`; a terminal's `\r`
    /// before it is dropped; what is left unended is a line when the writer shuts down).
    pub(crate) fn writer(&self, namespace: &str, pod: &str, container: &str) -> LogWriter {
        LogWriter {
            logs: self.clone(),
            key: (namespace.to_owned(), pod.to_owned(), container.to_owned()),
            partial: Vec::new(),
        }
    }

    /// A container prints a line.
    pub(crate) fn push(&self, namespace: &str, pod: &str, container: &str, text: &str) {
        let mut pods = self.pods.lock();
        let Some(log) = pods
            .get_mut(&(namespace.to_owned(), pod.to_owned()))
            .and_then(|p| p.containers.get_mut(container))
        else {
            return;
        };
        let line = LogLine { time: Utc::now(), text: text.to_owned() };
        if let Some(sender) = &log.live {
            // No follower is fine.
            let _ = sender.send(line.clone());
        }
        log.lines.push(line);
    }

    /// A container terminates: followers' receivers end.
    pub(crate) fn finish(&self, namespace: &str, pod: &str, container: &str) {
        let mut pods = self.pods.lock();
        if let Some(log) = pods
            .get_mut(&(namespace.to_owned(), pod.to_owned()))
            .and_then(|p| p.containers.get_mut(container))
        {
            log.live = None;
            log.stdin = None;
        }
    }

    /// A pod is gone: its logs are dropped.
    pub(crate) fn remove(&self, namespace: &str, pod: &str) {
        self.pods.lock().remove(&(namespace.to_owned(), pod.to_owned()));
    }
}

/// A container's output, written into its log ([`LogStore::writer`]).
#[derive(Debug)]
pub(crate) struct LogWriter {
    logs: LogStore,
    key: (String, String, String),
    partial: Vec<u8>,
}

impl LogWriter {
    fn push(&self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (namespace, pod, container) = &self.key;
        self.logs.push(namespace, pod, container, &String::from_utf8_lossy(line));
    }
}

impl AsyncWrite for LogWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.partial.extend_from_slice(bytes);
        while let Some(end) = this.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = this.partial.drain(..=end).collect();
            this.push(&line[..end]);
        }
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.partial.is_empty() {
            let rest = std::mem::take(&mut this.partial);
            this.push(&rest);
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_follow_and_removal() {
        let logs = LogStore::new();
        assert!(logs.lines("ns", "p", None).is_none());
        logs.start("ns", "p", "main");
        logs.push("ns", "p", "main", "one");
        let (so_far, mut rx) = logs.follow("ns", "p", None).expect("the only container");
        assert_eq!(so_far.len(), 1);
        logs.push("ns", "p", "main", "two");
        assert_eq!(rx.recv().await.unwrap().text, "two");
        logs.finish("ns", "p", "main");
        assert!(matches!(rx.recv().await, Err(broadcast::error::RecvError::Closed)));
        let (_, mut after) = logs.follow("ns", "p", Some("main")).unwrap();
        assert!(matches!(after.recv().await, Err(broadcast::error::RecvError::Closed)));
        let texts: Vec<String> =
            logs.lines("ns", "p", Some("main")).unwrap().into_iter().map(|l| l.text).collect();
        assert_eq!(texts, ["one", "two"]);
        let line = &logs.lines("ns", "p", None).unwrap()[0];
        assert!(line.with_timestamp().ends_with("Z one"), "{}", line.with_timestamp());
        chrono::DateTime::parse_from_rfc3339(&line.timestamp()).unwrap();

        logs.start("ns", "p", "side");
        assert!(logs.lines("ns", "p", None).is_none(), "two containers: one must be named");
        assert!(logs.lines("ns", "p", Some("other")).is_none());
        assert_eq!(logs.containers("ns", "p").unwrap(), ["main", "side"]);
        logs.remove("ns", "p");
        assert!(logs.lines("ns", "p", Some("main")).is_none());
    }

    #[tokio::test]
    async fn a_container_writes_lines_and_reads_what_an_attach_gives() {
        use tokio::io::AsyncReadExt;
        let logs = LogStore::new();
        assert!(logs.stdin("ns", "p", "debug").is_none());
        let mut input = logs.start_with_stdin("ns", "p", "debug");
        let stdin = logs.stdin("ns", "p", "debug").expect("open while it runs");
        assert!(stdin.write(b"ls\n").await);
        let mut read = [0u8; 3];
        input.read_exact(&mut read).await.expect("read");
        assert_eq!(&read, b"ls\n");

        let mut out = logs.writer("ns", "p", "debug");
        out.write_all(b"one\r\ntw").await.expect("write");
        out.write_all(b"o\nthr").await.expect("write");
        let texts = |logs: &LogStore| -> Vec<String> {
            logs.lines("ns", "p", Some("debug")).unwrap().into_iter().map(|l| l.text).collect()
        };
        assert_eq!(texts(&logs), ["one", "two"]);
        out.shutdown().await.expect("shutdown");
        assert_eq!(texts(&logs), ["one", "two", "thr"]);

        drop(input);
        logs.finish("ns", "p", "debug");
        assert!(logs.stdin("ns", "p", "debug").is_none());
        assert!(!stdin.write(b"more").await, "nobody reads a finished container's input");
    }
}
