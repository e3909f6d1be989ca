//! A minimal HTTP/1.1 client for the S3 gateway's unsigned test mode (one
//! request per connection, `Connection: close`, bodies with Content-Length):
//! enough for the benchmark's ranged GETs and the soak's PUT/GET/DELETE.

use std::net::SocketAddr;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// A response: status code, headers (names lower-cased) and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

/// Sends `method path` with `headers` and `body` to `addr`; reads the status
/// line, the headers and a Content-Length body (none for HEAD-like answers
/// without one).
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> anyhow::Result<Response> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut stream = BufReader::new(stream);
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "PUT" {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    stream.get_mut().write_all(req.as_bytes()).await?;
    stream.get_mut().write_all(body).await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: bad status line {:?}", line.trim()))?;
    let mut length = None;
    let mut headers = Vec::new();
    loop {
        line.clear();
        stream.read_line(&mut line).await?;
        let l = line.trim();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = Some(v.trim().parse::<usize>()?);
            }
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let mut body = vec![0u8; length.unwrap_or(0)];
    stream.read_exact(&mut body).await?;
    Ok(Response {
        status,
        headers,
        body,
    })
}
