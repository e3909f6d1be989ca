//! The `s3` suite, over HTTP through the S3 gateway:
//!
//! - one object read back as consecutive ranged GETs. Ozone once served a ranged GET by
//!   reading and discarding everything before the range, so each GET of a 1000 MB object in
//!   20 MB ranges took longer than the one before; a gateway that seeks keeps the last GET as
//!   fast as the first.
//! - single PUTs and two-part multipart uploads of the same bytes, plain and with a checksum
//!   the client claims (CRC32C, CRC64NVME, SHA256), and the same bytes written straight
//!   through the client library, side by side: the ratios are the cost of verification and of
//!   the gateway (`put gateway/direct`). A plain PUT is not free of checksums: the gateway computes MD5 (the ETag)
//!   and CRC64NVME (stored) for every body.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ec_client::{ClientConfig, ReplicationConfig};
use ec_codec::EcReplicationConfig;
use minicluster::pattern;

use super::{Latencies, Report, Settings, ensure_bucket, write_key};

const BUCKET: &str = "bench-s3";

/// One unsigned ranged GET; returns the body.
async fn ranged_get(
    addr: SocketAddr,
    path: &str,
    first: u64,
    last: u64,
) -> anyhow::Result<Vec<u8>> {
    let r = crate::http::request(
        addr,
        "GET",
        path,
        &[("Range", format!("bytes={first}-{last}"))],
        &[],
    )
    .await?;
    if r.status != 206 {
        bail!("GET {path} bytes={first}-{last}: status {}", r.status);
    }
    Ok(r.body)
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    // 1000 MB in 20 MB ranges (scaled down with --quick).
    let (size, range) = match (s.quick, s.size_given) {
        (_, Some(size)) => (size, 20_000_000u64.min(size.max(1))),
        (true, None) => (40 << 20, 2 << 20),
        (false, None) => (1_000_000_000, 20_000_000),
    };
    let client = s.client(ClientConfig::default()).await?;
    ensure_bucket(
        &client,
        BUCKET,
        ReplicationConfig::Ec(EcReplicationConfig::default()),
        256 << 20,
    )
    .await?;
    let key = format!("object-{size}");
    write_key(&client, BUCKET, &key, size, 7).await?;
    let gw = s3_gateway::S3Gateway::start(
        client.clone(),
        s3_gateway::GatewayConfig::new(([127, 0, 0, 1], 0).into(), "bench", "bench").without_auth(),
    )
    .await
    .context("starting the gateway")?;
    let addr = gw.address();
    let path = format!("/{BUCKET}/{key}");
    let mut times: Vec<Duration> = Vec::new();
    let mut lat = Latencies::default();
    let mut want = Vec::new();
    let before = client.metrics();
    let mut bytes = 0u64;
    let mut elapsed = Duration::ZERO;
    let mut at = 0u64;
    while at < size {
        let last = (at + range).min(size) - 1;
        let t = Instant::now();
        let body = ranged_get(addr, &path, at, last).await?;
        let e = t.elapsed();
        elapsed += e;
        want.resize(body.len(), 0);
        pattern::fill(7, at, &mut want);
        if body != want {
            bail!("GET bytes={at}-{last} returned wrong bytes");
        }
        times.push(e);
        lat.push(e);
        bytes += body.len() as u64;
        at = last + 1;
    }
    let gets = times.len() as u64;
    let rpcs = client.metrics().since(&before);
    let lookups = gw.metrics().snapshot().key_lookups;
    gw.shutdown().await;
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let mut sorted = times.clone();
    sorted.sort();
    let mut row = super::report::row(
        "ranged-get-20mb",
        "seek",
        1,
        gets,
        bytes,
        elapsed,
        &lat,
        &rpcs,
    );
    row.first_ms = times.first().map(ms);
    row.median_ms = sorted.get(sorted.len() / 2).map(ms);
    row.last_ms = times.last().map(ms);
    row.mean_ms = Some(ms(&elapsed) / gets.max(1) as f64);
    row.min_ms = sorted.first().map(ms);
    row.max_ms = sorted.last().map(ms);
    let mut report = Report {
        suite: "s3".into(),
        started_unix_ms: started,
        config: serde_json::json!({"object_size": size, "range": range, "key_lookups": lookups, "settings": s.config_json()}),
        rows: vec![row],
        ratios: Default::default(),
    };
    report.rows.extend(put_rows(s, &client).await?);
    for a in ["crc32c", "crc64nvme", "sha256"] {
        report.mb_ratio(
            &format!("put-{a}/put-plain (MB/s)"),
            (&format!("put-{a}"), "single"),
            ("put-plain", "single"),
        );
    }
    report.mb_ratio(
        "mpu-crc32c/mpu-plain (MB/s)",
        ("mpu-crc32c", "multipart"),
        ("mpu-plain", "multipart"),
    );
    report.mb_ratio(
        "put gateway/direct (MB/s)",
        ("put-plain", "single"),
        ("put-direct", "client"),
    );
    if let (Some(f), Some(l)) = (times.first(), times.last())
        && !f.is_zero()
    {
        report.ratios.insert(
            "last GET / first GET".into(),
            (l.as_secs_f64() / f.as_secs_f64() * 1000.0).round() / 1000.0,
        );
    }
    Ok(report)
}

/// Sends `body` as an object PUT with `headers`; fails unless 200.
async fn put(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> anyhow::Result<crate::http::Response> {
    let r = crate::http::request(addr, "PUT", path, headers, body).await?;
    if r.status != 200 {
        bail!(
            "PUT {path}: status {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
    }
    Ok(r)
}

/// A two-part multipart upload of `body` (halves), each part claiming its `algorithm`
/// checksum when given (the upload created with it, FULL_OBJECT).
async fn multipart(
    addr: SocketAddr,
    path: &str,
    body: &[u8],
    algorithm: Option<&str>,
) -> anyhow::Result<()> {
    let create: Vec<(&str, String)> = match algorithm {
        Some(a) => vec![
            ("x-amz-checksum-algorithm", a.to_ascii_uppercase()),
            ("x-amz-checksum-type", "FULL_OBJECT".into()),
        ],
        None => Vec::new(),
    };
    let r = crate::http::request(addr, "POST", &format!("{path}?uploads"), &create, &[]).await?;
    let text = String::from_utf8_lossy(&r.body).to_string();
    let id = text
        .split("<UploadId>")
        .nth(1)
        .and_then(|t| t.split("</UploadId>").next())
        .with_context(|| format!("CreateMultipartUpload {path}: {text}"))?
        .to_string();
    let half = body.len() / 2;
    let mut xml = String::from("<CompleteMultipartUpload>");
    for (n, part) in [(1, &body[..half]), (2, &body[half..])] {
        let headers: Vec<(&str, String)> = algorithm
            .and_then(|a| s3_gateway::checksum_header(a, part))
            .into_iter()
            .collect();
        let r = put(
            addr,
            &format!("{path}?partNumber={n}&uploadId={id}"),
            &headers,
            part,
        )
        .await?;
        let etag = r
            .headers
            .iter()
            .find(|(k, _)| k == "etag")
            .map(|(_, v)| v.clone())
            .context("UploadPart answered no ETag")?;
        xml.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{etag}</ETag></Part>"
        ));
    }
    xml.push_str("</CompleteMultipartUpload>");
    let r = crate::http::request(
        addr,
        "POST",
        &format!("{path}?uploadId={id}"),
        &[],
        xml.as_bytes(),
    )
    .await?;
    if r.status != 200 {
        bail!("CompleteMultipartUpload {path}: status {}", r.status);
    }
    Ok(())
}

/// Single PUTs and multipart uploads, plain and with claimed checksums, and the direct write,
/// interleaved round by round (each round opening with the next of them) so that the
/// machine's noise and the order's effects fall on all of them alike.
///
/// Eight rounds (two with `--quick`): with four, `put gateway/direct` of the same build ranged
/// from 0.76 to 1.02 over nine runs in one afternoon (2026-12-07), because the direct write
/// alone swung between 171 and 270 MB/s from run to run with the machine's page-cache
/// cost (README, s3 suite).
async fn put_rows(s: &Settings, client: &ec_client::Client) -> anyhow::Result<Vec<super::Row>> {
    let size: usize = if s.quick { 12 << 20 } else { 100_000_000 };
    let rounds = if s.quick { 2 } else { 8 };
    let mut body = vec![0u8; size];
    pattern::fill(11, 0, &mut body);
    let gw = s3_gateway::S3Gateway::start(
        client.clone(),
        s3_gateway::GatewayConfig::new(([127, 0, 0, 1], 0).into(), "bench", "bench").without_auth(),
    )
    .await
    .context("starting the gateway")?;
    let addr = gw.address();
    let singles: [(&str, Option<&str>); 4] = [
        ("put-plain", None),
        ("put-crc32c", Some("crc32c")),
        ("put-crc64nvme", Some("crc64nvme")),
        ("put-sha256", Some("sha256")),
    ];
    let uploads: [(&str, Option<&str>); 2] = [("mpu-plain", None), ("mpu-crc32c", Some("crc32c"))];
    // The client computes its checksum before the clock starts, as an SDK streaming from a
    // file it already hashed would not, but the gateway's work is what is measured.
    let claims: Vec<Vec<(&str, String)>> = singles
        .iter()
        .map(|(_, a)| {
            a.and_then(|a| s3_gateway::checksum_header(a, &body))
                .into_iter()
                .collect()
        })
        .collect();
    // The same bytes written straight through the client library (no HTTP, no gateway), in
    // the same rounds: what the gateway's PUT is measured against.
    let direct_at = singles.len() + uploads.len();
    let mut times = vec![Duration::ZERO; direct_at + 1];
    let mut lats: Vec<Latencies> = (0..times.len()).map(|_| Latencies::default()).collect();
    // Each round starts one slot later, in an order that puts the plain PUT
    // beside the direct write: the slot that opens a round measured slower
    // (with the plain PUT always first and the direct write last,
    // `put gateway/direct` was 0.69 in a run whose SHA256 PUTs, second to
    // fourth, ran at 1.19 of the plain ones).
    let order: Vec<usize> = std::iter::once(0)
        .chain(std::iter::once(direct_at))
        .chain(1..direct_at)
        .collect();
    for round in 0..rounds {
        for k in 0..order.len() {
            let i = order[(k + round) % order.len()];
            let t = Instant::now();
            if i == direct_at {
                client
                    .put_key(BUCKET, &format!("put-direct-{round}"), None, &body)
                    .await
                    .context("a direct client write")?;
            } else if let Some(((name, _), headers)) = singles.iter().zip(&claims).nth(i) {
                put(addr, &format!("/{BUCKET}/{name}-{round}"), headers, &body).await?;
            } else if let Some((name, a)) = uploads.get(i - singles.len()) {
                multipart(addr, &format!("/{BUCKET}/{name}-{round}"), &body, *a).await?;
            }
            times[i] += t.elapsed();
            lats[i].push(t.elapsed());
        }
    }
    gw.shutdown().await;
    let none = client.metrics().since(&client.metrics());
    let bytes = (size * rounds) as u64;
    let names = singles
        .iter()
        .map(|(n, _)| (*n, "single"))
        .chain(uploads.iter().map(|(n, _)| (*n, "multipart")))
        .chain(std::iter::once(("put-direct", "client")));
    Ok(names
        .enumerate()
        .map(|(i, (name, mode))| {
            super::report::row(
                name,
                mode,
                1,
                rounds as u64,
                bytes,
                times[i],
                &lats[i],
                &none,
            )
        })
        .collect())
}
