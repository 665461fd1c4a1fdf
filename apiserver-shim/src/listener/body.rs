//! Request and response bodies on a connection: the body-read timeout ([`BodyTimeout`]), the
//! draining of an unread body before an early answer, and the in-flight mark a response body
//! holds while it streams.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use parking_lot::Mutex;

use super::activity::InFlight;

/// Why a request body could not be read in full.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimeout(Duration);

impl BodyTimeout {
    /// The body timeout among `error` and its sources, if it is one.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyTimeout> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(timeout) = error.downcast_ref::<BodyTimeout>() {
                return Some(timeout);
            }
            next = error.source();
        }
        None
    }
}

/// A request body, read until a deadline; shared between the handler and the connection, which
/// reads what the handler left before answering.
#[derive(Debug)]
pub(super) struct BodyState {
    body: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    done: bool,
}

impl BodyState {
    pub(super) fn new(body: Incoming, timeout: Duration) -> BodyState {
        BodyState { body, deadline: Box::pin(tokio::time::sleep(timeout)), timeout, done: false }
    }

    fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                self.done = true;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.done = true;
                    Poll::Ready(Some(Err(BodyTimeout(self.timeout).into())))
                }
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// The body a handler reads.
#[derive(Debug)]
pub(super) struct RequestBody(pub(super) Arc<Mutex<BodyState>>);

impl HttpBody for RequestBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        self.0.lock().poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        let state = self.0.lock();
        state.done || state.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.0.lock().body.size_hint()
    }
}

/// Read and discard what is left of a request body, up to `limit` bytes and its deadline.
pub(super) async fn drain(body: &Mutex<BodyState>, limit: usize) {
    let mut read = 0usize;
    loop {
        let frame = std::future::poll_fn(|cx| {
            let mut state = body.lock();
            if state.done || state.body.is_end_stream() {
                return Poll::Ready(None);
            }
            state.poll_frame(cx)
        })
        .await;
        match frame {
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, Bytes::len);
                if read > limit {
                    return;
                }
            }
            Some(Err(_)) | None => return,
        }
    }
}

/// A response body that ends its request's time in flight when it is sent in full or dropped.
#[derive(Debug)]
pub(super) struct ResponseBody {
    pub(super) inner: axum::body::Body,
    pub(super) in_flight: Option<InFlight>,
}

impl HttpBody for ResponseBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(None | Some(Err(_))) = polled {
            self.in_flight = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
