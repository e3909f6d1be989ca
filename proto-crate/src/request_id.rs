//! Request ids: the S3 gateway gives every request one (answered as `x-amz-request-id`, as
//! Amazon does), and it travels with every om and datanode RPC the request causes as the
//! [`REQUEST_ID_METADATA`] gRPC metadata, so that one id finds a request in the log of every
//! process it touched.
//!
//! The id lives in a task-local: [`scope`] sets it for a future, [`propagate`] carries it into
//! a future about to be spawned, the client interceptor [`attach`] copies it onto outgoing
//! RPCs, and the server layer [`RequestIdLayer`] reads it from incoming ones into the serving
//! task (and a tracing span named `rpc` with the id and the method path).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tracing::Instrument;

/// gRPC metadata (HTTP/2 header) carrying a request id between processes.
pub const REQUEST_ID_METADATA: &str = "x-request-id";

tokio::task_local! {
    static REQUEST_ID: Option<Arc<str>>;
}

/// The request id of the current task, if it runs on behalf of a request.
#[must_use]
pub fn current() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Clone::clone).ok().flatten()
}

/// Runs `fut` with request id `id`.
pub async fn scope<F: Future>(id: Option<Arc<str>>, fut: F) -> F::Output {
    REQUEST_ID.scope(id, fut).await
}

/// `fut` with the current task's request id, for a future handed to `tokio::spawn` (spawned
/// tasks do not inherit task-locals).
pub fn propagate<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(current(), fut)
}

/// The type of [`attach`], to name clients built `with_interceptor(channel, attach as Attach)`.
pub type Attach = fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>;

/// Client interceptor: copies the current request id onto an outgoing RPC.
///
/// # Errors
/// Never: an id that is not a valid header value is left off.
#[allow(clippy::result_large_err, clippy::unnecessary_wraps)]
pub fn attach(mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
    if let Some(id) = current()
        && let Ok(v) = id.parse()
    {
        req.metadata_mut().insert(REQUEST_ID_METADATA, v);
    }
    Ok(req)
}

/// Server layer: serves each RPC with the request id its metadata carries (in the task-local,
/// so the server's own outgoing RPCs carry it on) inside a tracing span `rpc` with the id and
/// the method path.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestIdLayer;

impl<S> tower::Layer<S> for RequestIdLayer {
    type Service = RequestIdService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RequestIdService(inner)
    }
}

/// The service [`RequestIdLayer`] wraps around an RPC service.
#[derive(Debug, Clone)]
pub struct RequestIdService<S>(S);

impl<S, B> tower::Service<http::Request<B>> for RequestIdService<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let id: Option<Arc<str>> = req
            .headers()
            .get(REQUEST_ID_METADATA)
            .and_then(|v| v.to_str().ok())
            .map(Arc::from);
        let span = match &id {
            Some(id) => tracing::info_span!("rpc", request_id = %id, path = %req.uri().path()),
            None => tracing::Span::none(),
        };
        Box::pin(REQUEST_ID.scope(id, self.0.call(req)).instrument(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_id_reaches_outgoing_rpcs_and_spawned_tasks() {
        assert!(current().is_none());
        let id: Arc<str> = Arc::from("req-1");
        scope(Some(Arc::clone(&id)), async {
            let req = attach(tonic::Request::new(())).expect("attach");
            assert_eq!(
                req.metadata()
                    .get(REQUEST_ID_METADATA)
                    .and_then(|v| v.to_str().ok()),
                Some("req-1")
            );
            let spawned = tokio::spawn(propagate(async { current() }))
                .await
                .expect("task");
            assert_eq!(spawned.as_deref(), Some("req-1"));
            let bare = tokio::spawn(async { current() }).await.expect("task");
            assert!(bare.is_none(), "a plain spawn does not inherit it");
        })
        .await;
        let req = attach(tonic::Request::new(())).expect("attach");
        assert!(req.metadata().get(REQUEST_ID_METADATA).is_none());
    }
}
