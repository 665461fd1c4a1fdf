//! `Status` bodies for hyper's own HTTP/1 error answers (400, 414, 431), which it writes before
//! any handler runs and with an empty body.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite};

use super::activity::Activity;

/// A connection's IO that gives hyper's own HTTP/1 error answers (400 for a request it cannot
/// parse, 414 for a URI over 64 KiB, 431 for a head over [`super::Limits::max_header_bytes`]), which
/// hyper sends before any handler runs and with an empty body, the `Status` body every other
/// error has.
#[derive(Debug)]
pub(super) struct StatusBodies<I> {
    pub(super) io: I,
    pub(super) activity: Arc<Activity>,
    /// A replacement being written: its bytes, how many are written, and the length of what it
    /// replaces.
    pub(super) pending: Option<(Vec<u8>, usize, usize)>,
}

/// The status code of hyper's automatic error answer, if `head` is one: a lone head with no
/// body, for a 400, 414 or 431.
pub(super) fn automatic_error(head: &[u8]) -> Option<u16> {
    if head.len() > 512 || !head.ends_with(b"\r\n\r\n") {
        return None;
    }
    let rest = head.strip_prefix(b"HTTP/1.1 ").or_else(|| head.strip_prefix(b"HTTP/1.0 "))?;
    let code = match rest.get(..4)? {
        b"400 " => 400,
        b"414 " => 414,
        b"431 " => 431,
        _ => return None,
    };
    let head = std::str::from_utf8(head).ok()?.to_ascii_lowercase();
    head.contains("\r\ncontent-length: 0\r\n").then_some(code)
}

/// The answer, with a `Status` body, that replaces hyper's for `code`.
pub(super) fn status_answer(code: u16, max_header_bytes: usize) -> Vec<u8> {
    let error = match code {
        414 => crate::ApiError::uri_too_long("the request URI is too long"),
        431 => crate::ApiError::headers_too_large(format!(
            "the request's headers are larger than the limit of {max_header_bytes} bytes"
        )),
        _ => crate::ApiError::bad_request("the request could not be parsed as HTTP"),
    };
    let body = crate::status::encode_status(&error.to_status());
    let reason = axum::http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("Bad Request");
    let mut answer = format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

impl<I: AsyncWrite + Unpin> StatusBodies<I> {
    /// Write the pending replacement; `Ready` with the length it stands for once all is written.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        while let Some((bytes, written, replaces)) = self.pending.as_mut() {
            if *written == bytes.len() {
                let replaces = *replaces;
                self.pending = None;
                return Poll::Ready(Ok(replaces));
            }
            match Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()))
                }
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(0))
    }

    /// Whether `buf` is hyper's automatic error answer, to be replaced.
    fn replaces(&mut self, buf: &[u8]) -> bool {
        if self.pending.is_some() {
            return true;
        }
        if self.activity.in_flight.load(Ordering::SeqCst) > 0 {
            return false;
        }
        let Some(code) = automatic_error(buf) else { return false };
        self.pending = Some((status_answer(code, self.activity.max_header_bytes), 0, buf.len()));
        true
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for StatusBodies<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for StatusBodies<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.replaces(buf) {
            return self.poll_pending(cx);
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &b[..]);
        if self.replaces(first) {
            return self.poll_pending(cx);
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
