//! Every answer carries a request id (`x-amz-request-id`, and `x-amz-id-2` as Amazon sends
//! both), error bodies name it in `<RequestId>`, the request is logged under it, and every om
//! and datanode RPC the request causes carries it as gRPC metadata
//! ([`proto_crate::request_id`]). Presigned URLs valid longer than a week are refused here, as
//! Amazon refuses them (s3s accepts any `X-Amz-Expires`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http::{HeaderValue, StatusCode};
use s3s::{Body, HttpResponse};

/// Longest validity of a presigned URL, seconds (SigV4 query authentication: seven days).
pub(crate) const MAX_PRESIGNED_EXPIRES: u64 = 604_800;

/// A new request id: 16 upper-case hex digits, unique within the process (a counter) and
/// unlikely to repeat across restarts (seeded from the clock).
pub(crate) fn new_id() -> Arc<str> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let seed = *SEED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    // A bijective mix of seed + n: distinct counters give distinct ids.
    let mut x = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    Arc::from(format!("{x:016X}"))
}

/// The refusal of a presigned request valid for more than [`MAX_PRESIGNED_EXPIRES`], if this
/// is one (403 `AuthorizationQueryParametersError`).
pub(crate) fn refuse_long_presigned(uri: &http::Uri) -> Option<HttpResponse> {
    let query = uri.query()?;
    let expires = query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "X-Amz-Expires").then_some(v)
    })?;
    if expires
        .parse::<u64>()
        .is_ok_and(|e| e <= MAX_PRESIGNED_EXPIRES)
    {
        return None;
    }
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AuthorizationQueryParametersError</Code><Message>X-Amz-Expires must be less than a week (in seconds) that is {MAX_PRESIGNED_EXPIRES}</Message></Error>"
    );
    let mut resp = HttpResponse::new(Body::from(body));
    *resp.status_mut() = StatusCode::FORBIDDEN;
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/xml"));
    Some(resp)
}

/// A request whose small XML body carries integrity claims (DeleteObjects, Complete,
/// PutObjectTagging; s3s parses those bodies and checks none of their claims), with the body
/// buffered and verified; any other request as it is. The refusal is the answer to send
/// (400 `RequestTimeout` for a body whose client went silent, `in_flight::IdleBody`).
pub(crate) async fn checked_xml_body(
    req: s3s::HttpRequest,
) -> Result<s3s::HttpRequest, HttpResponse> {
    use crate::integrity::{MAX_XML_BODY, claims_anything, verify_buffered, xml_body};
    let streamed = req
        .headers()
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("aws-chunked"));
    let Some(checksums) = xml_body(req.method(), req.uri()) else {
        return Ok(req);
    };
    if streamed || !claims_anything(req.headers(), checksums) {
        return Ok(req);
    }
    let (parts, mut body) = req.into_parts();
    let bytes = match body.store_all_limited(MAX_XML_BODY).await {
        Ok(b) => b,
        Err(e) if crate::in_flight::is_idle_timeout(&*e) => {
            return Err(error_response(&crate::in_flight::request_timeout()));
        }
        Err(e) => {
            return Err(error_response(&s3s::s3_error!(
                MaxMessageLengthExceeded,
                "the request body could not be read whole (at most {MAX_XML_BODY} bytes): {e}"
            )));
        }
    };
    if let Err(e) = verify_buffered(&parts.headers, &bytes, checksums) {
        return Err(error_response(&e));
    }
    Ok(s3s::HttpRequest::from_parts(parts, Body::from(bytes)))
}

/// An S3 error as an HTTP answer (XML body, its status).
fn error_response(e: &s3s::S3Error) -> HttpResponse {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{}</Code><Message>{}</Message></Error>",
        e.code().as_str(),
        e.message()
            .unwrap_or("")
            .replace('&', "&amp;")
            .replace('<', "&lt;")
    );
    let mut resp = HttpResponse::new(Body::from(body));
    *resp.status_mut() = e.status_code().unwrap_or(StatusCode::BAD_REQUEST);
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/xml"));
    resp
}

/// What an error code means, for an error body that came without a `<Message>` (s3s's own
/// refusals: a bad signature, an invalid bucket name), so that clients print a sentence rather
/// than "Unknown". Source: Amazon S3 API Reference, "Error responses" (the meaning of each
/// code; the wording is ours).
fn standard_message(code: &str) -> String {
    match code {
        "SignatureDoesNotMatch" => "The request signature does not match the one computed from \
                                   your secret key and the request; check the key and how the \
                                   request is signed"
            .into(),
        "InvalidAccessKeyId" => "The access key ID is not known to this gateway".into(),
        "AccessDenied" => "Access denied".into(),
        "InvalidBucketName" => "The bucket name is not valid: 3 to 63 characters, lower-case \
                                letters, digits, '-' and '.', starting and ending with a letter \
                                or digit"
            .into(),
        "RequestTimeTooSkewed" => "The request's time differs too much from the gateway's".into(),
        "MethodNotAllowed" => "The method is not allowed on this resource".into(),
        "MissingContentLength" => "A Content-Length header is required".into(),
        "MalformedXML" => "The XML in the request body is not well formed or not valid".into(),
        "NotImplemented" => {
            "The request asks for functionality this gateway does not implement".into()
        }
        "NoSuchKey" => "The key does not exist".into(),
        "NoSuchBucket" => "The bucket does not exist".into(),
        "NoSuchUpload" => "The multipart upload does not exist: it was completed, aborted or \
                           never started"
            .into(),
        "InvalidRange" => "The requested range is not satisfiable for this object".into(),
        "InvalidArgument" => "An argument of the request is not valid".into(),
        other => format!("The request failed with S3 error code {other}"),
    }
}

/// Whether `req` has `Expect: 100-continue`: its client waits for an interim 100 before it
/// sends the body, and may never send it (RFC 9110, section 10.1.1).
pub(crate) fn expects_continue<B>(req: &http::Request<B>) -> bool {
    req.headers()
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// Marks an error answer to a request that [`expects_continue`] with `Connection: close`.
/// The answer may go out before the body was read (a refusal, a missing bucket, a failed
/// precondition), and then the client, which waited for a 100, does not send it (botocore
/// does not), while the connection would still expect its Content-Length bytes: the next
/// request on it lost its first bytes as the last one's body ("EAD /b/k" for HEAD), and
/// failed its signature. Closing the connection after such an answer keeps both sides in
/// step (the RFC's other choice, reading and dropping a body that may never come, would
/// hang).
pub(crate) fn close_after_refusal(resp: &mut HttpResponse) {
    if resp.status().as_u16() >= 400 {
        resp.headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
}

/// Stamps `resp` with request id `id`: the headers, `<RequestId>` in an XML error body that
/// lacks one, and a `<Message>` ([`standard_message`]) in one that has none.
pub(crate) fn stamp(resp: &mut HttpResponse, id: &str) {
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert("x-amz-request-id", v.clone());
        resp.headers_mut().insert("x-amz-id-2", v);
    }
    let status = resp.status().as_u16();
    if status < 400 {
        return;
    }
    let Some(bytes) = resp.body().bytes() else {
        tracing::debug!(request_id = id, status, "answered with an error");
        return;
    };
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    let code = text
        .find("<Code>")
        .zip(text.find("</Code>"))
        .and_then(|(start, end)| text.get(start + 6..end))
        .unwrap_or("");
    // Refusals and server errors are worth an operator's look (a HEAD's answer has no
    // body on the wire, so this line is where its code shows); the rest are routine.
    // A refusal at the in-flight bound (in_flight.rs) is counted instead: a line each would
    // flood the log under the very overload it reports.
    let busy = resp
        .extensions()
        .get::<crate::in_flight::Refused>()
        .is_some();
    if (status == 403 || status >= 500) && !busy {
        tracing::info!(request_id = id, status, code, "answered with an error");
    } else {
        tracing::debug!(request_id = id, status, code, "answered with an error");
    }
    if !text.contains("<Message>")
        && let (Some(start), Some(end)) = (text.find("<Code>"), text.find("</Code>"))
        && start + 6 <= end
    {
        let message = standard_message(&text[start + 6..end]);
        let at = end + "</Code>".len();
        text = format!("{}<Message>{message}</Message>{}", &text[..at], &text[at..]);
    }
    let stamped = match (text.contains("<RequestId>"), text.rfind("</Error>")) {
        (false, Some(at)) => format!("{}<RequestId>{id}</RequestId>{}", &text[..at], &text[at..]),
        _ => text,
    };
    if let Ok(len) = HeaderValue::from_str(&stamped.len().to_string())
        && resp.headers().contains_key("content-length")
    {
        resp.headers_mut().insert("content-length", len);
    }
    *resp.body_mut() = Body::from(stamped);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_without_a_sentence_still_gets_a_readable_message() {
        assert_eq!(
            standard_message("SlowDown"),
            "The request failed with S3 error code SlowDown"
        );
    }

    #[test]
    fn ids_are_distinct_and_errors_name_them() {
        let ids: std::collections::HashSet<Arc<str>> = (0..1000).map(|_| new_id()).collect();
        assert_eq!(ids.len(), 1000);
        let mut resp = HttpResponse::new(Body::from(
            "<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code></Error>".to_string(),
        ));
        *resp.status_mut() = StatusCode::NOT_FOUND;
        stamp(&mut resp, "ABC");
        let body = resp.body().bytes().expect("buffered");
        let text = String::from_utf8_lossy(&body);
        assert!(
            text.ends_with("<RequestId>ABC</RequestId></Error>"),
            "{text}"
        );
        assert!(
            text.contains("<Code>NoSuchKey</Code><Message>The key does not exist</Message>"),
            "a message where s3s gave none: {text}"
        );
        assert_eq!(
            resp.headers()
                .get("x-amz-request-id")
                .and_then(|v| v.to_str().ok()),
            Some("ABC")
        );
    }
}
