//! The `write` suite: pipelined vs serial EC writes of the same key size,
//! a replicated write, and the codec's encode throughput as the ceiling the
//! write rate can be read against (ARCHITECTURE.md, write path).

use std::time::Instant;

use ec_client::{ClientConfig, EcWriteMode, ReplicationConfig};
use ec_codec::EcReplicationConfig;
use minicluster::pattern;

use super::{Latencies, Report, Settings, ensure_bucket, write_key};

const EC_BUCKET: &str = "bench-write-ec";
const REP_BUCKET: &str = "bench-write-rep";

/// Encodes `size` bytes of full rs-3-2-1024k stripes in memory, one thread.
fn codec_row(size: u64) -> anyhow::Result<super::Row> {
    let ec = EcReplicationConfig::default();
    let coder = ec.coder();
    let cell = usize::try_from(ec.cell_size())?;
    let data: Vec<Vec<u8>> = (0..ec.data())
        .map(|i| pattern::bytes(9, (i * cell) as u64, cell))
        .collect();
    let mut parity = vec![vec![0u8; cell]; ec.parity()];
    let stripes = size.div_ceil(ec.stripe_size()).max(1);
    let mut lat = Latencies::default();
    let start = Instant::now();
    for _ in 0..stripes {
        let t = Instant::now();
        let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        coder.encode(&inputs, &mut outs)?;
        lat.push(t.elapsed());
    }
    let elapsed = start.elapsed();
    Ok(super::report::row(
        "encode-rs-3-2-1024k",
        "codec",
        1,
        stripes,
        stripes * ec.stripe_size(),
        elapsed,
        &lat,
        &Default::default(),
    ))
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let setup = s.client(ClientConfig::default()).await?;
    ensure_bucket(
        &setup,
        EC_BUCKET,
        ReplicationConfig::Ec(EcReplicationConfig::default()),
        256 << 20,
    )
    .await?;
    ensure_bucket(
        &setup,
        REP_BUCKET,
        ReplicationConfig::Replicated { factor: 3 },
        256 << 20,
    )
    .await?;
    let mut rows = Vec::new();
    let runs = [
        ("write-ec", "serial", EC_BUCKET, EcWriteMode::Serial),
        ("write-ec", "pipelined", EC_BUCKET, EcWriteMode::Pipelined),
        (
            "write-replicated",
            "replicated",
            REP_BUCKET,
            EcWriteMode::Pipelined,
        ),
    ];
    for (i, (workload, mode, bucket, write_mode)) in runs.into_iter().enumerate() {
        let client = s
            .client(ClientConfig::default().with_ec_write_mode(write_mode))
            .await?;
        let before = client.metrics();
        let start = Instant::now();
        write_key(
            &client,
            bucket,
            &format!("{mode}-{}-{i}", s.size),
            s.size,
            i as u64,
        )
        .await?;
        let elapsed = start.elapsed();
        let rpcs = client.metrics().since(&before);
        let mut lat = Latencies::default();
        lat.push(elapsed);
        rows.push(super::report::row(
            workload,
            mode,
            1,
            s.size.div_ceil(1 << 20),
            s.size,
            elapsed,
            &lat,
            &rpcs,
        ));
    }
    rows.push(codec_row(s.size)?);
    let mut report = Report {
        suite: "write".into(),
        started_unix_ms: started,
        config: s.config_json(),
        rows,
        ratios: Default::default(),
    };
    report.ratio(
        "write-ec pipelined/serial",
        "write-ec",
        "pipelined",
        "serial",
    );
    report.mb_ratio(
        "write-ec pipelined MB/s / codec MB/s",
        ("write-ec", "pipelined"),
        ("encode-rs-3-2-1024k", "codec"),
    );
    Ok(report)
}
