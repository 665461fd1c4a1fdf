//! The WebSocket channel protocols of a pod's streams, as kube-apiserver and the kubelet speak
//! them (`k8s.io/apimachinery/pkg/util/httpstream/wsstream`).
//!
//! Every binary message carries one stream's bytes behind a first byte naming the stream: 0
//! stdin, 1 stdout, 2 stderr, 3 the error stream (from `v4.channel.k8s.io` on, the `Status` the
//! process ended with; before, an error's text), 4 terminal sizes (from v3). `v5.channel.k8s.io`
//! adds the message `[255, n]`: the client has closed stream n (end of input). Port forwarding
//! (`pods/portforward`) gives each requested port two streams, data (2i) and error (2i + 1), and
//! the server first writes the port, little-endian, on both.

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use super::{
    error_once_ended, exit_code, negotiate, offered, Forwarded, Reader, Session, TerminalSize,
    CHUNK,
};
use crate::status::{ApiError, ApiResult};

/// The exec and attach protocols served, newest first.
pub const SESSION_PROTOCOLS: &[&str] = &[
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// The port-forwarding protocols served: the kubelet's channels, and SPDY tunnelled in
/// WebSocket messages (kubectl from 1.31 on).
pub const PORT_FORWARD_PROTOCOLS: &[&str] =
    &["v4.channel.k8s.io", "channel.k8s.io", super::spdy::TUNNELLED_PORT_FORWARD];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;

/// A channel protocol's version: what its error stream carries, and whether it has terminal
/// sizes and close messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(u8);

impl Version {
    fn of(protocol: &str) -> Version {
        match protocol.strip_suffix(".channel.k8s.io").and_then(|v| v.strip_prefix('v')) {
            Some(n) => Version(n.parse().unwrap_or(1)),
            None => Version(1),
        }
    }
}

/// Whether a request asks to become a WebSocket.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// A WebSocket handshake accepted: the 101 answer to send and the protocol it chose.
#[derive(Debug)]
pub struct Accepted {
    /// The `101 Switching Protocols` answer.
    pub response: Response,
    /// The protocol chosen (`None`: the client offered none).
    pub protocol: Option<&'static str>,
    /// The version of the channel protocol chosen.
    pub version: Version,
}

/// Accept the WebSocket handshake of `headers` with one of `supported`: the first the client
/// offers that is served (a client that offers none speaks `channel.k8s.io`). A client that
/// offers only protocols not served is answered 400, as kube-apiserver answers it.
pub fn accept(headers: &HeaderMap, supported: &[&'static str]) -> ApiResult<Accepted> {
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or_else(|| ApiError::bad_request("a WebSocket upgrade without Sec-WebSocket-Key"))?;
    let offered = offered(headers, header::SEC_WEBSOCKET_PROTOCOL);
    let chosen = match offered.as_slice() {
        [] => None,
        offered => Some(negotiate(offered, supported).ok_or_else(|| {
            ApiError::bad_request(format!(
                "requested protocol(s) are not supported: {offered:?}; supports {supported:?}"
            ))
        })?),
    };
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    let accept = HeaderValue::try_from(derive_accept_key(key.as_bytes()))
        .map_err(|e| ApiError::internal(format!("a WebSocket accept key: {e}")))?;
    headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    if let Some(protocol) = chosen {
        headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_static(protocol));
    }
    Ok(Accepted {
        response,
        protocol: chosen,
        version: Version::of(chosen.unwrap_or("channel.k8s.io")),
    })
}

/// The server's side of the WebSocket a client's upgraded connection `io` has become.
pub async fn server<S: AsyncRead + AsyncWrite + Unpin>(io: S) -> WebSocketStream<S> {
    WebSocketStream::from_raw_socket(io, Role::Server, None).await
}

/// The bytes carried in `ws`'s binary messages, as one connection (what a message brings is
/// read in order; what is written goes as one binary message a write).
pub fn tunnel<S>(ws: WebSocketStream<S>) -> tokio::io::DuplexStream
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (near, far) = tokio::io::duplex(TUNNEL_BUFFER);
    tokio::spawn(async move {
        let (mut sink, mut incoming) = ws.split();
        let (mut read, mut write) = tokio::io::split(far);
        let inbound = async {
            while let Some(data) = next_message(&mut incoming).await {
                if write.write_all(&data).await.is_err() {
                    break;
                }
            }
            let _ = write.shutdown().await;
        };
        let outbound = async {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match read.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if sink.send(Message::Binary(buf[..n].to_vec().into())).await.is_err() {
                            return;
                        }
                    }
                }
            }
            close(&mut sink).await;
        };
        tokio::select! {
            _ = inbound => {}
            _ = outbound => {}
        }
    });
    near
}

/// Bytes buffered each way in a [`tunnel`].
const TUNNEL_BUFFER: usize = 64 * 1024;

fn framed(channel: u8, data: &[u8]) -> Message {
    let mut bytes = Vec::with_capacity(data.len() + 1);
    bytes.push(channel);
    bytes.extend_from_slice(data);
    Message::Binary(bytes.into())
}

/// End the connection with a normal closure (1000), which clients take for the end of every
/// stream; a close frame without a code (1005) is an error to them.
async fn close<S>(sink: &mut S)
where
    S: futures::Sink<Message> + Unpin,
{
    let frame = CloseFrame { code: CloseCode::Normal, reason: "".into() };
    let _ = sink.send(Message::Close(Some(frame))).await;
    let _ = sink.close().await;
}

/// The bytes of the client's next message, `None` once it has closed the connection.
async fn next_message<S>(incoming: &mut S) -> Option<bytes::Bytes>
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    while let Some(Ok(message)) = incoming.next().await {
        match message {
            Message::Binary(data) => return Some(data),
            // Some clients (the Python client, for a `str`) send a stream's bytes as text.
            Message::Text(text) => return Some(text.into()),
            Message::Close(_) => return None,
            _ => continue,
        }
    }
    None
}

/// Send every message `queued` brings until its senders are gone, then close the connection.
async fn send_all<S>(sink: &mut S, queued: &mut mpsc::Receiver<Message>)
where
    S: futures::Sink<Message> + Unpin,
{
    while let Some(message) = queued.recv().await {
        if sink.send(message).await.is_err() {
            return;
        }
    }
    close(sink).await;
}

/// Send what `reader` reads to `out` on `channel`, until its end.
async fn pump(reader: Option<Reader>, channel: u8, out: mpsc::Sender<Message>) {
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.send(framed(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// What the error stream says of a session that ended with `status`, in `version`'s words:
/// nothing after a success before v4.
fn status_message(version: Version, status: &Value) -> Option<Message> {
    if version >= Version(4) {
        let bytes = serde_json::to_vec(status).ok()?;
        return Some(framed(ERROR, &bytes));
    }
    if exit_code(status) == Some(0) {
        return None;
    }
    let text = status["message"].as_str().unwrap_or("error executing command");
    Some(framed(ERROR, text.as_bytes()))
}

/// Serve `session` over `ws` until the process has ended and its output is sent, the client
/// goes, or `ended` resolves (the cluster is no longer served).
pub async fn serve_session<S>(
    ws: WebSocketStream<S>,
    version: Version,
    session: Session,
    ended: impl std::future::Future<Output = ()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut incoming) = ws.split();
    let (out, mut queued) = mpsc::channel::<Message>(16);
    let Session { stdin, stdout, stderr, resize, status } = session;
    let output = {
        let out = out.clone();
        async move {
            futures::join!(pump(stdout, STDOUT, out.clone()), pump(stderr, STDERR, out.clone()));
            let status = status.await;
            if let Some(message) = status_message(version, &status) {
                let _ = out.send(message).await;
            }
        }
    };
    drop(out);
    let writer = send_all(&mut sink, &mut queued);
    let input = async {
        let mut stdin = stdin;
        while let Some(data) = next_message(&mut incoming).await {
            if data.first() == Some(&STDIN) {
                let written = match stdin.as_mut() {
                    Some(writer) => writer.write_all(&data[1..]).await.is_ok(),
                    None => true,
                };
                if !written {
                    stdin = None;
                }
                continue;
            }
            match (data.first().copied(), &mut stdin) {
                (Some(RESIZE), _) if version >= Version(3) => {
                    let size = serde_json::from_slice::<TerminalSize>(&data[1..]);
                    if let (Ok(size), Some(resize)) = (size, &resize) {
                        let _ = resize.send(size).await;
                    }
                }
                (Some(CLOSE), Some(writer))
                    if version >= Version(5) && data.get(1) == Some(&STDIN) =>
                {
                    let _ = writer.shutdown().await;
                    stdin = None;
                }
                _ => {}
            }
        }
    };
    if closed_first(async { futures::join!(output, writer) }, input, ended).await {
        linger(&mut incoming).await;
    }
}

/// Whether `closing` (what this server sends, then its close) finished before the client's
/// input ended or the cluster stopped being served (`ended`).
async fn closed_first(
    closing: impl std::future::Future,
    input: impl std::future::Future,
    ended: impl std::future::Future,
) -> bool {
    tokio::select! {
        _ = closing => true,
        _ = input => false,
        _ = ended => false,
    }
}

/// How long a connection this server has closed waits for the client's close.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// After this server's close frame, read (and drop) what the client still sends until its own
/// close, as RFC 6455 asks: a connection dropped with unread input is reset, and the client's
/// last writes (the end of its input, a resize) fail with `connection reset by peer`.
async fn linger<S>(incoming: &mut S)
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    let drained = async { while next_message(incoming).await.is_some() {} };
    let _ = tokio::time::timeout(CLOSE_WAIT, drained).await;
}

/// Serve the forwarded `ports` over `ws`: each one's data and error streams, until every
/// connection has ended, the client goes, or `ended` resolves.
pub async fn serve_ports<S>(
    ws: WebSocketStream<S>,
    ports: Vec<(u16, Forwarded)>,
    ended: impl std::future::Future<Output = ()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut incoming) = ws.split();
    let numbers: Vec<u16> = ports.iter().map(|(port, _)| *port).collect();
    for (i, port) in numbers.into_iter().enumerate() {
        let Ok(data) = u8::try_from(2 * i) else { break };
        for channel in [data, data + 1] {
            if sink.send(framed(channel, &port.to_le_bytes())).await.is_err() {
                return;
            }
        }
    }
    let (out, mut queued) = mpsc::channel::<Message>(16);
    let mut writers = Vec::new();
    let mut readers = Vec::new();
    for (i, (_, forwarded)) in ports.into_iter().enumerate() {
        let Ok(data) = u8::try_from(2 * i) else { break };
        let (read, write) = tokio::io::split(forwarded.data);
        writers.push(Some(write));
        let out = out.clone();
        readers.push(async move {
            pump(Some(Box::new(read)), data, out.clone()).await;
            if let Some(message) = error_once_ended(forwarded.error) {
                let _ = out.send(framed(data + 1, message.as_bytes())).await;
            }
        });
    }
    drop(out);
    let output = futures::future::join_all(readers);
    let writer = send_all(&mut sink, &mut queued);
    let input = async {
        while let Some(data) = next_message(&mut incoming).await {
            let Some(&channel) = data.first() else { continue };
            if channel % 2 != 0 {
                continue;
            }
            let slot = writers.get_mut(usize::from(channel / 2));
            if let Some(slot @ Some(_)) = slot {
                if let Some(writer) = slot.as_mut() {
                    if writer.write_all(&data[1..]).await.is_err() {
                        *slot = None;
                    }
                }
            }
        }
    };
    if closed_first(async { futures::join!(output, writer) }, input, ended).await {
        linger(&mut incoming).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake(protocols: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        headers.insert(
            header::SEC_WEBSOCKET_KEY,
            HeaderValue::from_static("dGhlIHNhbXBsZSBub25jZQ=="),
        );
        if let Some(p) = protocols {
            headers.insert(header::SEC_WEBSOCKET_PROTOCOL, HeaderValue::from_str(p).unwrap());
        }
        headers
    }

    #[test]
    fn the_first_protocol_the_client_offers_that_is_served_is_chosen() {
        let accepted =
            accept(&handshake(Some("v5.channel.k8s.io, v4.channel.k8s.io")), SESSION_PROTOCOLS)
                .unwrap();
        assert_eq!(accepted.version, Version(5));
        let headers = accepted.response.headers();
        assert_eq!(headers[header::SEC_WEBSOCKET_PROTOCOL], "v5.channel.k8s.io");
        // RFC 6455's example key and answer.
        assert_eq!(headers[header::SEC_WEBSOCKET_ACCEPT], "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(accepted.response.status(), StatusCode::SWITCHING_PROTOCOLS);
        let v4 =
            accept(&handshake(Some("v5.channel.k8s.io,v4.channel.k8s.io")), PORT_FORWARD_PROTOCOLS)
                .unwrap();
        assert_eq!(v4.version, Version(4));
        let none = accept(&handshake(None), SESSION_PROTOCOLS).unwrap();
        assert_eq!(none.version, Version(1));
        assert!(none.response.headers().get(header::SEC_WEBSOCKET_PROTOCOL).is_none());
        let e = accept(&handshake(Some("base64.binary.k8s.io")), SESSION_PROTOCOLS).unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(is_upgrade(&handshake(None)));
    }

    #[test]
    fn before_v4_the_error_stream_carries_text_and_only_on_failure() {
        let failed = super::super::exited(&["false".to_owned()], 1);
        let ok = super::super::exited(&["true".to_owned()], 0);
        assert!(status_message(Version(2), &ok).is_none());
        let Some(Message::Binary(text)) = status_message(Version(2), &failed) else { panic!() };
        assert!(text[1..].starts_with(b"command terminated with non-zero exit code"));
        let Some(Message::Binary(json)) = status_message(Version(4), &ok) else { panic!() };
        assert_eq!(json[0], ERROR);
        assert_eq!(serde_json::from_slice::<Value>(&json[1..]).unwrap()["status"], "Success");
    }
}
