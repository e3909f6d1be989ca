//! The `pread` suite: what reusing per-index block streams buys (ARCHITECTURE.md,
//! read path), measured side by side in one run on one cluster:
//! reuse vs reader-per-call vs the raw ReadChunk limit, reuse without
//! checksum verification (`reuse-noverify`), degraded reuse with
//! one data index down, a replicated key, a key with CRC32C checksums, and
//! thread scaling; and, on
//! clusters of their own started beside the bench's (which runs without
//! security), the same reuse preads with block tokens (`reuse-tokens`) and
//! with block tokens and TLS on every channel (`reuse-secure`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use datanode::{DatanodeAdminClient, FaultKind, FaultRule, RpcKind};
use ec_client::{
    ChecksumType, Client, ClientConfig, KeyInputStream, ReadMode, ReplicaIndex, ReplicationConfig,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

mod raw;

use super::{Latencies, Report, Row, Settings, ensure_bucket, ensure_ec_and_replicated, write_key};
use ozone_cli::table::Table;

const EC_BUCKET: &str = "bench-ec";
const REP_BUCKET: &str = "bench-rep";

/// The four workloads: (name, op size in bytes, kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Random,
    Sequential,
    Scan,
}

const WORKLOADS: [(&str, u64, Pattern); 4] = [
    ("random-pread-4k", 4096, Pattern::Random),
    ("random-pread-64k", 65536, Pattern::Random),
    ("sequential-64k", 65536, Pattern::Sequential),
    ("positioned-scan-64k", 65536, Pattern::Scan),
];

/// Offsets of workload `i` of [`WORKLOADS`] over a key of `len` bytes, with
/// `ops` operations: the same for every mode that replays them (the `reuse`
/// and raw rows compare the same reads).
fn workload_offsets(i: usize, ops: u64, len: u64) -> Vec<u64> {
    let (_, size, pattern) = WORKLOADS[i];
    offsets(pattern, ops, size, len, 100 + i as u64)
}

/// Operations of the random 1 MiB preads (a quarter of `--ops`) and their
/// offsets over a key of `len` bytes, shared by the cell-parallelism and raw rows.
fn one_mib_offsets(s: &Settings, len: u64) -> Vec<u64> {
    offsets(Pattern::Random, (s.ops / 4).max(1), 1 << 20, len, 400)
}

/// Offsets of `ops` operations of `size` bytes over a key of `len` bytes.
fn offsets(pattern: Pattern, ops: u64, size: u64, len: u64, seed: u64) -> Vec<u64> {
    let span = len.saturating_sub(size).max(1);
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..ops)
        .map(|i| match pattern {
            Pattern::Random => rng.random_range(0..span),
            Pattern::Sequential | Pattern::Scan => (i * size) % span,
        })
        .collect()
}

/// One step of a round of the suite: a mode (or a group of rows) measured
/// on every workload.
#[derive(Debug, Clone, Copy)]
enum Step {
    Reuse,
    NoVerify,
    Raw,
    Crc32c,
    PerCall,
    Degraded,
    Replicated,
    Threads,
    CellParallelism,
    Secured,
}

struct Measured {
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    lat: Latencies,
}

/// Positioned reads at `offs`, single task.
async fn preads(stream: &KeyInputStream, offs: &[u64], size: u64) -> anyhow::Result<Measured> {
    let mut buf = vec![0u8; usize::try_from(size)?];
    let mut lat = Latencies::default();
    let start = Instant::now();
    for &o in offs {
        let t = Instant::now();
        stream.read_exact_at(o, &mut buf).await?;
        lat.push(t.elapsed());
    }
    Ok(Measured {
        ops: offs.len() as u64,
        bytes: offs.len() as u64 * size,
        elapsed: start.elapsed(),
        lat,
    })
}

/// Sequential `read`s of `size` bytes from the start (wrapping at the end).
async fn sequential(stream: &mut KeyInputStream, ops: u64, size: u64) -> anyhow::Result<Measured> {
    let mut buf = vec![0u8; usize::try_from(size)?];
    let mut lat = Latencies::default();
    stream.seek(std::io::SeekFrom::Start(0)).await?;
    let start = Instant::now();
    let mut bytes = 0u64;
    for _ in 0..ops {
        let t = Instant::now();
        let mut n = stream.read(&mut buf).await?;
        if n == 0 {
            stream.seek(std::io::SeekFrom::Start(0)).await?;
            n = stream.read(&mut buf).await?;
        }
        bytes += n as u64;
        lat.push(t.elapsed());
    }
    Ok(Measured {
        ops,
        bytes,
        elapsed: start.elapsed(),
        lat,
    })
}

fn cells_touched(offs: &[u64], size: u64, cell: u64) -> u64 {
    offs.iter()
        .map(|&a| (a + size - 1) / cell - a / cell + 1)
        .sum()
}

/// Runs every workload on `client`'s view of `bucket/key` as `mode`.
async fn measure_modes(
    rows: &mut Vec<Row>,
    client: &Client,
    bucket: &str,
    key: &str,
    mode: &str,
    s: &Settings,
    cell: Option<u64>,
) -> anyhow::Result<()> {
    let mut stream = client.open_key(bucket, key).await?;
    let len = stream.len();
    // Warm-up: touch every data index and open the connections.
    let mut warm = vec![0u8; usize::try_from(len.min(4 << 20))?];
    stream.read_exact_at(0, &mut warm).await?;
    let warm_offs = offsets(Pattern::Random, 20, 4096, len, 7);
    preads(&stream, &warm_offs, 4096).await?;
    for (i, (name, size, pattern)) in WORKLOADS.iter().enumerate() {
        let before = client.metrics();
        let readers = client.ec_metrics();
        let offs = workload_offsets(i, s.ops, len);
        let m = match pattern {
            Pattern::Sequential => sequential(&mut stream, s.ops, *size).await?,
            Pattern::Random | Pattern::Scan => preads(&stream, &offs, *size).await?,
        };
        let rpcs = client.metrics().since(&before);
        let mut row = super::report::row(name, mode, 1, m.ops, m.bytes, m.elapsed, &m.lat, &rpcs);
        if let Some(c) = cell
            && *pattern != Pattern::Sequential
        {
            row.cells_touched = Some(cells_touched(&offs, *size, c));
        }
        row.readers_created = Some(client.ec_metrics().since(&readers).ec_readers_created);
        rows.push(row);
    }
    Ok(())
}

/// Random 1 MiB preads (each spans two cells on two indexes) with the cells
/// of one pread read concurrently vs one after another: the measurement
/// behind `ClientConfig::parallel_cell_reads`'s default.
async fn measure_cell_parallelism(
    rows: &mut Vec<Row>,
    key: &str,
    s: &Settings,
) -> anyhow::Result<()> {
    for (mode, parallel) in [("reuse", true), ("reuse-serial-cells", false)] {
        let client = s
            .client(ClientConfig::default().with_parallel_cell_reads(parallel))
            .await?;
        let stream = client.open_key(EC_BUCKET, key).await?;
        let len = stream.len();
        let mut warm = vec![0u8; usize::try_from(len.min(4 << 20))?];
        stream.read_exact_at(0, &mut warm).await?;
        let offs = one_mib_offsets(s, len);
        let before = client.metrics();
        let m = preads(&stream, &offs, 1 << 20).await?;
        let rpcs = client.metrics().since(&before);
        rows.push(super::report::row(
            "random-pread-1m",
            mode,
            1,
            m.ops,
            m.bytes,
            m.elapsed,
            &m.lat,
            &rpcs,
        ));
    }
    Ok(())
}

/// Random 4 KiB preads from `threads` tasks on one open key.
async fn measure_threads(
    rows: &mut Vec<Row>,
    client: &Client,
    key: &str,
    s: &Settings,
) -> anyhow::Result<()> {
    let stream = Arc::new(client.open_key(EC_BUCKET, key).await?);
    let len = stream.len();
    let mut warm = vec![0u8; usize::try_from(len.min(4 << 20))?];
    stream.read_exact_at(0, &mut warm).await?;
    let per_task = (s.ops / s.threads as u64).max(1);
    let before = client.metrics();
    let start = Instant::now();
    let tasks: Vec<_> = (0..s.threads)
        .map(|t| {
            let stream = Arc::clone(&stream);
            let offs = offsets(Pattern::Random, per_task, 4096, len, 300 + t as u64);
            tokio::spawn(async move { preads(&stream, &offs, 4096).await })
        })
        .collect();
    let mut lat = Latencies::default();
    let mut ops = 0;
    for t in tasks {
        let m = t.await??;
        ops += m.ops;
        lat.extend(m.lat);
    }
    let elapsed = start.elapsed();
    let rpcs = client.metrics().since(&before);
    rows.push(super::report::row(
        "random-pread-4k",
        "reuse",
        s.threads,
        ops,
        ops * 4096,
        elapsed,
        &lat,
        &rpcs,
    ));
    Ok(())
}

/// A cluster with security on (block tokens; and TLS when `tls`), holding
/// the same EC key as the bench's cluster, and a reuse client of it.
struct Secured {
    mode: &'static str,
    client: Client,
    _cluster: minicluster::MiniCluster,
}

/// The `reuse-tokens` and `reuse-secure` clusters (in-process benches only:
/// an external cluster's security is what it is, and with `--processes` an
/// in-process secured cluster would not measure security alone).
async fn secured_clusters(s: &Settings, key: &str) -> anyhow::Result<Vec<Secured>> {
    let mut out = Vec::new();
    if s.external || s.processes {
        return Ok(out);
    }
    for (mode, tls) in [("reuse-tokens", false), ("reuse-secure", true)] {
        let cluster = minicluster::MiniCluster::start(
            minicluster::MiniClusterConfig::default().with_tls(tls),
        )
        .await
        .with_context(|| format!("starting the {mode} cluster"))?;
        let client = cluster.client().await?;
        let ec = ec_codec::EcReplicationConfig::default();
        ensure_bucket(&client, EC_BUCKET, ReplicationConfig::Ec(ec), 256 << 20).await?;
        write_key(&client, EC_BUCKET, key, s.size, 1).await?;
        // A client of its own for the measurements (the writer's counters stay apart).
        let client = cluster.client().await?;
        out.push(Secured {
            mode,
            client,
            _cluster: cluster,
        });
    }
    Ok(out)
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let setup = s.client(ClientConfig::default()).await?;
    let ec = ec_codec::EcReplicationConfig::default();
    ensure_ec_and_replicated(&setup, EC_BUCKET, REP_BUCKET, 256 << 20).await?;
    let key = format!("pread-{}", s.size);
    let info = write_key(&setup, EC_BUCKET, &key, s.size, 1).await?;
    write_key(&setup, REP_BUCKET, &key, s.size, 1).await?;
    // The same bytes with CRC32C chunk checksums (Ozone's CRC32C): read by
    // a default client, which verifies with whatever type the chunks carry.
    let crc32c_key = format!("pread-crc32c-{}", s.size);
    let crc32c_writer = s
        .client(ClientConfig::default().with_checksum_type(ChecksumType::Crc32c))
        .await?;
    write_key(&crc32c_writer, EC_BUCKET, &crc32c_key, s.size, 1).await?;
    let secured = secured_clusters(s, &key).await?;

    let reuse = s.client(ClientConfig::default()).await?;
    // Fetches exactly the bytes asked for, like raw-readchunk, so
    // reuse-noverify/raw-readchunk is the client layers' cost alone and
    // reuse/reuse-noverify what end-to-end verification costs.
    let noverify = s
        .client(ClientConfig::default().with_verify_checksum(false))
        .await?;
    let per_call = s
        .client(ClientConfig::default().with_read_mode(ReadMode::ReaderPerCall))
        .await?;
    let degraded = s
        .client(ClientConfig::default().with_location_retries(0, Duration::ZERO))
        .await?;
    let replicated = s.client(ClientConfig::default()).await?;
    let crc32c = s.client(ClientConfig::default()).await?;
    // Degraded: index 1's datanode answers UNAVAILABLE to every read.
    let g = info
        .block_groups
        .first()
        .context("key has no block group")?;
    let victim = g
        .pipeline
        .nodes_for(ReplicaIndex::FIRST)
        .next()
        .context("no index 1")?
        .address
        .clone();
    let mut admin = DatanodeAdminClient::connect(&victim, setup.config().xceiver.tls.as_ref())
        .await
        .with_context(|| format!("connecting to the admin service of {victim}"))?;
    // Every mode and workload runs in each of a few rounds of ops/rounds
    // operations, and the rounds' figures add up: a single pass of a few
    // tenths of a second per row let one stall of this shared machine halve
    // a row. (positioned-scan-64k's own slowness was not a stall: see the
    // README, pread suite, on connections that carried bulk answers.)
    let rounds: u64 = if s.quick { 1 } else { 4 };
    let per_round = Settings {
        ops: (s.ops / rounds).max(1),
        ..s.clone()
    };
    let s = &per_round;
    let mut rows = Vec::new();
    // The steps of a round, the modes compared most closely first. Each
    // round starts one step later: the step that opens a round measured
    // slower (with `reuse` always first, `reuse/reuse-noverify` for 4 KiB
    // preads was 0.87-0.95 over eight runs; with `reuse-noverify` first, 0.95
    // and 1.04), so the opening falls on a different mode each round, as
    // the write suite's rounds do.
    let steps = [
        Step::Reuse,
        Step::NoVerify,
        Step::Raw,
        Step::Crc32c,
        Step::PerCall,
        Step::Degraded,
        Step::Replicated,
        Step::Threads,
        Step::CellParallelism,
        Step::Secured,
    ];
    for round in 0..rounds {
        for k in 0..steps.len() {
            // Each mode runs the four workloads back to back on its own
            // client (so counters and cached readers never mix), on the
            // same cluster and key.
            let cell = Some(ec.cell_size());
            match steps[(k + round as usize) % steps.len()] {
                Step::Reuse => {
                    measure_modes(&mut rows, &reuse, EC_BUCKET, &key, "reuse", s, cell).await?;
                }
                Step::NoVerify => {
                    measure_modes(
                        &mut rows,
                        &noverify,
                        EC_BUCKET,
                        &key,
                        "reuse-noverify",
                        s,
                        cell,
                    )
                    .await?;
                }
                Step::Raw => raw::measure_raw(&mut rows, &reuse, &info, ec, s).await?,
                Step::Crc32c => {
                    measure_modes(
                        &mut rows,
                        &crc32c,
                        EC_BUCKET,
                        &crc32c_key,
                        "reuse-crc32c",
                        s,
                        cell,
                    )
                    .await?;
                }
                Step::PerCall => {
                    measure_modes(
                        &mut rows,
                        &per_call,
                        EC_BUCKET,
                        &key,
                        "reader-per-call",
                        s,
                        cell,
                    )
                    .await?;
                }
                Step::Degraded => {
                    for rpc in [RpcKind::GetBlock, RpcKind::ReadChunk] {
                        admin
                            .inject(FaultRule::new(rpc, FaultKind::Unavailable)?)
                            .await?;
                    }
                    let result =
                        measure_modes(&mut rows, &degraded, EC_BUCKET, &key, "degraded", s, None)
                            .await;
                    admin.clear().await?;
                    result?;
                }
                Step::Replicated => {
                    measure_modes(
                        &mut rows,
                        &replicated,
                        REP_BUCKET,
                        &key,
                        "replicated",
                        s,
                        None,
                    )
                    .await?;
                }
                Step::Threads => measure_threads(&mut rows, &reuse, &key, s).await?,
                Step::CellParallelism => measure_cell_parallelism(&mut rows, &key, s).await?,
                Step::Secured => {
                    for sec in &secured {
                        measure_modes(&mut rows, &sec.client, EC_BUCKET, &key, sec.mode, s, cell)
                            .await?;
                    }
                }
            }
        }
    }
    let rows = super::report::merge_rounds(rows);

    let mut report = Report {
        suite: "pread".into(),
        started_unix_ms: started,
        config: s.config_json(),
        rows,
        ratios: Default::default(),
    };
    for (name, _, _) in WORKLOADS {
        report.ratio(
            &format!("{name} reuse/reader-per-call"),
            name,
            "reuse",
            "reader-per-call",
        );
        report.ratio(
            &format!("{name} reuse/raw-readchunk"),
            name,
            "reuse",
            "raw-readchunk",
        );
        report.ratio(
            &format!("{name} reuse/raw-verified"),
            name,
            "reuse",
            "raw-verified",
        );
        report.ratio(
            &format!("{name} raw-verified/raw-readchunk"),
            name,
            "raw-verified",
            "raw-readchunk",
        );
        report.ratio(
            &format!("{name} reuse-noverify/raw-readchunk"),
            name,
            "reuse-noverify",
            "raw-readchunk",
        );
        report.ratio(
            &format!("{name} reuse/reuse-noverify"),
            name,
            "reuse",
            "reuse-noverify",
        );
        report.ratio(&format!("{name} degraded/reuse"), name, "degraded", "reuse");
        report.ratio(
            &format!("{name} replicated/reuse"),
            name,
            "replicated",
            "reuse",
        );
        for mode in ["reuse-crc32c", "reuse-tokens", "reuse-secure"] {
            report.ratio(&format!("{name} {mode}/reuse"), name, mode, "reuse");
        }
    }
    report.ratio(
        "random-pread-1m reuse/raw-readchunk",
        "random-pread-1m",
        "reuse",
        "raw-readchunk",
    );
    report.ratio(
        "random-pread-1m raw-verified/raw-readchunk",
        "random-pread-1m",
        "raw-verified",
        "raw-readchunk",
    );
    report.ratio(
        "random-pread-1m reuse/raw-verified",
        "random-pread-1m",
        "reuse",
        "raw-verified",
    );
    report.ratio(
        "random-pread-1m parallel/serial cells",
        "random-pread-1m",
        "reuse",
        "reuse-serial-cells",
    );
    let single = report
        .find("random-pread-4k", "reuse")
        .map(|r| r.ops_per_sec);
    let multi = report
        .rows
        .iter()
        .find(|r| r.workload == "random-pread-4k" && r.threads == s.threads && s.threads > 1)
        .map(|r| r.ops_per_sec);
    if let (Some(a), Some(b)) = (single, multi) {
        report.ratios.insert(
            format!("random-pread-4k reuse {}-threads/1-thread", s.threads),
            ((b / a) * 1000.0).round() / 1000.0,
        );
    }
    Ok(report)
}

/// GetBlock and ReadChunk counts of the warm random 64 KiB preads, per mode.
pub(crate) fn rpc_table(report: &Report) -> String {
    let mut t = Table::new(&["random 64 KiB preads", "ops", "GetBlock", "ReadChunk"]);
    for mode in ["reuse", "reader-per-call"] {
        if let Some(r) = report.find("random-pread-64k", mode) {
            t.row(vec![
                mode.to_string(),
                r.ops.to_string(),
                r.rpcs
                    .get(RpcKind::GetBlock.name())
                    .copied()
                    .unwrap_or(0)
                    .to_string(),
                r.rpcs
                    .get(RpcKind::ReadChunk.name())
                    .copied()
                    .unwrap_or(0)
                    .to_string(),
            ]);
        }
    }
    t.render()
}
