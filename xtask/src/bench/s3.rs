//! The `s3` suite: one object read back as consecutive ranged GETs over
//! HTTP through the S3 gateway. Ozone once served a ranged GET by reading
//! and discarding everything before the range, so each GET of a 1000 MB
//! object in 20 MB ranges took longer than the one before; a gateway that
//! seeks keeps the last GET as fast as the first.

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
