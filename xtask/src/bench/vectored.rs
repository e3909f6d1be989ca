//! The `vectored` suite: many ranges of one key per call, as Parquet/ORC
//! readers ask for them. Set-up as in Ozone's experiment: a 100 MB key with
//! 20 MB blocks and 4 MB chunks, replicated, then the same as rs-3-2-1024k.
//!
//! Modes: `positional` (validate, merge nearby ranges, fetch merged ranges
//! concurrently through the stateless positioned read), `positional-no-merge`
//! (same, merging off), `serial-seek` (the old behaviour: each range is a
//! seek + read on one stream under a lock, one after another).

use std::ops::Range;
use std::time::{Duration, Instant};

use ec_client::{ClientConfig, KeyInputStream, RpcKind};
use rand::rngs::SmallRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::Mutex;

use super::{Latencies, Report, Row, Settings, ensure_ec_and_replicated, write_key};

const REP_BUCKET: &str = "bench-vec-rep";
const EC_BUCKET: &str = "bench-vec-ec";

/// The ranges of one call of `pattern` over a key of `len` bytes, with
/// "1 MB" ranges of `big` bytes and "128 KB" ranges of `small` bytes.
fn ranges(pattern: &str, len: u64, big: u64, small: u64, rng: &mut SmallRng) -> Vec<Range<u64>> {
    match pattern {
        "consecutive" => {
            let start = rng.random_range(0..=len - 20 * big);
            (0..20)
                .map(|i| start + i * big..start + (i + 1) * big)
                .collect()
        }
        "random" => {
            let slots = usize::try_from(len / big).unwrap_or(usize::MAX);
            let mut picked: Vec<usize> = sample(rng, slots, 20).into_vec();
            picked.sort_unstable();
            picked
                .into_iter()
                .map(|s| s as u64 * big..s as u64 * big + big)
                .collect()
        }
        _ => (0..5u64)
            .map(|i| {
                let start = i * (len / 5) + rng.random_range(0..len / 10);
                start..start + small
            })
            .collect(),
    }
}

async fn serial_seek(stream: &Mutex<KeyInputStream>, ranges: &[Range<u64>]) -> anyhow::Result<u64> {
    let mut bytes = 0;
    for r in ranges {
        let mut s = stream.lock().await;
        s.seek(std::io::SeekFrom::Start(r.start)).await?;
        let mut buf = vec![0u8; usize::try_from(r.end - r.start)?];
        s.read_exact(&mut buf).await?;
        bytes += buf.len() as u64;
    }
    Ok(bytes)
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    rows: &mut Vec<Row>,
    s: &Settings,
    bucket: &str,
    key: &str,
    kind: &str,
    mode: &str,
    config: ClientConfig,
    calls: u64,
    big: u64,
    small: u64,
) -> anyhow::Result<()> {
    let client = s.client(config).await?;
    let stream = client.open_key(bucket, key).await?;
    let len = stream.len();
    let locked = Mutex::new(stream.new_cursor());
    for pattern in ["consecutive", "random", "sparse"] {
        let mut rng = SmallRng::seed_from_u64(11);
        // Warm-up call: opens connections and block streams.
        let warm = ranges(pattern, len, big, small, &mut rng);
        stream.read_ranges(&warm).await?;
        let before = client.metrics();
        let mut lat = Latencies::default();
        let mut times: Vec<Duration> = Vec::new();
        let mut bytes = 0u64;
        let start = Instant::now();
        for _ in 0..calls {
            let rs = ranges(pattern, len, big, small, &mut rng);
            let t = Instant::now();
            bytes += match mode {
                "serial-seek" => serial_seek(&locked, &rs).await?,
                _ => stream
                    .read_ranges(&rs)
                    .await?
                    .iter()
                    .map(|b| b.len() as u64)
                    .sum(),
            };
            let e = t.elapsed();
            lat.push(e);
            times.push(e);
        }
        let elapsed = start.elapsed();
        let rpcs = client.metrics().since(&before);
        let mut row = super::report::row(
            &format!("{kind}-{pattern}"),
            mode,
            1,
            calls,
            bytes,
            elapsed,
            &lat,
            &rpcs,
        );
        let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
        row.mean_ms = Some(times.iter().map(ms).sum::<f64>() / times.len().max(1) as f64);
        row.min_ms = times.iter().map(ms).reduce(f64::min);
        row.max_ms = times.iter().map(ms).reduce(f64::max);
        row.read_chunks_per_call = Some(rpcs.rpcs(RpcKind::ReadChunk) as f64 / calls as f64);
        rows.push(row);
    }
    Ok(())
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    // 100 MB key, 20 MB blocks, 1 MB ranges; scaled down with --quick.
    let (size, block, big, small, calls) = if s.quick {
        (24u64 << 20, 8u64 << 20, 256u64 << 10, 32u64 << 10, 3)
    } else {
        (100_000_000, 20 << 20, 1 << 20, 128 << 10, 20)
    };
    let setup = s.client(ClientConfig::default()).await?;
    ensure_ec_and_replicated(&setup, EC_BUCKET, REP_BUCKET, block).await?;
    let key = format!("vectored-{size}");
    write_key(&setup, REP_BUCKET, &key, size, 5).await?;
    write_key(&setup, EC_BUCKET, &key, size, 5).await?;
    let mut rows = Vec::new();
    for (bucket, kind) in [(REP_BUCKET, "replicated"), (EC_BUCKET, "ec")] {
        for mode in [
            "positional",
            "positional-no-merge",
            "positional-merge-4m",
            "positional-seek-64k",
            "serial-seek",
        ] {
            // The two extra modes are the alternatives the defaults were
            // chosen against: merged ranges up to 4 MiB, and gaps up to 64 KiB.
            let defaults = ClientConfig::default();
            let config = match mode {
                "positional-no-merge" => defaults.with_vectored_merge(0, 0),
                "positional-merge-4m" => defaults.with_vectored_merge(4 << 10, 4 << 20),
                "positional-seek-64k" => defaults.with_vectored_merge(64 << 10, 1 << 20),
                _ => defaults,
            };
            measure(
                &mut rows, s, bucket, &key, kind, mode, config, calls, big, small,
            )
            .await?;
        }
    }
    let mut report = Report {
        suite: "vectored".into(),
        started_unix_ms: started,
        config: s.config_json(),
        rows,
        ratios: Default::default(),
    };
    for kind in ["replicated", "ec"] {
        for pattern in ["consecutive", "random", "sparse"] {
            let w = format!("{kind}-{pattern}");
            report.ratio(
                &format!("{w} positional/serial-seek"),
                &w,
                "positional",
                "serial-seek",
            );
            report.ratio(
                &format!("{w} positional/positional-no-merge"),
                &w,
                "positional",
                "positional-no-merge",
            );
        }
    }
    Ok(report)
}
