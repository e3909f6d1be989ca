//! The `write` suite: pipelined vs serial EC writes of the same key size
//! (pipelined with the default window of stripes in flight, and with one
//! stripe at a time), a replicated write, and two ceilings the write rate can be read against
//! (ARCHITECTURE.md, write path): the codec's encode throughput, and the
//! disk's (`disk-limit`: the bytes the EC write stores, written straight to
//! files with one fsync per file, on the datanodes' file system, in the
//! same rounds).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ec_client::{ClientConfig, EcWriteMode, RpcKind};
use ec_codec::EcReplicationConfig;
use minicluster::pattern;

use super::{Latencies, Report, Settings, ensure_ec_and_replicated};

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

/// The disk's own limit for what an EC write of `size` user bytes stores:
/// `size × (d+p)/d` bytes written in 1 MiB writes to d+p files at once (as
/// the datanodes hold one internal block each), each file fsynced once at
/// its end, in `dir` on the datanodes' file system. Returns the time taken
/// and the bytes stored.
fn disk_limit_write(dir: &std::path::Path, size: u64) -> anyhow::Result<(Duration, u64)> {
    use std::io::Write;
    let ec = EcReplicationConfig::default();
    let per_file = size.div_ceil(ec.data() as u64);
    let files = ec.total();
    std::fs::create_dir_all(dir)?;
    let buf = pattern::bytes(13, 0, 1 << 20);
    let start = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..files)
            .map(|i| {
                let path = dir.join(format!("index-{}.block", i + 1));
                let buf = &buf;
                scope.spawn(move || -> std::io::Result<()> {
                    let mut f = std::fs::File::create(&path)?;
                    let mut left = per_file;
                    while left > 0 {
                        let n = left.min(buf.len() as u64);
                        f.write_all(&buf[..usize::try_from(n).unwrap_or(buf.len())])?;
                        left -= n;
                    }
                    f.sync_all()
                })
            })
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a disk-limit writer panicked"))??;
        }
        Ok(())
    })?;
    let elapsed = start.elapsed();
    Ok((elapsed, per_file * files as u64))
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let setup = s.client(ClientConfig::default()).await?;
    ensure_ec_and_replicated(&setup, EC_BUCKET, REP_BUCKET, 256 << 20).await?;
    // (workload, mode, bucket, write mode, stripes in flight).
    let in_flight = ClientConfig::default().ec_stripes_in_flight;
    let runs = [
        ("write-ec", "serial", EC_BUCKET, EcWriteMode::Serial, 1),
        (
            "write-ec",
            "pipelined",
            EC_BUCKET,
            EcWriteMode::Pipelined,
            in_flight,
        ),
        // One stripe in flight: every index waits for the others (what the
        // window of stripes in flight is measured against).
        (
            "write-ec",
            "pipelined-1",
            EC_BUCKET,
            EcWriteMode::Pipelined,
            1,
        ),
        (
            "write-replicated",
            "replicated",
            REP_BUCKET,
            EcWriteMode::Pipelined,
            in_flight,
        ),
    ];
    // Interleaved rounds, each starting with the next run, so that the
    // machine's noise and the order effects (here a write's CPU cost grows
    // in the rounds after the first, whichever run comes first) fall on
    // every run alike; the disk-limit write (slot `runs.len()`) is in every
    // round too. Times add up over the rounds.
    let rounds: usize = if s.quick { 1 } else { 4 };
    let slots = runs.len() + 1;
    let mut times = vec![Duration::ZERO; slots];
    let mut lats: Vec<Latencies> = (0..slots).map(|_| Latencies::default()).collect();
    let mut rpcs: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); slots];
    let mut disk_stored = 0u64;
    // The key's bytes, made before any clock starts (the disk-limit row
    // writes a ready buffer too).
    let data = pattern::bytes(5, 0, usize::try_from(s.size)?);
    for round in 0..rounds {
        for step in 0..slots {
            let i = (round + step) % slots;
            let Some((_, mode, bucket, write_mode, in_flight)) = runs.get(i) else {
                if let Some(dir) = &s.scratch_dir {
                    // Each round's files are kept until the suite ends, as
                    // the keys are: every round writes into fresh page cache.
                    let (elapsed, stored) =
                        disk_limit_write(&dir.join(format!("round-{round}")), s.size)?;
                    times[i] += elapsed;
                    lats[i].push(elapsed);
                    disk_stored += stored;
                }
                continue;
            };
            let client = s
                .client(
                    ClientConfig::default()
                        .with_ec_write_mode(*write_mode)
                        .with_ec_stripes_in_flight(*in_flight),
                )
                .await?;
            let before = client.metrics();
            let start = Instant::now();
            let mut w = client
                .create_key(bucket, &format!("{mode}-{}-{round}", s.size), None)
                .await?;
            for piece in data.chunks(1 << 20) {
                w.write(piece).await?;
            }
            w.close().await?;
            let elapsed = start.elapsed();
            times[i] += elapsed;
            lats[i].push(elapsed);
            let since = client.metrics().since(&before);
            for k in RpcKind::ALL {
                let v = since.rpcs(k);
                if v > 0 {
                    *rpcs[i].entry(k.name().to_string()).or_default() += v;
                }
            }
        }
    }
    if let Some(dir) = &s.scratch_dir
        && dir.exists()
    {
        std::fs::remove_dir_all(dir)?;
    }
    let mut rows = Vec::new();
    let total = s.size * rounds as u64;
    for (i, (workload, mode, _, _, _)) in runs.iter().enumerate() {
        let mut row = super::report::row(
            workload,
            mode,
            1,
            total.div_ceil(1 << 20),
            total,
            times[i],
            &lats[i],
            &Default::default(),
        );
        row.rpcs = std::mem::take(&mut rpcs[i]);
        rows.push(row);
    }
    rows.push(codec_row(s.size)?);
    if disk_stored > 0 {
        let files = EcReplicationConfig::default().total();
        rows.push(super::report::row(
            "disk-limit",
            "fsync-per-file",
            files,
            (files * rounds) as u64,
            disk_stored,
            times[runs.len()],
            &lats[runs.len()],
            &Default::default(),
        ));
    }
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
    report.ratio(
        "write-ec pipelined/pipelined-1",
        "write-ec",
        "pipelined",
        "pipelined-1",
    );
    report.mb_ratio(
        "write-ec pipelined MB/s / codec MB/s",
        ("write-ec", "pipelined"),
        ("encode-rs-3-2-1024k", "codec"),
    );
    // The pipelined row counts user bytes; the disk-limit row bytes stored.
    let ec = EcReplicationConfig::default();
    report.scaled_mb_ratio(
        "write-ec pipelined/disk-limit",
        ("write-ec", "pipelined"),
        ("disk-limit", "fsync-per-file"),
        ec.total() as f64 / ec.data() as f64,
    );
    Ok(report)
}
