//! SPDY/3.1, the framing kubectl and client-go used for a pod's streams before WebSocket (and
//! that `kubectl port-forward` still uses, tunnelled in WebSocket messages from 1.31 on).
//!
//! No maintained Rust implementation of SPDY exists, so the server side of what Kubernetes
//! clients use of it is here: frames (SYN_STREAM, SYN_REPLY, DATA, RST_STREAM, PING, GOAWAY;
//! SETTINGS and WINDOW_UPDATE are read and ignored, as client-go's SPDY library does), header
//! blocks compressed with zlib and SPDY/3's preset dictionary (`flate2`). Every stream is opened
//! by the client; the server answers each with a SYN_REPLY and hands it on as a [`Stream`].
//!
//! On top of the framing: `pods/exec` and `pods/attach` ([`serve_session`]: the client opens one
//! stream per standard stream, named by its `streamType` header, and the error stream carries
//! the `Status` as over WebSocket) and `pods/portforward` ([`serve_ports`]: a data and an error
//! stream per connection, paired by `requestID`, for the `port` they name).

use std::collections::HashMap;
use std::future::Future;

use bytes::Bytes;
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

use super::{
    error_once_ended, exit_code, negotiate, offered, Forwarded, Reader, Session, TerminalSize,
    CHUNK,
};
use crate::status::{ApiError, ApiResult};

/// The `Upgrade` token of SPDY/3.1.
pub const UPGRADE: &str = "SPDY/3.1";

/// The header a client lists the stream protocols it speaks in.
pub const PROTOCOL_HEADER: &str = "x-stream-protocol-version";

/// The exec and attach protocols served over SPDY, newest first.
pub const SESSION_PROTOCOLS: &[&str] =
    &["v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];

/// The port-forwarding protocol.
pub const PORT_FORWARD_PROTOCOL: &str = "portforward.k8s.io";

/// The WebSocket subprotocol of port forwarding tunnelled over WebSocket (kubectl 1.31 on).
pub const TUNNELLED_PORT_FORWARD: &str = "SPDY/3.1+portforward.k8s.io";

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const FLAG_FIN: u8 = 1;
/// RST_STREAM status: the stream is refused.
const REFUSED_STREAM: u32 = 3;

/// The largest frame read (SPDY allows 2^24 - 1 bytes).
const MAX_FRAME: usize = (1 << 24) - 1;

/// Words of SPDY/3's zlib dictionary, each written after its length as a 32-bit big-endian
/// number (SPDY/3, section 2.6.10.1).
const DICTIONARY_WORDS: &[&str] = &[
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

/// The rest of the dictionary, as it is.
const DICTIONARY_TAIL: &str = "100101201202205206300302303304305306307402405406407408409410411412\
    413414415416417502504505203 Non-Authoritative Information204 No Content301 Moved Permanently\
    400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not \
    Implemented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 \
    Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,\
    application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,\
    deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// SPDY/3's zlib dictionary.
fn dictionary() -> Vec<u8> {
    let mut d = Vec::with_capacity(1423);
    for word in DICTIONARY_WORDS {
        d.extend_from_slice(&u32::try_from(word.len()).unwrap_or(0).to_be_bytes());
        d.extend_from_slice(word.as_bytes());
    }
    d.extend_from_slice(DICTIONARY_TAIL.as_bytes());
    d
}

/// What ends a SPDY connection early.
#[derive(Debug, thiserror::Error)]
pub enum SpdyError {
    /// Reading or writing the connection failed.
    #[error("SPDY connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent what SPDY/3.1 does not allow.
    #[error("SPDY protocol error: {0}")]
    Protocol(&'static str),
}

/// Whether a request asks to become a SPDY connection.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(UPGRADE))
}

/// Accept a SPDY upgrade speaking the first of the client's stream protocols (its
/// `X-Stream-Protocol-Version` headers, in order) that is in `supported`: the `101` answer, and
/// the protocol. A client that offers none of them is refused with a 403, as the kubelet's
/// handshake refuses it.
pub fn accept(
    headers: &HeaderMap,
    supported: &[&'static str],
) -> ApiResult<(Response, &'static str)> {
    let offered = offered(headers, PROTOCOL_HEADER);
    let Some(chosen) = negotiate(&offered, supported) else {
        return Err(ApiError::Forbidden {
            message: format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, \
                 server accepts {supported:?}"
            ),
            subject: None,
        });
    };
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = response.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(UPGRADE));
    h.insert(PROTOCOL_HEADER, HeaderValue::from_static(chosen));
    Ok((response, chosen))
}

/// One stream the client opened: its headers, the data it sends (ending at its FIN), and a
/// handle to send data back on it.
#[derive(Debug)]
pub struct Stream {
    /// Its headers, names lower-case.
    pub headers: HashMap<String, String>,
    /// What the client sends on it, until its end.
    pub incoming: mpsc::Receiver<Bytes>,
    /// Sends on it.
    pub out: StreamWriter,
}

/// Sends DATA frames on one stream.
#[derive(Clone, Debug)]
pub struct StreamWriter {
    id: u32,
    frames: mpsc::Sender<Vec<u8>>,
}

impl StreamWriter {
    /// Send `data`; false once the connection is gone.
    pub async fn send(&self, data: &[u8]) -> bool {
        for chunk in data.chunks(CHUNK) {
            if self.frames.send(data_frame(self.id, 0, chunk)).await.is_err() {
                return false;
            }
        }
        true
    }

    /// End the stream from this side.
    pub async fn finish(&self) {
        let _ = self.frames.send(data_frame(self.id, FLAG_FIN, &[])).await;
    }

    /// Send everything `reader` reads, then end the stream.
    pub async fn pump(&self, mut reader: Reader) {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if !self.send(&buf[..n]).await {
                        return;
                    }
                }
            }
        }
        self.finish().await;
    }
}

fn data_frame(id: u32, flags: u8, data: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + data.len());
    frame.extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    frame.push(flags);
    let len = u32::try_from(data.len()).unwrap_or(0);
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(data);
    frame
}

fn control_frame(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.push(flags);
    let len = u32::try_from(payload.len()).unwrap_or(0);
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

/// The header blocks of one connection: each direction is one zlib stream.
struct Headers {
    inflate: Decompress,
    deflate: Compress,
    dictionary: Vec<u8>,
}

impl Headers {
    fn new() -> Headers {
        let dictionary = dictionary();
        let mut deflate = Compress::new(Compression::default(), true);
        // Only fails on a compressor that has already compressed.
        let _ = deflate.set_dictionary(&dictionary);
        Headers { inflate: Decompress::new(true), deflate, dictionary }
    }

    fn decode(&mut self, mut input: &[u8]) -> Result<HashMap<String, String>, SpdyError> {
        let mut out = Vec::with_capacity(input.len() * 4 + 256);
        loop {
            let before = self.inflate.total_in();
            let result = self.inflate.decompress_vec(input, &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.inflate.total_in() - before).unwrap_or(0);
            input = &input[consumed..];
            match result {
                Err(e) if e.needs_dictionary().is_some() => {
                    self.inflate.set_dictionary(&self.dictionary).map_err(|_| {
                        SpdyError::Protocol("a header block for another dictionary")
                    })?;
                    continue;
                }
                Err(_) => return Err(SpdyError::Protocol("a header block that does not inflate")),
                Ok(_) => {}
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity());
                continue;
            }
            if input.is_empty() || consumed == 0 {
                break;
            }
        }
        parse_block(&out)
    }

    fn encode(&mut self, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut block = Vec::new();
        block.extend_from_slice(&u32::try_from(pairs.len()).unwrap_or(0).to_be_bytes());
        for (name, value) in pairs {
            for text in [name, value] {
                block.extend_from_slice(&u32::try_from(text.len()).unwrap_or(0).to_be_bytes());
                block.extend_from_slice(text.as_bytes());
            }
        }
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut input = block.as_slice();
        loop {
            let before = self.deflate.total_in();
            if self.deflate.compress_vec(input, &mut out, FlushCompress::Sync).is_err() {
                break;
            }
            let consumed = usize::try_from(self.deflate.total_in() - before).unwrap_or(0);
            input = &input[consumed..];
            if out.len() == out.capacity() {
                out.reserve(out.capacity().max(64));
                continue;
            }
            if input.is_empty() {
                break;
            }
        }
        out
    }
}

/// A header block's name/value pairs (values that a NUL separates are kept joined).
fn parse_block(block: &[u8]) -> Result<HashMap<String, String>, SpdyError> {
    let bad = || SpdyError::Protocol("a malformed header block");
    let mut at = 0usize;
    let number = |at: &mut usize| -> Result<usize, SpdyError> {
        let bytes = block.get(*at..*at + 4).ok_or_else(bad)?;
        *at += 4;
        let n = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        usize::try_from(n).map_err(|_| bad())
    };
    let count = number(&mut at)?;
    let mut headers = HashMap::new();
    for _ in 0..count {
        let text = |at: &mut usize| -> Result<String, SpdyError> {
            let len = number(at)?;
            let bytes = block.get(*at..*at + len).ok_or_else(bad)?;
            *at += len;
            Ok(String::from_utf8_lossy(bytes).into_owned())
        };
        let name = text(&mut at)?.to_ascii_lowercase();
        let value = text(&mut at)?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// Serve a SPDY connection on `io`: every stream the client opens is answered and sent to
/// `streams`; the connection ends when the client ends it, `streams` is dropped, or a frame
/// cannot be read.
pub async fn serve<IO>(io: IO, streams: mpsc::Sender<Stream>)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut read, mut write) = tokio::io::split(io);
    let (frames, mut queued) = mpsc::channel::<Vec<u8>>(64);
    let writer = tokio::spawn(async move {
        while let Some(frame) = queued.recv().await {
            if write.write_all(&frame).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    });
    if let Err(e) = read_frames(&mut read, frames, streams).await {
        tracing::debug!(error = %e, "a SPDY connection ended");
    }
    let _ = writer.await;
}

async fn read_frames<R: AsyncRead + Unpin>(
    read: &mut R,
    frames: mpsc::Sender<Vec<u8>>,
    streams: mpsc::Sender<Stream>,
) -> Result<(), SpdyError> {
    let mut headers = Headers::new();
    let mut open: HashMap<u32, mpsc::Sender<Bytes>> = HashMap::new();
    loop {
        let mut head = [0u8; 8];
        match read.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let flags = head[4];
        let len = usize::try_from(u32::from_be_bytes([0, head[5], head[6], head[7]])).unwrap_or(0);
        if len > MAX_FRAME {
            return Err(SpdyError::Protocol("a frame over 16 MiB"));
        }
        let mut payload = vec![0u8; len];
        read.read_exact(&mut payload).await?;
        let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if first & 0x8000_0000 == 0 {
            let id = first & 0x7fff_ffff;
            if let Some(sender) = open.get(&id) {
                if !payload.is_empty() && sender.send(Bytes::from(payload)).await.is_err() {
                    open.remove(&id);
                }
            }
            if flags & FLAG_FIN != 0 {
                open.remove(&id);
            }
            continue;
        }
        let version = u16::try_from((first >> 16) & 0x7fff).unwrap_or(0);
        if version != VERSION {
            return Err(SpdyError::Protocol("a SPDY version other than 3"));
        }
        match u16::try_from(first & 0xffff).unwrap_or(0) {
            SYN_STREAM => {
                let id_bytes = payload.get(..4).ok_or(SpdyError::Protocol("a short SYN_STREAM"))?;
                let id = u32::from_be_bytes([id_bytes[0], id_bytes[1], id_bytes[2], id_bytes[3]])
                    & 0x7fff_ffff;
                let block = payload.get(10..).ok_or(SpdyError::Protocol("a short SYN_STREAM"))?;
                let stream_headers = headers.decode(block)?;
                let (incoming_tx, incoming) = mpsc::channel(16);
                if flags & FLAG_FIN == 0 {
                    open.insert(id, incoming_tx);
                }
                let mut reply = id.to_be_bytes().to_vec();
                reply.extend_from_slice(&headers.encode(&[]));
                if frames.send(control_frame(SYN_REPLY, 0, &reply)).await.is_err() {
                    return Ok(());
                }
                let out = StreamWriter { id, frames: frames.clone() };
                let stream = Stream { headers: stream_headers, incoming, out };
                if streams.send(stream).await.is_err() {
                    let mut rst = id.to_be_bytes().to_vec();
                    rst.extend_from_slice(&REFUSED_STREAM.to_be_bytes());
                    let _ = frames.send(control_frame(RST_STREAM, 0, &rst)).await;
                    return Ok(());
                }
            }
            RST_STREAM => {
                if let Some(id) = payload.get(..4) {
                    open.remove(&(u32::from_be_bytes([id[0], id[1], id[2], id[3]]) & 0x7fff_ffff));
                }
            }
            // A PING is answered with itself.
            PING if frames.send(control_frame(PING, 0, &payload)).await.is_err() => return Ok(()),
            GOAWAY => return Ok(()),
            // SETTINGS, WINDOW_UPDATE, HEADERS: nothing this server acts on.
            _ => {}
        }
    }
}

/// Serve `session` to a client speaking `protocol` over SPDY on `io`: wait for the streams the
/// options call for, then run as over WebSocket.
pub async fn serve_session<IO>(
    io: IO,
    protocol: &str,
    session: Session,
    ended: impl Future<Output = ()>,
) where
    IO: AsyncRead + AsyncWrite + Send + 'static,
{
    let (streams_tx, mut streams) = mpsc::channel::<Stream>(8);
    let connection = tokio::spawn(serve(io, streams_tx));
    let v4 = protocol == "v4.channel.k8s.io";
    let Session { stdin, stdout, stderr, resize, status } = session;
    let mut wanted = 1
        + usize::from(stdin.is_some())
        + usize::from(stdout.is_some())
        + usize::from(stderr.is_some())
        + usize::from(
            resize.is_some() && protocol != "v2.channel.k8s.io" && protocol != "channel.k8s.io",
        );
    let (mut error, mut out, mut err, mut input, mut sizes) = (None, None, None, None, None);
    let arrived = async {
        while wanted > 0 {
            let Some(stream) = streams.recv().await else { return };
            match stream.headers.get("streamtype").map(String::as_str) {
                Some("error") => error = Some(stream),
                Some("stdout") => out = Some(stream),
                Some("stderr") => err = Some(stream),
                Some("stdin") => input = Some(stream),
                Some("resize") => sizes = Some(stream),
                _ => continue,
            }
            wanted -= 1;
        }
    };
    // The kubelet waits this long for a client's streams.
    if tokio::time::timeout(std::time::Duration::from_secs(30), arrived).await.is_err() {
        connection.abort();
        return;
    }
    let Some(error) = error else {
        connection.abort();
        return;
    };
    let output = async {
        let pump = |stream: &Option<Stream>, reader: Option<Reader>| {
            let writer = stream.as_ref().map(|s| s.out.clone());
            async move {
                if let (Some(writer), Some(reader)) = (writer, reader) {
                    writer.pump(reader).await;
                }
            }
        };
        futures::join!(pump(&out, stdout), pump(&err, stderr));
        let status = status.await;
        if let Some(text) = status_text(v4, &status) {
            error.out.send(&text).await;
        }
        error.out.finish().await;
    };
    let feed_stdin = async {
        let (Some(mut stream), Some(mut writer)) = (input, stdin) else { return };
        while let Some(data) = stream.incoming.recv().await {
            if writer.write_all(&data).await.is_err() {
                return;
            }
        }
        let _ = writer.shutdown().await;
    };
    let feed_sizes = async {
        let (Some(mut stream), Some(resize)) = (sizes, resize) else { return };
        let mut buffered = Vec::new();
        while let Some(data) = stream.incoming.recv().await {
            buffered.extend_from_slice(&data);
            // A stream of JSON objects, one after another.
            let mut objects =
                serde_json::Deserializer::from_slice(&buffered).into_iter::<TerminalSize>();
            let mut used = 0;
            while let Some(Ok(size)) = objects.next() {
                used = objects.byte_offset();
                let _ = resize.send(size).await;
            }
            buffered.drain(..used);
        }
    };
    tokio::select! {
        _ = async { futures::join!(output, feed_stdin, feed_sizes) } => {}
        _ = ended => {}
    }
    drop(streams);
    connection.abort();
}

/// What the error stream carries for a session that ended with `status`: the `Status` from v4
/// on, the message of a failure before.
fn status_text(v4: bool, status: &Value) -> Option<Vec<u8>> {
    if v4 {
        return serde_json::to_vec(status).ok();
    }
    if exit_code(status) == Some(0) {
        return None;
    }
    Some(status["message"].as_str().unwrap_or("error executing command").as_bytes().to_vec())
}

/// Serve port forwarding over SPDY on `io`: each pair of data and error streams (one
/// `requestID`) is a new connection to its `port` through `forward`, as long as the client
/// keeps the connection.
pub async fn serve_ports<IO, F, Fut>(io: IO, forward: F, ended: impl Future<Output = ()>)
where
    IO: AsyncRead + AsyncWrite + Send + 'static,
    F: Fn(u16) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ApiResult<Forwarded>> + Send + 'static,
{
    let (streams_tx, mut streams) = mpsc::channel::<Stream>(8);
    let connection = tokio::spawn(serve(io, streams_tx));
    let forward = std::sync::Arc::new(forward);
    let pairs = async {
        let mut waiting: HashMap<String, Stream> = HashMap::new();
        while let Some(stream) = streams.recv().await {
            let request = stream.headers.get("requestid").cloned().unwrap_or_default();
            let Some(other) = waiting.remove(&request) else {
                waiting.insert(request, stream);
                continue;
            };
            let (data, error) = match stream.headers.get("streamtype").map(String::as_str) {
                Some("data") => (stream, other),
                _ => (other, stream),
            };
            let port = data.headers.get("port").and_then(|p| p.parse::<u16>().ok());
            let forward = forward.clone();
            tokio::spawn(async move {
                let Some(port) = port else {
                    error.out.send(b"invalid port").await;
                    error.out.finish().await;
                    return;
                };
                match forward(port).await {
                    Ok(forwarded) => forward_one(data, error, forwarded).await,
                    Err(e) => {
                        let message =
                            format!("error forwarding port {port} to pod: {}", e.message());
                        error.out.send(message.as_bytes()).await;
                        error.out.finish().await;
                        data.out.finish().await;
                    }
                }
            });
        }
    };
    tokio::select! {
        _ = pairs => {}
        _ = ended => {}
    }
    connection.abort();
}

async fn forward_one(mut data: Stream, error: Stream, forwarded: Forwarded) {
    let Forwarded { data: connection, error: said } = forwarded;
    let (read, mut write) = tokio::io::split(connection);
    let to_pod = async {
        while let Some(bytes) = data.incoming.recv().await {
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
        let _ = write.shutdown().await;
    };
    let from_pod = async {
        data.out.pump(Box::new(read)).await;
        if let Some(message) = error_once_ended(said) {
            error.out.send(message.as_bytes()).await;
        }
        error.out.finish().await;
    };
    futures::join!(to_pod, from_pod);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy_3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        // The checksum a zlib stream compressed with it names (its FDICT field).
        let (mut a, mut b) = (1u32, 0u32);
        for byte in &d {
            a = (a + u32::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }

    #[test]
    fn header_blocks_go_there_and_back_through_one_zlib_stream_each_way() {
        let (mut ours, mut theirs) = (Headers::new(), Headers::new());
        for pairs in [
            vec![("streamtype", "error"), ("port", "8888"), ("requestid", "0")],
            vec![("streamtype", "data"), ("port", "8888"), ("requestid", "0")],
            vec![],
        ] {
            let block = ours.encode(&pairs);
            let decoded = theirs.decode(&block).unwrap();
            let want: HashMap<String, String> =
                pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            assert_eq!(decoded, want);
        }
        assert!(theirs.decode(b"not zlib at all").is_err());
    }

    #[test]
    fn a_client_that_speaks_no_protocol_served_is_refused() {
        let mut headers = HeaderMap::new();
        headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
        headers.append(PROTOCOL_HEADER, HeaderValue::from_static("v5.channel.k8s.io"));
        headers.append(PROTOCOL_HEADER, HeaderValue::from_static("v4.channel.k8s.io"));
        assert!(is_upgrade(&headers));
        let (response, chosen) = accept(&headers, SESSION_PROTOCOLS).unwrap();
        assert_eq!(chosen, "v4.channel.k8s.io");
        assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(response.headers()[PROTOCOL_HEADER], "v4.channel.k8s.io");
        let e = accept(&headers, &[PORT_FORWARD_PROTOCOL]).unwrap_err();
        assert_eq!(e.code(), 403);
    }

    /// A client's side of the framing, for the tests: SYN_STREAM with headers, DATA, and the
    /// frames the server sends back, read whole.
    struct Client {
        headers: Headers,
        io: tokio::io::DuplexStream,
    }

    impl Client {
        async fn open(&mut self, id: u32, pairs: &[(&str, &str)], fin: bool) {
            let mut payload = id.to_be_bytes().to_vec();
            payload.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
            payload.extend_from_slice(&self.headers.encode(pairs));
            let frame = control_frame(SYN_STREAM, if fin { FLAG_FIN } else { 0 }, &payload);
            self.io.write_all(&frame).await.unwrap();
        }

        async fn data(&mut self, id: u32, data: &[u8], fin: bool) {
            let frame = data_frame(id, if fin { FLAG_FIN } else { 0 }, data);
            self.io.write_all(&frame).await.unwrap();
        }

        /// The next frame: (control type or None for DATA, stream id, flags, payload).
        async fn frame(&mut self) -> (Option<u16>, u32, u8, Vec<u8>) {
            let mut head = [0u8; 8];
            self.io.read_exact(&mut head).await.unwrap();
            let len = u32::from_be_bytes([0, head[5], head[6], head[7]]) as usize;
            let mut payload = vec![0u8; len];
            self.io.read_exact(&mut payload).await.unwrap();
            let first = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            if first & 0x8000_0000 == 0 {
                return (None, first, head[4], payload);
            }
            let id =
                u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
            (Some((first & 0xffff) as u16), id, head[4], payload)
        }
    }

    #[tokio::test]
    async fn an_exec_gets_its_streams_answered_and_its_status_on_the_error_stream() {
        let (near, far) = tokio::io::duplex(64 * 1024);
        let (stdin_near, mut stdin_far) = tokio::io::duplex(1024);
        let (mut stdout_far, stdout_near) = tokio::io::duplex(1024);
        let (done, ended) = tokio::sync::oneshot::channel::<Value>();
        // A process that echoes its input and exits 3.
        tokio::spawn(async move {
            let mut input = Vec::new();
            stdin_far.read_to_end(&mut input).await.unwrap();
            stdout_far.write_all(&input).await.unwrap();
            drop(stdout_far);
            let _ = done.send(super::super::exited(&["cat".to_owned()], 3));
        });
        let session = Session {
            stdin: Some(Box::new(stdin_near)),
            stdout: Some(Box::new(stdout_near)),
            stderr: None,
            resize: None,
            status: Box::pin(async move { ended.await.unwrap() }),
        };
        tokio::spawn(serve_session(far, "v4.channel.k8s.io", session, futures::future::pending()));
        let mut client = Client { headers: Headers::new(), io: near };
        client.open(1, &[("streamtype", "error")], true).await;
        client.open(3, &[("streamtype", "stdin")], false).await;
        client.open(5, &[("streamtype", "stdout")], true).await;
        for id in [1, 3, 5] {
            let (kind, replied, _, _) = client.frame().await;
            assert_eq!((kind, replied), (Some(SYN_REPLY), id));
        }
        client.data(3, b"typed", true).await;
        let mut stdout = Vec::new();
        let mut error = Vec::new();
        let mut ended = 0;
        while ended < 2 {
            let (kind, id, flags, payload) = client.frame().await;
            assert_eq!(kind, None);
            match id {
                5 => stdout.extend_from_slice(&payload),
                1 => error.extend_from_slice(&payload),
                other => panic!("data on stream {other}"),
            }
            if flags & FLAG_FIN != 0 {
                ended += 1;
            }
        }
        assert_eq!(stdout, b"typed");
        let status: Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(exit_code(&status), Some(3));
    }
}
