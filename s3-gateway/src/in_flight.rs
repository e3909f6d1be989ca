//! The bound on requests in flight (`GatewayConfig::max_requests_in_flight`).
//!
//! Each request may hold `max_request_buffer` bytes of object data, and a PUT's EC writer its
//! window of stripes beside that (35 MiB for rs-3-2-1024k), so without a bound on how many
//! run at once a burst of PUTs could take all the gateway's memory. A request past the bound
//! is answered at once with 503 `SlowDown` (Amazon S3's answer to a rate it will not take,
//! "Error responses", which the SDKs retry with backoff); the connection is closed after
//! it when the request's body is left unread. An idle keep-alive connection holds nothing: the bound
//! counts requests, from their arrival until the last byte of their answer has gone (a GET's
//! answer streams its object after the handler returns) or the answer is dropped. A client
//! that goes silent mid-body holds its place for at most `GatewayConfig::request_idle_timeout`
//! ([`IdleBody`]: every request body's reads fail once the socket has been silent that long);
//! one that stops reading its answer holds it for as long too (`crate::connection`: a write
//! that makes no progress for that long ends the connection, dropping the answer).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use s3s::{Body, HttpResponse};

use crate::metrics::{CountedLimit, CountedPermit, GatewayMetrics};

/// Default of `GatewayConfig::request_idle_timeout`: 30 s, hyper's own default for reading
/// a request's headers.
pub const DEFAULT_REQUEST_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Default of `GatewayConfig::max_requests_in_flight`: at most about 3 GiB of PUT buffers
/// (64 × (12 MiB + 35 MiB)) with the default request buffer and rs-3-2-1024k; aws-cli runs
/// 10 requests at once per transfer.
pub const DEFAULT_MAX_REQUESTS_IN_FLIGHT: usize = 64;

/// Admits requests while fewer than its limit are in flight.
#[derive(Debug, Clone)]
pub(crate) struct RequestLimit {
    places: CountedLimit,
}

/// One admitted request's place, given back (and then counted out of
/// `s3_requests_in_flight`) when dropped.
pub(crate) type Admission = CountedPermit;

impl RequestLimit {
    /// A limit of `max` requests at once (at least 1).
    pub(crate) fn new(max: usize, metrics: Arc<GatewayMetrics>) -> Self {
        Self {
            places: CountedLimit::new(max, metrics, |m| &m.in_flight),
        }
    }

    /// A place for one more request, or `None` (counted as refused) when the limit's worth
    /// are in flight.
    pub(crate) fn admit(&self) -> Option<Admission> {
        let admitted = self.places.try_take();
        if admitted.is_none() {
            self.places
                .metrics()
                .refused_busy
                .fetch_add(1, Ordering::Relaxed);
        }
        admitted
    }
}

/// The answer to a request past the limit: 503 `SlowDown`, with `Connection: close` when
/// `close` (a request whose body is left unread, so that its connection cannot carry
/// another). Its request id is
/// stamped on it like any answer's.
///
/// A client that sent `Expect: 100-continue` (botocore does for PutObject and UploadPart)
/// gets the answer before any of its body; one still sending a large body may see the
/// connection reset instead, as hyper stops reading. SDKs retry both.
pub(crate) fn slow_down(close: bool) -> HttpResponse {
    let mut resp = HttpResponse::new(Body::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>\
         <Message>Please reduce your request rate.</Message></Error>"
            .to_string(),
    ));
    *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = resp.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/xml"));
    if close {
        headers.insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp.extensions_mut().insert(Refused);
    resp
}

/// Marks [`slow_down`]'s answers (a response extension), so that they are counted rather
/// than logged one by one (`request_ids::stamp`); a SlowDown passed on from the om is not one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused;

/// The error an [`IdleBody`] read ends with once its client has been silent for `idle`.
#[derive(Debug, thiserror::Error)]
#[error("the client sent nothing for {idle:?} in the middle of the request's body")]
pub(crate) struct BodyIdle {
    idle: Duration,
}

/// Whether `e`, or an error it was caused by, is an [`IdleBody`]'s [`BodyIdle`] (s3s and
/// http-body-util wrap a body's errors in their own).
pub(crate) fn is_idle_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(e) = at {
        if e.downcast_ref::<BodyIdle>().is_some() {
            return true;
        }
        at = e.source();
    }
    false
}

/// A request body whose read fails with [`BodyIdle`] when, once reading has begun, no frame
/// arrives for `idle` (`GatewayConfig::request_idle_timeout`). The clock starts at the first
/// read, not at the request's arrival: a handler that reads late (after its om lookups) and
/// a client that waits for `100 Continue` (sent at that first read) are not cut off.
pub(crate) struct IdleBody {
    body: hyper::body::Incoming,
    idle: Duration,
    /// Made at the first read that waits, then reset at each wait after a frame.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `deadline` counts the current wait (it is reset when a wait begins).
    armed: bool,
}

impl IdleBody {
    /// `body` as s3s takes it, timed out after `idle` of silence.
    pub(crate) fn wrap(body: hyper::body::Incoming, idle: Duration) -> Body {
        Body::http_body(Self {
            body,
            idle,
            deadline: None,
            armed: false,
        })
    }
}

impl HttpBody for IdleBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.armed = false;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let idle = this.idle;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        if !this.armed {
            // A new wait: a whole `idle` from now.
            deadline.as_mut().reset(tokio::time::Instant::now() + idle);
            this.armed = true;
        }
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyIdle { idle })))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// 400 `RequestTimeout`, Amazon S3's answer to a request whose client went silent: "Your
/// socket connection to the server was not read from or written to within the timeout
/// period" (`GatewayConfig::request_idle_timeout`).
pub(crate) fn request_timeout() -> s3s::S3Error {
    s3s::s3_error!(
        RequestTimeout,
        "Your socket connection to the server was not read from or written to within the \
         timeout period."
    )
}

/// A response body that keeps its request's [`Admission`] until the body has been sent to
/// its end or dropped (`None` for a refusal, which holds no place).
pub(crate) struct HeldBody {
    body: Body,
    _admission: Option<Admission>,
}

impl HeldBody {
    /// `body`, holding `admission` for as long as it lives.
    pub(crate) fn new(body: Body, admission: Option<Admission>) -> Self {
        Self {
            body,
            _admission: admission,
        }
    }
}

impl HttpBody for HeldBody {
    type Data = Bytes;
    type Error = <Body as HttpBody>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn limit(max: usize) -> (RequestLimit, Arc<GatewayMetrics>) {
        let metrics = Arc::new(GatewayMetrics::default());
        (RequestLimit::new(max, Arc::clone(&metrics)), metrics)
    }

    #[test]
    fn admits_up_to_the_limit_and_counts_the_rest() {
        let (limit, metrics) = limit(2);
        let a = limit.admit().expect("first");
        let b = limit.admit().expect("second");
        assert!(limit.admit().is_none(), "a third past a limit of 2");
        let s = metrics.snapshot();
        assert_eq!((s.requests_in_flight, s.requests_refused_busy), (2, 1));
        drop(a);
        let c = limit.admit().expect("a place was given back");
        assert_eq!(metrics.snapshot().requests_in_flight, 2);
        drop((b, c));
        assert_eq!(metrics.snapshot().requests_in_flight, 0);
    }

    #[tokio::test]
    async fn a_body_holds_its_place_until_it_is_sent() {
        let (limit, metrics) = limit(1);
        let held = HeldBody::new(Body::from("object bytes".to_string()), limit.admit());
        assert!(
            limit.admit().is_none(),
            "the body's request still holds the place"
        );
        assert_eq!(metrics.snapshot().requests_in_flight, 1);
        let sent = held.collect().await.expect("body").to_bytes();
        assert_eq!(&sent[..], b"object bytes");
        assert!(
            limit.admit().is_some(),
            "the place is free once the body is gone"
        );
    }

    #[test]
    fn the_refusal_is_slow_down_and_closes_an_http1_connection() {
        assert!(
            !slow_down(false)
                .headers()
                .contains_key(http::header::CONNECTION)
        );
        let r = slow_down(true);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[http::header::CONNECTION], "close");
        let body = r.body().bytes().expect("a whole body");
        assert!(
            String::from_utf8_lossy(&body).contains("<Code>SlowDown</Code>"),
            "{body:?}"
        );
    }
}
