//! The listener's tests: limits, the gate, backoff, log limiting, status bodies, body timeouts
//! and idle closes, over real connections where it matters.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use bytes::Bytes;
use tokio::net::TcpListener;

use super::*;

#[test]
fn backoff_grows_to_a_second_and_starts_over_after_a_success() {
    let mut backoff = Backoff::default();
    let sleeps: Vec<Duration> = (0..12).map(|_| backoff.failed()).collect();
    assert_eq!(sleeps[0], Duration::from_millis(5));
    assert_eq!(sleeps[1], Duration::from_millis(10));
    assert!(sleeps.windows(2).all(|w| w[0] <= w[1]), "{sleeps:?}");
    assert_eq!(*sleeps.last().unwrap(), Duration::from_secs(1));
    // A thousand failures in a row sleep at least ~16 minutes in all: no spinning.
    let total: Duration = (0..1000).map(|_| backoff.failed()).sum();
    assert!(total >= Duration::from_secs(990), "{total:?}");
    backoff.succeeded();
    assert_eq!(backoff.failed(), Duration::from_millis(5));
}

#[test]
fn a_repeated_log_line_is_written_once_per_window_with_the_count_it_held_back() {
    let logs = LogLimiter::new(Duration::from_secs(10));
    let t0 = Instant::now();
    assert_eq!(logs.admit("accept", t0), Some(0));
    let written = (1..=100_000u64)
        .filter(|i| logs.admit("accept", t0 + Duration::from_micros(*i)).is_some())
        .count();
    assert_eq!(written, 0, "repeats within the window stay quiet");
    // Another line is not held back by the first.
    assert_eq!(logs.admit("limit-total", t0), Some(0));
    assert_eq!(logs.admit("accept", t0 + Duration::from_secs(11)), Some(100_000));
    assert_eq!(logs.admit("accept", t0 + Duration::from_secs(12)), None);
    assert_eq!(logs.admit("accept", t0 + Duration::from_secs(22)), Some(1));
}

#[test]
fn the_gate_bounds_connections_in_all_and_per_address_and_gives_slots_back() {
    let gate = Arc::new(Gate::default());
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    let first = gate.admit(a, 3, 2).unwrap();
    let second = gate.admit(a, 3, 2).unwrap();
    assert_eq!(gate.admit(a, 3, 2).unwrap_err(), Refused::PerIp);
    let third = gate.admit(b, 3, 2).unwrap();
    assert_eq!(gate.admit(b, 3, 2).unwrap_err(), Refused::Total);
    assert_eq!(gate.open(), 3);
    drop(first);
    assert_eq!(gate.open(), 2);
    let again = gate.admit(a, 3, 2).unwrap();
    drop((second, third, again));
    assert_eq!(gate.open(), 0);
    assert!(gate.open.lock().1.is_empty(), "no address is remembered once closed");
    // 0 per address: only the total counts.
    let many: Vec<Slot> = (0..5).map(|_| gate.admit(a, 5, 0).unwrap()).collect();
    assert_eq!(many.len(), 5);
}

#[test]
fn the_connection_limit_leaves_the_stores_their_descriptors() {
    let stores = Arc::new(AtomicUsize::new(1));
    let counted = stores.clone();
    let limits = Limits {
        fd_reserve: FdReserve::new(100, 10, move || counted.load(Ordering::SeqCst)),
        ..Limits::default()
    };
    assert_eq!(limits.connection_limit(1000), 890);
    stores.store(21, Ordering::SeqCst);
    assert_eq!(limits.connection_limit(1000), 690, "stores opened later are counted");
    assert_eq!(limits.connection_limit(200), 0, "a reserve above the limit admits nothing");
    let capped = Limits { max_connections: 50, ..limits };
    assert_eq!(capped.connection_limit(1000), 50);
}

/// Serve, over plain HTTP on 127.0.0.1:0, a router whose `POST /refuse` answers 401 without
/// reading the body and whose `GET /` answers 200.
async fn plain_server(limits: Limits) -> SocketAddr {
    use axum::routing::{get, post};
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/refuse", post(|| async { crate::ApiError::unauthorized() }));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, None, router, limits, std::future::pending()));
    addr
}

/// Send `request` on a fresh connection and read the answer to its end.
async fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // The server may answer and close before all of a huge head is written.
    let _ = tcp.write_all(request).await;
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

fn status_body(answer: &str) -> serde_json::Value {
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uri_too_long_and_headers_too_large_are_answered_with_a_status() {
    let addr = plain_server(Limits::default()).await;
    let long_uri = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000));
    let answer = exchange(addr, long_uri.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 414 "), "{answer}");
    let status = status_body(&answer);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["code"], 414);

    let big_header =
        format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n", "b".repeat(1024 * 1024 + 10));
    let answer = exchange(addr, big_header.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{}", &answer[..answer.len().min(200)]);
    let status = status_body(&answer);
    assert_eq!(status["code"], 431);
    assert_eq!(status["status"], "Failure");

    let answer = exchange(addr, b"NOT HTTP AT ALL\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert_eq!(status_body(&answer)["reason"], "BadRequest");

    // Ordinary answers are left alone.
    let answer = exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 ") && answer.ends_with("\r\n\r\nok"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_answer_to_an_http2_post_leaves_curls_stream_clean() {
    let addr = plain_server(Limits::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    std::fs::write(&body, vec![b'x'; 2 * 1024 * 1024]).unwrap();
    let url = format!("http://{addr}/refuse");
    let data = format!("@{}", body.display());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "-o", "/dev/null"])
            .args(["-w", "%{http_code} %{http_version}", "--data-binary", &data, &url])
            .output()
            .expect("curl")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "curl: {:?} {stdout} {stderr}", out.status);
    assert_eq!(stdout, "401 2", "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_those_beyond_the_limit_at_once() {
    use tokio::io::AsyncReadExt as _;
    let limits = Limits {
        idle_timeout: Duration::from_millis(300),
        header_read_timeout: Duration::from_secs(30),
        max_connections_per_ip: 2,
        // Not the address the test connects from.
        per_ip_exempt: vec!["127.0.0.2".parse().unwrap()],
        ..Limits::default()
    };
    let addr = plain_server(limits).await;
    let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A third from the same address is closed at once, without an answer.
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(20), third.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    // The two admitted ones, never sending a byte, are closed once idle (not after the
    // header timeout of 30 s).
    for conn in [&mut first, &mut second] {
        let read = tokio::time::timeout(Duration::from_secs(20), conn.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    }
    // Their places are given back: a new connection is served.
    let answer = exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exempt_address_is_held_only_to_the_total() {
    use tokio::io::AsyncWriteExt as _;
    let limits = Limits {
        max_connections_per_ip: 1,
        per_ip_exempt: vec!["127.0.0.1".parse().unwrap()],
        ..Limits::default()
    };
    let addr = plain_server(limits).await;
    let mut open = Vec::new();
    for _ in 0..3 {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        open.push(tcp);
    }
    let answer = exchange(addr, b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "the fourth from 127.0.0.1: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_response_is_not_cut_by_the_idle_timeout() {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    // A response that streams a line every 100 ms for 1.5 s, five times the idle timeout.
    let stream = || async {
        let lines = futures::stream::unfold(0, |i| async move {
            if i == 15 {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            Some((Ok::<_, Infallible>(Bytes::from(format!("{i}\n"))), i + 1))
        });
        axum::body::Body::from_stream(lines)
    };
    let router = Router::new().route("/watch", get(stream));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits { idle_timeout: Duration::from_millis(300), ..Limits::default() };
    tokio::spawn(serve(listener, None, router, limits, std::future::pending()));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /watch HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the idle connection was closed after the stream");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.contains("\r\n14\n\r\n"), "every line arrived: {answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_answered_504() {
    use carrel_store::{Options, SledStore};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(dir.path(), Options::create()).unwrap();
    let api = Arc::new(crate::Api::new(Arc::new(store)).unwrap());
    let router = crate::router(Arc::new(crate::Server::new(api, "")));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = Limits { body_read_timeout: Duration::from_millis(300), ..Limits::default() };
    tokio::spawn(serve(listener, None, router, limits, std::future::pending()));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A head announcing 1,000 bytes of body, and 10 of them.
    let head = "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nhost: x\r\n\
                content-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"kind\":1";
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(20), tcp.read(&mut answer)).await;
    let n = read.expect("an answer before the client gives up").unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 504 "), "{answer}");
    let status = status_body(&answer);
    assert_eq!(status["reason"], "Timeout");
    assert!(status["message"].as_str().unwrap().contains("did not arrive within"), "{status}");
}

#[test]
fn durations_read_like_flags() {
    assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert!(parse_duration("0s").is_err());
    assert!(parse_duration("90").is_err());
    assert!(parse_duration("s").is_err());
    assert!(parse_duration("-1s").is_err());
}
