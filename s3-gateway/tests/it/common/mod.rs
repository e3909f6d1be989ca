//! Shared helpers of the gateway's integration tests: raw HTTP/1.1
//! exchanges, chunked-body decoding, deterministic data, and an AWS
//! Signature V4 signer (headers, and streaming chunked payloads as aws-cli
//! and the SDKs send them) written from the public specification.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// A raw HTTP/1.1 exchange: (status, headers lower-cased, body as received).
pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    exchange(addr, method, path, headers, body, body.len(), || {})
}

/// As [`http`], sending the first half of `body`, then calling `between` (the gateway is in
/// the middle of the request meanwhile), then the rest.
pub fn http_paused(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    between: impl FnOnce(),
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    exchange(addr, method, path, &[], body, body.len() / 2, between)
}

/// Waits until `condition` holds, checking every 5 ms; panics naming `what` if it does not
/// within 30 s (a condition the gateway reaches in microseconds, with room for a loaded
/// machine).
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// As [`http`], sending the body's first `pause_at` bytes, then calling `between`, then the
/// rest.
fn exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    pause_at: usize,
    between: impl FnOnce(),
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("write");
    // A server may answer (and close) before the whole body is sent, as it does for a request
    // it refuses from its headers alone: read its answer either way.
    let (first, rest) = body.split_at(pause_at.min(body.len()));
    let _ = s.write_all(first);
    let _ = s.flush();
    between();
    let _ = s.write_all(rest);
    read_answer(&mut s)
}

/// Reads a whole HTTP/1.1 answer (the server closes the connection): (status, headers
/// lower-cased, body as received).
fn read_answer(s: &mut TcpStream) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut raw = Vec::new();
    // A cut stream ends with an error or EOF: keep what arrived.
    let _ = s.read_to_end(&mut raw);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("header end");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .expect("status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, raw[split + 4..].to_vec())
}

pub fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Removes HTTP/1.1 chunked framing, keeping whatever complete data arrived.
pub fn dechunk(body: &[u8], headers: &[(String, String)]) -> Vec<u8> {
    if header(headers, "transfer-encoding") != Some("chunked") {
        return body.to_vec();
    }
    let mut out = Vec::new();
    let mut rest = body;
    while let Some(nl) = rest.windows(2).position(|w| w == b"\r\n") {
        let Ok(n) =
            usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap_or("").trim(), 16)
        else {
            break;
        };
        let start = nl + 2;
        if n == 0 || rest.len() < start + n {
            out.extend_from_slice(&rest[start.min(rest.len())..(start + n).min(rest.len())]);
            break;
        }
        out.extend_from_slice(&rest[start..start + n]);
        rest = &rest[(start + n + 2).min(rest.len())..];
    }
    out
}

/// Deterministic test bytes (the minicluster's pattern, seed 0).
pub fn data(len: usize) -> Vec<u8> {
    minicluster::pattern::bytes(0, 0, len)
}

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn hmac(key: &[u8], msg: &str) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("any key length");
    m.update(msg.as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// RFC 3986 encoding as SigV4 wants it (`/` kept in paths).
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if keep_slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A SigV4-signing S3 client over raw HTTP.
pub struct Signer {
    pub addr: SocketAddr,
    pub access_key: String,
    pub secret_key: String,
    /// Seconds added to the clock (to test skew).
    pub skew_secs: i64,
}

impl Signer {
    fn now(&self) -> (String, String) {
        let t = time::OffsetDateTime::now_utc() + time::Duration::seconds(self.skew_secs);
        let date = format!("{:04}{:02}{:02}", t.year(), u8::from(t.month()), t.day());
        (
            format!("{date}T{:02}{:02}{:02}Z", t.hour(), t.minute(), t.second()),
            date,
        )
    }

    fn signing_key(&self, date: &str) -> Vec<u8> {
        let k = hmac(format!("AWS4{}", self.secret_key).as_bytes(), date);
        let k = hmac(&k, "us-east-1");
        let k = hmac(&k, "s3");
        hmac(&k, "aws4_request")
    }

    /// Signs and sends `method path?query` with `body`; `headers` are signed too.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        self.send_with(method, path, query, headers, body, false)
    }

    /// Sends `body` as an unsigned aws-chunked stream with a trailer
    /// (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`, as current aws-cli and the SDKs
    /// send checksums): `trailer` is (name, value) sent after the last chunk
    /// and announced in `x-amz-trailer`. `decoded_len` is the length declared
    /// in `x-amz-decoded-content-length` (normally `body.len()`).
    pub fn send_trailer(
        &self,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
        trailer: (&str, &str),
        decoded_len: usize,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let mut payload = Vec::new();
        for piece in body.chunks(64 * 1024) {
            payload.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            payload.extend_from_slice(piece);
            payload.extend_from_slice(b"\r\n");
        }
        payload.extend_from_slice(format!("0\r\n{}:{}\r\n\r\n", trailer.0, trailer.1).as_bytes());
        let decoded = decoded_len.to_string();
        let mut hs: Vec<(&str, &str)> = headers.to_vec();
        hs.push(("content-encoding", "aws-chunked"));
        hs.push(("x-amz-decoded-content-length", &decoded));
        hs.push(("x-amz-trailer", trailer.0));
        self.send_raw(
            "PUT",
            path,
            query,
            &hs,
            &payload,
            "STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        )
    }

    /// Signs a request for `method path?query` with `headers` (plus host, date, payload hash
    /// and `content_length`), whose payload hash is `payload_hash`.
    fn sign(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        payload_hash: &str,
        content_length: usize,
    ) -> Signed {
        let (amz_date, date) = self.now();
        let scope = format!("{date}/us-east-1/s3/aws4_request");
        let mut q: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (uri_encode(k, false), uri_encode(v, false)))
            .collect();
        q.sort();
        let canonical_query = q
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let mut hs: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        hs.push(("host".into(), self.addr.to_string()));
        hs.push(("x-amz-date".into(), amz_date.clone()));
        hs.push(("x-amz-content-sha256".into(), payload_hash.to_string()));
        hs.push(("content-length".into(), content_length.to_string()));
        hs.sort();
        let canonical_headers: String = hs.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let signed: String = hs
            .iter()
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>()
            .join(";");
        let canonical = format!(
            "{method}\n{}\n{canonical_query}\n{canonical_headers}\n{signed}\n{payload_hash}",
            uri_encode(path, true)
        );
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            sha256_hex(canonical.as_bytes())
        );
        let key = self.signing_key(&date);
        let signature = hex::encode(hmac(&key, &to_sign));
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
            self.access_key
        );
        let target = if canonical_query.is_empty() {
            uri_encode(path, true)
        } else {
            format!("{}?{canonical_query}", uri_encode(path, true))
        };
        let mut headers: Vec<(String, String)> = hs
            .into_iter()
            .filter(|(k, _)| k != "host" && k != "content-length")
            .collect();
        headers.push(("authorization".into(), auth));
        Signed {
            headers,
            target,
            signature,
            key,
            amz_date,
            scope,
        }
    }

    /// Signs `PUT path` with `headers` and sends `body` in two halves, calling `between` after
    /// the first: a request the gateway is in the middle of while something else happens.
    pub fn send_paused(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        between: impl FnOnce(),
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let signed = self.sign("PUT", path, &[], headers, &sha256_hex(body), body.len());
        let refs: Vec<(&str, &str)> = signed
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        exchange(
            self.addr,
            "PUT",
            &signed.target,
            &refs,
            body,
            body.len() / 2,
            between,
        )
    }

    /// Signs with `payload_hash` and sends `payload` as it is.
    fn send_raw(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        payload: &[u8],
        payload_hash: &str,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let signed = self.sign(method, path, query, headers, payload_hash, payload.len());
        signed.send(self.addr, method, payload)
    }

    /// As [`send`](Self::send), with the body sent as signed aws-chunked
    /// chunks (`STREAMING-AWS4-HMAC-SHA256-PAYLOAD`) when `streaming`.
    pub fn send_with(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        body: &[u8],
        streaming: bool,
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        if !streaming {
            return self.send_raw(method, path, query, headers, body, &sha256_hex(body));
        }
        let chunk = 64 * 1024;
        let encoded_len = |n: usize| format!("{n:x};chunk-signature=").len() + 64 + 2 + n + 2;
        let total: usize = body
            .chunks(chunk)
            .map(|c| encoded_len(c.len()))
            .sum::<usize>()
            + encoded_len(0);
        let decoded = body.len().to_string();
        let mut hs: Vec<(&str, &str)> = headers.to_vec();
        hs.push(("content-encoding", "aws-chunked"));
        hs.push(("x-amz-decoded-content-length", &decoded));
        let signed = self.sign(
            method,
            path,
            query,
            &hs,
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            total,
        );
        let mut out = Vec::new();
        let mut prev = signed.signature.clone();
        let empty = sha256_hex(b"");
        let pieces: Vec<&[u8]> = body
            .chunks(chunk)
            .chain(std::iter::once(&b""[..]))
            .collect();
        for piece in pieces {
            let s = format!(
                "AWS4-HMAC-SHA256-PAYLOAD\n{}\n{}\n{prev}\n{empty}\n{}",
                signed.amz_date,
                signed.scope,
                sha256_hex(piece)
            );
            let sig = hex::encode(hmac(&signed.key, &s));
            out.extend_from_slice(
                format!("{:x};chunk-signature={sig}\r\n", piece.len()).as_bytes(),
            );
            out.extend_from_slice(piece);
            out.extend_from_slice(b"\r\n");
            prev = sig;
        }
        signed.send(self.addr, method, &out)
    }
}

/// A signed request, ready to send.
struct Signed {
    /// Headers to send (the signed ones but host and content-length, plus authorization).
    headers: Vec<(String, String)>,
    /// Path and canonical query.
    target: String,
    /// The request's signature (the seed of chunk signatures).
    signature: String,
    /// The signing key.
    key: Vec<u8>,
    amz_date: String,
    scope: String,
}

impl Signed {
    fn send(
        &self,
        addr: SocketAddr,
        method: &str,
        payload: &[u8],
    ) -> (u16, Vec<(String, String)>, Vec<u8>) {
        let refs: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        http(addr, method, &self.target, &refs, payload)
    }
}

/// An exchange's answer: (status, headers lower-cased, body).
pub type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A minicluster with its S3 gateway (SigV4 required), and a signer with its key pair.
pub async fn signed_cluster() -> (minicluster::MiniCluster, Signer) {
    let mut c = minicluster::MiniCluster::start(minicluster::MiniClusterConfig::default())
        .await
        .expect("cluster");
    let addr = c.start_s3_gateway(0, true).await.expect("gateway");
    let s = Signer {
        addr,
        access_key: minicluster::S3_ACCESS_KEY.into(),
        secret_key: minicluster::S3_SECRET_KEY.into(),
        skew_secs: 0,
    };
    (c, s)
}

/// An answer's body as text.
pub fn text(r: &Answer) -> String {
    String::from_utf8_lossy(&r.2).to_string()
}

/// An answer's status and the `<Code>` of its XML error body (empty when none).
pub fn code(r: &Answer) -> (u16, String) {
    let b = text(r);
    let c = b
        .split("<Code>")
        .nth(1)
        .and_then(|t| t.split("</Code>").next())
        .unwrap_or("")
        .to_string();
    (r.0, c)
}

/// The texts between each `open` and the next `close` in `body`, in order.
pub fn between(body: &str, open: &str, close: &str) -> Vec<String> {
    body.split(open)
        .skip(1)
        .filter_map(|t| t.split(close).next().map(str::to_string))
        .collect()
}
