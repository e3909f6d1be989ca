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
    s.write_all(body).expect("write body");
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
        let payload_hash = if streaming {
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD".to_string()
        } else {
            sha256_hex(body)
        };
        let mut hs: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        hs.push(("host".into(), self.addr.to_string()));
        hs.push(("x-amz-date".into(), amz_date.clone()));
        hs.push(("x-amz-content-sha256".into(), payload_hash.clone()));
        let chunk = 64 * 1024;
        let encoded_len = |n: usize| format!("{n:x};chunk-signature=").len() + 64 + 2 + n + 2;
        if streaming {
            hs.push(("content-encoding".into(), "aws-chunked".into()));
            hs.push((
                "x-amz-decoded-content-length".into(),
                body.len().to_string(),
            ));
            let total: usize = body
                .chunks(chunk)
                .map(|c| encoded_len(c.len()))
                .sum::<usize>()
                + encoded_len(0);
            hs.push(("content-length".into(), total.to_string()));
        } else {
            hs.push(("content-length".into(), body.len().to_string()));
        }
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
        let payload = if streaming {
            let mut out = Vec::new();
            let mut prev = signature.clone();
            let empty = sha256_hex(b"");
            let pieces: Vec<&[u8]> = body
                .chunks(chunk)
                .chain(std::iter::once(&b""[..]))
                .collect();
            for piece in pieces {
                let s = format!(
                    "AWS4-HMAC-SHA256-PAYLOAD\n{amz_date}\n{scope}\n{prev}\n{empty}\n{}",
                    sha256_hex(piece)
                );
                let sig = hex::encode(hmac(&key, &s));
                out.extend_from_slice(
                    format!("{:x};chunk-signature={sig}\r\n", piece.len()).as_bytes(),
                );
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
                prev = sig;
            }
            out
        } else {
            body.to_vec()
        };
        let target = if canonical_query.is_empty() {
            uri_encode(path, true)
        } else {
            format!("{}?{canonical_query}", uri_encode(path, true))
        };
        let mut req_headers: Vec<(String, String)> = hs
            .into_iter()
            .filter(|(k, _)| k != "host" && k != "content-length")
            .collect();
        req_headers.push(("authorization".into(), auth));
        let refs: Vec<(&str, &str)> = req_headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        http(self.addr, method, &target, &refs, &payload)
    }
}
