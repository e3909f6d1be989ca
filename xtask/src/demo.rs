//! `cargo xtask minicluster`: start a cluster, write a key, read it back and
//! verify every byte, print the cost, serve until Ctrl-C.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use ec_client::{
    BucketOptions, Client, EcReplicationConfig, MetricsSnapshot, ReplicationConfig, RpcKind,
};
use indicatif::{ProgressBar, ProgressStyle};
use minicluster::{ControlServer, MiniCluster, MiniClusterConfig, pattern};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::AsyncReadExt;

use ozone_cli::table::Table;

/// Arguments of `cargo xtask minicluster`.
#[derive(Debug, Args)]
pub(crate) struct MiniclusterArgs {
    /// Number of datanodes.
    #[arg(long, default_value_t = 5)]
    datanodes: usize,
    /// EC scheme of the demo bucket.
    #[arg(long, default_value = "rs-3-2-1024k")]
    ec: EcReplicationConfig,
    /// Internal block size in bytes (a block group holds d × this many data bytes).
    #[arg(long, default_value_t = 256 * 1024 * 1024)]
    block_size: u64,
    /// Directory for cluster data and cluster.json (default target/minicluster).
    /// The om/ and dnN/ directories an earlier run left there are removed at
    /// start; a minicluster already serving from it is never touched (the
    /// directory is locked).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Write this file as the demo key instead of generated data.
    #[arg(long, conflicts_with = "demo_size")]
    input: Option<PathBuf>,
    /// Bytes of generated data to write as the demo key.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    demo_size: u64,
    /// Stop after the demo instead of serving until Ctrl-C.
    #[arg(long)]
    exit: bool,
    /// Port of the S3 gateway on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    s3_port: u16,
    /// Do not start the S3 gateway.
    #[arg(long)]
    no_s3: bool,
    /// Seconds between datanode heartbeats.
    #[arg(long, default_value_t = 1.0)]
    heartbeat_interval: f64,
    /// Seconds between full block reports from each datanode (a block lost on a live
    /// datanode is repaired after the next one).
    #[arg(long, default_value_t = 60.0)]
    block_report_interval: f64,
    /// Seconds without a heartbeat before the om marks a datanode STALE.
    #[arg(long, default_value_t = 5.0)]
    stale_after: f64,
    /// Seconds without a heartbeat before the om marks a datanode DEAD.
    #[arg(long, default_value_t = 10.0)]
    dead_after: f64,
    /// Run without security: no block tokens (on by default: every data
    /// RPC must carry a block token the om issued).
    #[arg(long)]
    no_security: bool,
    /// Seconds a block token stays valid (with security on).
    #[arg(long, default_value_t = om::DEFAULT_BLOCK_TOKEN_LIFETIME.as_secs_f64())]
    block_token_lifetime: f64,
    /// TLS on every gRPC channel and HTTPS on the S3 gateway: a throwaway
    /// CA and certificate are made under DIR/tls/, and cluster.json names
    /// the CA (`tls.ca`) for clients.
    #[arg(long)]
    tls: bool,
}

/// A positive number of seconds from a flag.
pub(crate) fn seconds(v: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{flag} must be a positive number of seconds"))
}

/// Where the demo's source bytes come from, readable at any offset.
enum Source {
    Pattern { seed: u64, len: u64 },
    File { file: std::fs::File, len: u64 },
}

impl Source {
    fn len(&self) -> u64 {
        match self {
            Self::Pattern { len, .. } | Self::File { len, .. } => *len,
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> anyhow::Result<()> {
        match self {
            Self::Pattern { seed, .. } => {
                pattern::fill(*seed, offset, buf);
                Ok(())
            }
            Self::File { file, .. } => file
                .read_exact_at(buf, offset)
                .with_context(|| format!("reading the input file at {offset}")),
        }
    }
}

struct Phase {
    name: &'static str,
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    rpcs: MetricsSnapshot,
}

pub(crate) async fn run(args: MiniclusterArgs) -> anyhow::Result<()> {
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| crate::workspace_root().join("target/minicluster"));
    // The minicluster locks DIR before it removes what an earlier run left
    // there (its own om/ and dnN/ directories, nothing else), so a second
    // one started while this serves is refused and touches nothing.
    let mut cluster = MiniCluster::start(
        MiniClusterConfig::default()
            .with_datanodes(args.datanodes)
            .with_base_dir(&dir)
            .with_clean(true)
            .with_block_size(args.block_size)
            .with_replication(ReplicationConfig::Ec(args.ec))
            .with_liveness(
                seconds(args.heartbeat_interval, "--heartbeat-interval")?,
                seconds(args.stale_after, "--stale-after")?,
                seconds(args.dead_after, "--dead-after")?,
            )
            .with_tls(args.tls)
            .with_block_report_interval(seconds(
                args.block_report_interval,
                "--block-report-interval",
            )?)
            .with_security(if args.no_security {
                None
            } else {
                Some(om::BlockTokenConfig {
                    lifetime: seconds(args.block_token_lifetime, "--block-token-lifetime")?,
                })
            }),
    )
    .await
    .context("starting the minicluster")?;
    if !args.no_s3 {
        cluster
            .start_s3_gateway(args.s3_port, true)
            .await
            .context("starting the S3 gateway")?;
        let endpoint = cluster.info().s3.map(|s| s.endpoint).unwrap_or_default();
        println!(
            "s3 gateway {endpoint}  (access key {}, secret key {})",
            minicluster::S3_ACCESS_KEY,
            minicluster::S3_SECRET_KEY
        );
    }
    let json = dir.join("cluster.json");
    let info = cluster.info();
    MiniCluster::write_cluster_json(&info, &json)?;
    println!(
        "om {}  ({} datanodes, {})",
        cluster.om_address(),
        args.datanodes,
        args.ec
    );
    if let Some(m) = &info.metrics {
        println!(
            "metrics (Prometheus): om {}  datanode 0 {}",
            m.om,
            m.datanodes.first().map_or("-", String::as_str)
        );
    }
    println!("cluster.json: {}", json.display());
    if let Some(t) = &info.tls {
        println!(
            "TLS on: clients trust the CA {} (ozone and cargo xtask find it in cluster.json)",
            t.ca
        );
    }

    let client = cluster.client().await?;
    let result = demo(&client, &args).await;
    match result {
        Ok(table) => println!("\n{table}\n"),
        Err(e) => {
            cluster.shutdown().await;
            return Err(e);
        }
    }
    if args.exit {
        cluster.shutdown().await;
    } else {
        let mut info = cluster.info();
        let shared = Arc::new(tokio::sync::Mutex::new(cluster));
        let control = ControlServer::start(([127, 0, 0, 1], 0).into(), Arc::clone(&shared))
            .await
            .context("starting the control service")?;
        info.control = Some(control.address().to_string());
        MiniCluster::write_cluster_json(&info, &json)?;
        println!(
            "serving; try `cargo xtask key ls demo` or `cargo xtask dn stop 0`. Ctrl-C stops."
        );
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        control.shutdown().await;
        match Arc::try_unwrap(shared) {
            Ok(cluster) => cluster.into_inner().shutdown().await,
            Err(_) => tracing::warn!("cluster still shared at exit; not waiting for datanodes"),
        }
    }
    let _ = std::fs::remove_file(&json);
    Ok(())
}

async fn demo(client: &Client, args: &MiniclusterArgs) -> anyhow::Result<String> {
    let (source, key) = match &args.input {
        Some(path) => {
            let file =
                std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
            let len = file.metadata()?.len();
            let name = path
                .file_name()
                .map_or_else(|| "input".to_string(), |n| n.to_string_lossy().into_owned());
            (Source::File { file, len }, name)
        }
        None => (
            Source::Pattern {
                seed: 42,
                len: args.demo_size,
            },
            "generated".to_string(),
        ),
    };
    let len = source.len();
    client
        .create_bucket(
            "demo",
            BucketOptions {
                replication: Some(ReplicationConfig::Ec(args.ec)),
                block_size: Some(args.block_size),
                ..Default::default()
            },
        )
        .await?;
    let mut phases = Vec::new();

    // 1. Write, with a progress bar.
    let bar = ProgressBar::new(len).with_style(
        ProgressStyle::with_template(
            "writing {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let before = client.metrics();
    let start = Instant::now();
    let mut writer = client.create_key("demo", &key, None).await?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = usize::try_from((len - at).min(buf.len() as u64))?;
        source.read_at(at, &mut buf[..n])?;
        writer.write(&buf[..n]).await?;
        at += n as u64;
        bar.set_position(at);
    }
    let info = writer.close().await?;
    bar.finish_and_clear();
    phases.push(Phase {
        name: "write",
        ops: len.div_ceil(1 << 20),
        bytes: len,
        elapsed: start.elapsed(),
        rpcs: client.metrics().since(&before),
    });
    println!(
        "wrote demo/{key}: {len} bytes in {} block group(s)",
        info.block_groups.len()
    );

    // 2. Sequential read, verified.
    let mut stream = client.open_key("demo", &key).await?;
    let before = client.metrics();
    let start = Instant::now();
    let mut got = vec![0u8; 1 << 20];
    let mut want = vec![0u8; 1 << 20];
    let mut at = 0u64;
    let mut reads = 0u64;
    loop {
        let n = stream.read(&mut got).await?;
        if n == 0 {
            break;
        }
        source.read_at(at, &mut want[..n])?;
        if got[..n] != want[..n] {
            bail!(
                "sequential read differs from the source within bytes {at}..{}",
                at + n as u64
            );
        }
        at += n as u64;
        reads += 1;
    }
    if at != len {
        bail!("sequential read returned {at} bytes, expected {len}");
    }
    phases.push(Phase {
        name: "sequential read",
        ops: reads,
        bytes: len,
        elapsed: start.elapsed(),
        rpcs: client.metrics().since(&before),
    });

    // 3. Random preads of 4 KiB and 64 KiB, verified.
    for (name, size) in [("pread 4 KiB", 4096u64), ("pread 64 KiB", 65536)] {
        if len < size {
            continue;
        }
        let mut rng = SmallRng::seed_from_u64(size);
        let mut got = vec![0u8; usize::try_from(size)?];
        let mut want = got.clone();
        let before = client.metrics();
        let start = Instant::now();
        for _ in 0..2000 {
            let pos = rng.random_range(0..=len - size);
            stream.read_exact_at(pos, &mut got).await?;
            source.read_at(pos, &mut want)?;
            if got != want {
                bail!("{name} at {pos} differs from the source");
            }
        }
        phases.push(Phase {
            name,
            ops: 2000,
            bytes: 2000 * size,
            elapsed: start.elapsed(),
            rpcs: client.metrics().since(&before),
        });
    }
    println!("verified every byte read back");

    let mut t = Table::new(&[
        "phase",
        "ops",
        "ops/s",
        "MB/s",
        "GetBlock",
        "ReadChunk",
        "WriteChunk",
        "PutBlock",
    ]);
    for p in &phases {
        let secs = p.elapsed.as_secs_f64().max(1e-9);
        t.row(vec![
            p.name.to_string(),
            p.ops.to_string(),
            format!("{:.0}", p.ops as f64 / secs),
            format!("{:.1}", p.bytes as f64 / secs / 1e6),
            p.rpcs.rpcs(RpcKind::GetBlock).to_string(),
            p.rpcs.rpcs(RpcKind::ReadChunk).to_string(),
            p.rpcs.rpcs(RpcKind::WriteChunk).to_string(),
            p.rpcs.rpcs(RpcKind::PutBlock).to_string(),
        ]);
    }
    Ok(t.render())
}
