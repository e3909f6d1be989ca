//! `cargo xtask soak`: a long mixed workload against one minicluster while a
//! datanode is stopped and started on a schedule, sampling what must stay
//! flat (open block files, in-flight bytes, disk used, process RSS) and what
//! must stay zero (wrong bytes). Prints a row per interval, writes the
//! series as JSON and draws them as an SVG.

mod plot;
mod workload;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use ec_client::{BucketOptions, ClientError, EcReplicationConfig, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig};
use serde::Serialize;

use ozone_cli::table::Table;
use workload::{Counters, EC_BUCKET, REP_BUCKET, S3_BUCKET, Worker};

/// Arguments of `cargo xtask soak`.
#[derive(Debug, Args)]
pub(crate) struct SoakArgs {
    /// Minutes to run.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Seconds to run instead of --minutes (the short version `cargo test` runs).
    #[arg(long)]
    seconds: Option<f64>,
    /// Seconds between samples (default 10; 2 with --seconds under 60).
    #[arg(long)]
    interval: Option<f64>,
    /// Seconds between datanode stops; each stopped datanode starts again
    /// half a period later (default 60).
    #[arg(long, default_value_t = 60.0)]
    restart_every: f64,
    /// Concurrent workers, each with its own keys.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Largest object written, bytes (default 4 MiB).
    #[arg(long, default_value_t = 4 << 20)]
    max_size: u64,
    /// Datanodes (one more than rs-3-2 needs, so writes go on while one is down).
    #[arg(long, default_value_t = 6)]
    datanodes: usize,
    /// Each datanode's --max-open-files.
    #[arg(long, default_value_t = 64)]
    max_open_files: usize,
    /// Seed of the workload (printed; the same seed replays the same choices).
    #[arg(long)]
    seed: Option<u64>,
    /// Where to write the series (default target/soak/soak.json).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where to draw them (default target/soak/soak.svg).
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// One interval's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sample {
    /// Seconds since the start.
    pub(crate) t_s: f64,
    /// Operations completed in the interval, per second.
    pub(crate) ops_per_s: f64,
    /// Operations that failed in the interval (a datanode being down can
    /// fail some; none may return wrong bytes).
    pub(crate) errors: u64,
    /// Reads whose bytes matched no value the key may hold, since the start.
    pub(crate) wrong_total: u64,
    /// Block files held open, summed over datanodes.
    pub(crate) open_files: u64,
    /// Request payload bytes in flight at sampling time, summed over datanodes.
    pub(crate) inflight_bytes: u64,
    /// The most payload bytes any running datanode has had in flight since
    /// it started (bounded by its --max-inflight-bytes).
    pub(crate) peak_inflight_bytes: u64,
    /// Bytes under the cluster's data dir.
    pub(crate) disk_bytes: u64,
    /// Resident set size of this process (client, cluster and gateway), bytes.
    pub(crate) rss_bytes: u64,
    /// Replicas waiting in the om's deletion log.
    pub(crate) pending_deletions: u64,
    /// Datanode stopped at sampling time, if any.
    pub(crate) down: Option<usize>,
}

/// The whole run, as written to JSON.
#[derive(Debug, Serialize)]
struct SoakReport {
    seed: u64,
    seconds: f64,
    workers: usize,
    datanodes: usize,
    max_open_files: usize,
    ops: u64,
    errors: u64,
    wrong: u64,
    samples: Vec<Sample>,
}

fn du(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// `VmRSS` of this process, bytes (0 where /proc is missing).
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn secs(v: f64, flag: &str) -> anyhow::Result<Duration> {
    crate::demo::seconds(v, flag)
}

pub(crate) async fn run(args: SoakArgs) -> anyhow::Result<()> {
    let total = match args.seconds {
        Some(s) => secs(s, "--seconds")?,
        None => secs(args.minutes * 60.0, "--minutes")?,
    };
    let interval = secs(
        args.interval.unwrap_or(if total < Duration::from_secs(60) {
            2.0
        } else {
            10.0
        }),
        "--interval",
    )?;
    let restart_every = secs(args.restart_every, "--restart-every")?;
    if args.workers == 0 || args.max_size == 0 {
        bail!("--workers and --max-size must be positive");
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let out_dir = crate::workspace_root().join("target/soak");
    let json_path = args
        .json
        .clone()
        .unwrap_or_else(|| out_dir.join("soak.json"));
    let svg_path = args.svg.clone().unwrap_or_else(|| out_dir.join("soak.svg"));
    println!(
        "soak: {:.0} s, {} workers, {} datanodes (--max-open-files {}), a datanode stopped every {:.0} s, seed {seed}\n\
         columns: t (s), ops/s, errors, wrong, open files, in-flight MiB (sum), peak in-flight MiB (one datanode), disk MiB, RSS MiB, pending deletions, down",
        total.as_secs_f64(),
        args.workers,
        args.datanodes,
        args.max_open_files,
        restart_every.as_secs_f64()
    );

    let mut cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_datanodes(args.datanodes)
            .with_max_open_files(args.max_open_files),
    )
    .await
    .context("starting the minicluster")?;
    let s3 = cluster
        .start_s3_gateway(0, false)
        .await
        .context("starting the S3 gateway")?;
    let client = cluster.client().await?;
    for (bucket, replication) in [
        (
            EC_BUCKET,
            ReplicationConfig::Ec(EcReplicationConfig::default()),
        ),
        (REP_BUCKET, ReplicationConfig::Replicated { factor: 3 }),
        (
            S3_BUCKET,
            ReplicationConfig::Ec(EcReplicationConfig::default()),
        ),
    ] {
        match client
            .create_bucket(
                bucket,
                BucketOptions {
                    replication: Some(replication),
                    block_size: None,
                    ..Default::default()
                },
            )
            .await
        {
            Ok(_) => {}
            Err(ClientError::Om {
                code: ec_client::OmErrorCode::BucketAlreadyExists,
                ..
            }) => {}
            Err(e) => return Err(e.into()),
        }
    }

    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for id in 0..args.workers {
        let w = Worker {
            id,
            client: cluster.client().await?,
            s3: Some(s3),
            counters: Arc::clone(&counters),
            max_size: args.max_size,
            keys: 8,
            seed: seed.wrapping_add(id as u64),
        };
        tasks.push(tokio::spawn(w.run(Arc::clone(&stop))));
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut table = Table::new(&[
        "t (s)",
        "ops/s",
        "errors",
        "wrong",
        "open files",
        "in-flight MiB (sum)",
        "peak in-flight MiB (one datanode)",
        "disk MiB",
        "RSS MiB",
        "pending deletions",
        "down",
    ]);
    let mut down: Option<(usize, Instant)> = None;
    let mut next_stop = started + restart_every;
    let mut victim = 0usize;
    let mut last_ops = 0;
    let mut last_errors = 0;
    let mut next_sample = started + interval;
    while started.elapsed() < total {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = Instant::now();
        // Chaos: stop one datanode every period, start it half a period later.
        if let Some((n, since)) = down
            && now.duration_since(since) >= restart_every / 2
        {
            cluster.datanode_mut(n)?.restart().await?;
            down = None;
        }
        if down.is_none() && now >= next_stop {
            cluster.datanode_mut(victim)?.stop().await;
            down = Some((victim, now));
            victim = (victim + 1) % args.datanodes;
            next_stop = now + restart_every;
        }
        if now < next_sample {
            continue;
        }
        next_sample = now + interval;
        let ops = counters.ops.load(Ordering::Relaxed);
        let errors = counters.errors.load(Ordering::Relaxed);
        let (mut open_files, mut inflight, mut peak) = (0, 0, 0);
        for d in cluster.datanodes() {
            if let Some(node) = d.node() {
                open_files += node.store().stats().open_files;
                inflight += node.metrics().inflight_bytes();
                peak = node.metrics().peak_inflight_bytes().max(peak);
            }
        }
        let s = Sample {
            t_s: started.elapsed().as_secs_f64(),
            ops_per_s: (ops - last_ops) as f64 / interval.as_secs_f64(),
            errors: errors - last_errors,
            wrong_total: counters.wrong.load(Ordering::Relaxed),
            open_files,
            inflight_bytes: inflight,
            peak_inflight_bytes: peak,
            disk_bytes: du(cluster.base_dir()),
            rss_bytes: rss_bytes(),
            pending_deletions: cluster.om().pending_deletions().await.unwrap_or(0),
            down: down.map(|(n, _)| n),
        };
        last_ops = ops;
        last_errors = errors;
        let row = vec![
            format!("{:.0}", s.t_s),
            format!("{:.1}", s.ops_per_s),
            s.errors.to_string(),
            s.wrong_total.to_string(),
            s.open_files.to_string(),
            format!("{:.1}", s.inflight_bytes as f64 / 1048576.0),
            format!("{:.1}", s.peak_inflight_bytes as f64 / 1048576.0),
            format!("{:.1}", s.disk_bytes as f64 / 1048576.0),
            format!("{:.1}", s.rss_bytes as f64 / 1048576.0),
            s.pending_deletions.to_string(),
            s.down.map_or_else(|| "-".to_string(), |n| format!("dn{n}")),
        ];
        println!("{}", row.join("  "));
        table.row(row);
        samples.push(s);
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.context("a worker panicked")?;
    }
    if let Some((n, _)) = down {
        cluster.datanode_mut(n)?.restart().await?;
    }
    let report = SoakReport {
        seed,
        seconds: started.elapsed().as_secs_f64(),
        workers: args.workers,
        datanodes: args.datanodes,
        max_open_files: args.max_open_files,
        ops: counters.ops.load(Ordering::Relaxed),
        errors: counters.errors.load(Ordering::Relaxed),
        wrong: counters.wrong.load(Ordering::Relaxed),
        samples,
    };
    cluster.shutdown().await;
    println!("\n{}\n", table.render());
    if let Some(parent) = json_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(&json_path, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", json_path.display()))?;
    if let Some(parent) = svg_path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    plot::draw(&report.samples, &svg_path)?;
    println!(
        "{} ops, {} failed (datanode restarts), {} wrong; series in {}, drawn in {}",
        report.ops,
        report.errors,
        report.wrong,
        json_path.display(),
        svg_path.display()
    );
    if report.wrong > 0 {
        bail!("{} reads returned wrong bytes (seed {seed})", report.wrong);
    }
    Ok(())
}
