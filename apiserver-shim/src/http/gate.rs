//! The shape of the cluster stack's layers: a [`Gate`] looks at each request before the rest of
//! the stack and lets it go on (perhaps with something added to it), answers it, or takes the
//! slow way of an `async` step around the rest of the stack. The common way costs no allocation:
//! the rest of the stack's future is returned as it is, where `axum::middleware::from_fn` boxes
//! it and a clone of the stack on every request and every layer.

use std::convert::Infallible;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use futures::future::{self, BoxFuture, Either, Ready};
use tower::{Layer, Service, ServiceExt};

/// What a gate does with a request.
pub(super) enum Step {
    /// The request goes on to the rest of the stack.
    Go(Request),
    /// The gate answers the request itself.
    Answer(Response),
    /// The request takes the gate's [`Gate::slow`] way.
    Slow(Request),
}

/// The rest of the stack, as a gate's slow way holds it.
pub(super) trait Next:
    Service<Request, Response = Response, Error = Infallible, Future: Send> + Send + 'static
{
}

impl<S> Next for S where
    S: Service<Request, Response = Response, Error = Infallible, Future: Send> + Send + 'static
{
}

/// One layer of the stack.
pub(super) trait Gate: Clone + Send + Sync + 'static {
    /// Look at `request` before the rest of the stack.
    fn check(&self, request: Request) -> Step;

    /// The slow way of a request [`Gate::check`] sent there: by default, on to the rest of the
    /// stack.
    fn slow<S: Next>(&self, request: Request, next: S) -> BoxFuture<'static, Response> {
        Box::pin(run(next, request))
    }
}

/// The rest of the stack's answer to `request`.
pub(super) async fn run<S: Next>(next: S, request: Request) -> Response {
    match next.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// The `tower` layer of a [`Gate`].
#[derive(Clone, Debug)]
pub(super) struct GateLayer<G>(pub(super) G);

impl<G: Clone, S> Layer<S> for GateLayer<G> {
    type Service = GateService<G, S>;

    fn layer(&self, inner: S) -> GateService<G, S> {
        GateService { gate: self.0.clone(), inner }
    }
}

/// The service a [`GateLayer`] makes.
#[derive(Clone, Debug)]
pub(super) struct GateService<G, S> {
    gate: G,
    inner: S,
}

type Answered = Result<Response, Infallible>;

impl<G, S> Service<Request> for GateService<G, S>
where
    G: Gate,
    S: Next + Clone,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<S::Future, Either<Ready<Answered>, BoxFuture<'static, Answered>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match self.gate.check(request) {
            Step::Go(request) => Either::Left(self.inner.call(request)),
            Step::Answer(response) => Either::Right(Either::Left(future::ready(Ok(response)))),
            Step::Slow(request) => {
                // The service made ready is the one that serves; a fresh clone stays for the next
                // request.
                let clone = self.inner.clone();
                let next = std::mem::replace(&mut self.inner, clone);
                let slow = self.gate.slow(request, next);
                Either::Right(Either::Right(Box::pin(async move { Ok(slow.await) })))
            }
        }
    }
}
