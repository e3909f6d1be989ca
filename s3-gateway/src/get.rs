//! GET and HEAD object, served by the gateway itself (an s3s custom route
//! that runs after authentication) so that Range, conditionals and
//! `partNumber` follow RFC 9110 and Amazon exactly (s3s would reject a
//! malformed Range that S3 ignores).
//!
//! One GET by the administrator or the bucket's owner costs one om key
//! lookup (and, for a user, the secret and bucket look-ups of the access
//! check); a read allowed by the object's ACL costs one more, and the ACL is
//! checked again on the record served. The body starts at the range's first
//! byte through the stateless positioned read — nothing before the range is
//! ever read — and streams in chunks of a third of `max_request_buffer`
//! through a one-slot channel, so a request holds at most that much memory
//! and a slow client applies backpressure. The first chunk is read before
//! the status line, so a read that fails at once is a 503; a later failure
//! cuts the stream (never wrong bytes with a 200).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::Stream;
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use s3s::dto::{StreamingBlob, Timestamp, TimestampFormat};
use s3s::route::S3Route;
use s3s::{Body, S3Request, S3Response, S3Result, s3_error};
use tokio::sync::mpsc;

use crate::Gateway;
use crate::conditional::{Conditions, Precondition, if_range_holds};
use crate::error::to_s3;
use crate::metrics::GatewayMetrics;
use crate::object_meta::{CONTENT_TYPE, PART_SIZES, SYSTEM_HEADERS, USER_META, etag_of, timestamp};
use crate::range::{self, Resolved};

/// The custom route serving GetObject and HeadObject.
pub(crate) struct ObjectReadRoute {
    pub(crate) gw: Gateway,
    /// Who may read what; `None` only for test gateways started without
    /// credentials (every request passes).
    pub(crate) access: Option<crate::access::Authorizer>,
}

/// Query parameters a plain GET/HEAD object may carry, besides presigned
/// SigV4 `X-Amz-*` ones: `partNumber`, `versionId`, the SDKs' `x-id`, and the
/// presigned SigV2 trio.
const PLAIN_QUERY: [&str; 6] = [
    "partNumber",
    "versionId",
    "x-id",
    "AWSAccessKeyId",
    "Signature",
    "Expires",
];

fn object_of(uri: &Uri) -> Option<(String, String)> {
    let decoded = percent_encoding::percent_decode_str(uri.path())
        .decode_utf8()
        .ok()?;
    match s3s::path::parse_path_style(&decoded).ok()? {
        s3s::path::S3Path::Object { bucket, key } => Some((bucket.to_string(), key.to_string())),
        _ => None,
    }
}

fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let dec = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (dec(k), dec(v))
        })
        .collect()
}

fn plain_query(uri: &Uri) -> bool {
    query_pairs(uri).iter().all(|(k, _)| {
        PLAIN_QUERY.contains(&k.as_str())
            || RESPONSE_OVERRIDES.iter().any(|(q, _)| q == k)
            || k.to_ascii_lowercase().starts_with("x-amz-")
    })
}

#[async_trait::async_trait]
impl S3Route for ObjectReadRoute {
    fn is_match(
        &self,
        method: &Method,
        uri: &Uri,
        _headers: &HeaderMap,
        _ext: &mut http::Extensions,
    ) -> bool {
        (method == Method::GET || method == Method::HEAD)
            && object_of(uri).is_some()
            && plain_query(uri)
    }

    async fn check_access(&self, req: &mut S3Request<Body>) -> S3Result<()> {
        let Some(access) = &self.access else {
            return Ok(());
        };
        let Some((bucket, key)) = object_of(&req.uri) else {
            return Err(s3_error!(InvalidRequest, "not an object path"));
        };
        let principal = access.principal(req.credentials.as_ref()).await?;
        let op = if req.method == Method::HEAD {
            "HeadObject"
        } else {
            "GetObject"
        };
        let path = s3s::path::S3Path::Object {
            bucket: bucket.into(),
            key: key.into(),
        };
        access
            .authorize(&principal, op, &path, &req.headers)
            .await?;
        req.extensions.insert(principal);
        Ok(())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let head = req.method == Method::HEAD;
        let op = if head { "HeadObject" } else { "GetObject" };
        let r = self.serve(&req, head).await;
        let status = match &r {
            Ok(resp) => resp.status.map_or(200, |s| s.as_u16()),
            Err(e) => e.status_code().map_or(500, |s| s.as_u16()),
        };
        self.gw.metrics().request(op, status);
        r
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn http_date(ts: &Timestamp) -> String {
    let mut buf = Vec::new();
    if ts.format(TimestampFormat::HttpDate, &mut buf).is_err() {
        return String::new();
    }
    String::from_utf8(buf).unwrap_or_default()
}

/// Response header overrides a GET may ask for in its query (S3's
/// `response-*` parameters), with the header each sets.
const RESPONSE_OVERRIDES: [(&str, &str); 6] = [
    ("response-content-type", "content-type"),
    ("response-content-language", "content-language"),
    ("response-expires", "expires"),
    ("response-cache-control", "cache-control"),
    ("response-content-disposition", "content-disposition"),
    ("response-content-encoding", "content-encoding"),
];

fn set(h: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        h.insert(name, v);
    }
}

fn xml_error(code: &str, message: &str, extra: &[(&str, String)]) -> Body {
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message>"
    );
    for (k, v) in extra {
        s.push_str(&format!("<{k}>{v}</{k}>"));
    }
    s.push_str("</Error>");
    Body::from(s)
}

impl ObjectReadRoute {
    async fn serve(&self, req: &S3Request<Body>, head: bool) -> S3Result<S3Response<Body>> {
        let Some((bucket, key)) = object_of(&req.uri) else {
            return Err(s3_error!(InvalidRequest, "not an object path"));
        };
        // SSE-C headers ask for a decryption this gateway cannot do.
        crate::unsupported::refuse_unsupported(&req.headers)?;
        let query = query_pairs(&req.uri);
        let get = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if let Some(v) = get("versionId")
            && v != "null"
        {
            return Err(s3_error!(
                InvalidArgument,
                "Invalid version id specified: this bucket is not versioned; only version \"null\" exists"
            ));
        }
        let part_number = match get("partNumber") {
            None => None,
            Some(p) => Some(
                p.parse::<u32>()
                    .ok()
                    .filter(|n| (1..=10_000).contains(n))
                    .ok_or_else(|| {
                        s3_error!(InvalidArgument, "partNumber must be between 1 and 10000")
                    })?,
            ),
        };
        let range_header = header(&req.headers, "range");
        if part_number.is_some() && range_header.is_some() {
            return Err(s3_error!(
                InvalidRequest,
                "cannot specify both Range header and partNumber query parameter"
            ));
        }

        self.gw.metrics().key_lookup();
        let stream = self
            .gw
            .client()
            .open_key(&bucket, &key)
            .await
            .map_err(to_s3)?;
        let info = stream.info();
        // A read the object's ACL allowed is decided again on the record served.
        crate::access::recheck_read(&req.extensions, &info.metadata)?;
        let size = info.length;
        let etag = etag_of(info);
        let modified = timestamp(info.created_unix_ms);
        let modified_secs = i64::try_from(info.created_unix_ms / 1000).unwrap_or(i64::MAX);

        let mut headers = HeaderMap::new();
        set(&mut headers, "accept-ranges", "bytes");
        set(&mut headers, "etag", &format!("\"{etag}\""));
        set(&mut headers, "last-modified", &http_date(&modified));
        set(
            &mut headers,
            "content-type",
            info.metadata
                .get(CONTENT_TYPE)
                .map_or("binary/octet-stream", String::as_str),
        );
        let tags = info
            .metadata
            .keys()
            .filter(|k| k.starts_with(crate::tagging::TAG_PREFIX))
            .count();
        if tags > 0 {
            set(&mut headers, "x-amz-tagging-count", &tags.to_string());
        }
        for name in SYSTEM_HEADERS {
            if name != CONTENT_TYPE
                && let Some(v) = info.metadata.get(name)
            {
                set(&mut headers, name, v);
            }
        }
        for (k, v) in &info.metadata {
            if k.starts_with(USER_META)
                && let Ok(name) = http::HeaderName::from_bytes(k.as_bytes())
                && let Ok(value) = HeaderValue::from_str(v)
            {
                headers.insert(name, value);
            }
        }

        // Conditionals (RFC 9110 §13.2.2 order) win over Range.
        let conditions = Conditions {
            if_match: header(&req.headers, "if-match"),
            if_none_match: header(&req.headers, "if-none-match"),
            if_modified_since: header(&req.headers, "if-modified-since"),
            if_unmodified_since: header(&req.headers, "if-unmodified-since"),
        };
        match conditions.evaluate(&etag, modified_secs) {
            Precondition::Failed => {
                return Err(s3_error!(
                    PreconditionFailed,
                    "At least one of the pre-conditions you specified did not hold"
                ));
            }
            Precondition::NotModified => {
                let mut resp = S3Response::new(Body::empty());
                resp.status = Some(StatusCode::NOT_MODIFIED);
                resp.headers = headers;
                return Ok(resp);
            }
            Precondition::Proceed => {}
        }

        let resolved = match part_number {
            Some(n) => {
                let sizes: Vec<u64> = info
                    .metadata
                    .get(PART_SIZES)
                    .map(|s| s.split(',').filter_map(|v| v.parse().ok()).collect())
                    .unwrap_or_else(|| vec![size]);
                set(
                    &mut headers,
                    "x-amz-mp-parts-count",
                    &sizes.len().to_string(),
                );
                let idx = usize::try_from(n - 1).unwrap_or(usize::MAX);
                match sizes.get(idx) {
                    None => {
                        let mut e = s3s::S3Error::with_message(
                            s3s::S3ErrorCode::Custom("InvalidPartNumber".into()),
                            "The requested partnumber is not satisfiable",
                        );
                        e.set_status_code(StatusCode::RANGE_NOT_SATISFIABLE);
                        return Err(e);
                    }
                    Some(len) => {
                        // An empty part is an empty 206 (no bytes of other parts).
                        let start: u64 = sizes[..idx].iter().sum();
                        Resolved::Partial(start..start + len)
                    }
                }
            }
            None => {
                // A failing If-Range turns Range off: the whole object, 200.
                let applies = header(&req.headers, "if-range")
                    .is_none_or(|v| if_range_holds(v, &etag, modified_secs));
                let request = if applies {
                    range::parse(range_header)
                } else {
                    range::RangeRequest::Whole
                };
                range::resolve(request, size)
            }
        };
        let (status, body_range) = match resolved {
            Resolved::Whole => (StatusCode::OK, 0..size),
            Resolved::Partial(r) => {
                if r.start < r.end {
                    set(
                        &mut headers,
                        "content-range",
                        &range::content_range(&r, size),
                    );
                }
                (StatusCode::PARTIAL_CONTENT, r)
            }
            Resolved::Unsatisfiable => {
                // An error answer: none of the object's own headers.
                let mut headers = HeaderMap::new();
                set(&mut headers, "accept-ranges", "bytes");
                set(&mut headers, "content-type", "application/xml");
                set(
                    &mut headers,
                    "content-range",
                    &range::unsatisfiable_content_range(size),
                );
                let mut resp = S3Response::new(if head {
                    Body::empty()
                } else {
                    xml_error(
                        "InvalidRange",
                        "The requested range is not satisfiable",
                        &[
                            ("RangeRequested", range_header.unwrap_or("").to_string()),
                            ("ActualObjectSize", size.to_string()),
                        ],
                    )
                });
                resp.status = Some(StatusCode::RANGE_NOT_SATISFIABLE);
                resp.headers = headers;
                return Ok(resp);
            }
        };
        let len = body_range.end - body_range.start;
        set(&mut headers, "content-length", &len.to_string());
        // The stored checksum describes the whole object: sent with a whole-object answer
        // when asked for (x-amz-checksum-mode: ENABLED), as Amazon does.
        if status == StatusCode::OK
            && header(&req.headers, "x-amz-checksum-mode")
                .is_some_and(|m| m.eq_ignore_ascii_case("ENABLED"))
            && let Some((algorithm, value, ty)) = crate::integrity::stored(&info.metadata)
        {
            set(&mut headers, algorithm.header(), value);
            set(&mut headers, "x-amz-checksum-type", ty);
        }
        for (param, name) in RESPONSE_OVERRIDES {
            if let Some(v) = get(param) {
                set(&mut headers, name, v);
            }
        }
        let body = if head || len == 0 {
            Body::empty()
        } else {
            self.body(stream, body_range).await?
        };
        let mut resp = S3Response::new(body);
        resp.status = Some(status);
        resp.headers = headers;
        Ok(resp)
    }

    /// Streams `range` of the key: the first chunk is read now (errors become
    /// the response), the rest by a task feeding a one-slot channel.
    async fn body(
        &self,
        stream: ec_client::KeyInputStream,
        range: std::ops::Range<u64>,
    ) -> S3Result<Body> {
        let step = (self.gw.max_buffer() / 3).max(64 * 1024);
        let first_len = step.min(range.end - range.start);
        let first = stream
            .read_range(range.start, first_len)
            .await
            .map_err(to_s3)?;
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let mut at = range.start + first.len() as u64;
        tokio::spawn(async move {
            if tx.send(Ok(first)).await.is_err() {
                return;
            }
            while at < range.end {
                let n = step.min(range.end - at);
                match stream.read_range(at, n).await {
                    Ok(b) if b.len() as u64 == n => {
                        at += n;
                        if tx.send(Ok(b)).await.is_err() {
                            return; // client went away
                        }
                    }
                    Ok(_) => {
                        let _ = tx
                            .send(Err(std::io::Error::other("object ended early")))
                            .await;
                        return;
                    }
                    Err(e) => {
                        // Cut the stream: the client sees a broken body, never wrong bytes.
                        let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                        return;
                    }
                }
            }
        });
        Ok(Body::from(StreamingBlob::wrap(ChunkStream {
            rx,
            metrics: Arc::clone(self.gw.metrics()),
        })))
    }
}

/// The body of a GET: chunks from the reading task, counted as sent.
struct ChunkStream {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    metrics: Arc<GatewayMetrics>,
}

impl Stream for ChunkStream {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let r = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(Ok(b))) = &r {
            self.metrics.bytes_out(b.len() as u64);
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_get_queries() {
        let q = |s: &str| plain_query(&s.parse::<Uri>().expect("uri"));
        assert!(q("/b/k"));
        assert!(q("/b/k?partNumber=2&versionId=null"));
        assert!(q(
            "/b/k?X-Amz-Signature=1&X-Amz-Date=2&response-content-type=text%2Fplain"
        ));
        assert!(q("/b/k?AWSAccessKeyId=a&Signature=s&Expires=1"));
        assert!(!q("/b/k?uploadId=1"));
        assert!(!q("/b/k?tagging"));
    }
}
