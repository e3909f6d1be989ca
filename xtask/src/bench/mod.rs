//! `cargo xtask bench [pread|write|all]`: measure modes side by side in one
//! run on one minicluster, print Markdown tables, write JSON.

mod codec;
mod meta;
mod pread;
mod repair;
mod report;
mod s3;
mod vectored;
mod write;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};
use ec_client::{BucketOptions, Client, ClientConfig, ClientError, KeyInfo, ReplicationConfig};
use indicatif::{ProgressBar, ProgressStyle};
use minicluster::process::{Binaries, ProcessCluster, ProcessOptions, ProcessTimings};
use minicluster::{MiniCluster, MiniClusterConfig, pattern};

pub(crate) use report::{Latencies, Report, Row};

/// Which suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Suite {
    /// Positioned reads: reuse vs reader-per-call vs raw ReadChunk, degraded, replicated.
    Pread,
    /// EC writes pipelined vs serial, replicated writes, codec throughput.
    Write,
    /// Vectored reads: merged + parallel vs no-merge vs serial seek+read.
    Vectored,
    /// Consecutive ranged GETs of one object through the S3 gateway.
    S3,
    /// Rebuild of one datanode's share of rs-3-2 keys vs a sequential read of them (on a
    /// six-datanode cluster of its own).
    Repair,
    /// Reed-Solomon encode and 2-erasure decode GB/s, vectorised vs scalar kernel.
    Codec,
    /// The om's metadata store: key open+commit, lookup and list on redb vs etcd (one member
    /// and three, started as local processes).
    Meta,
    /// Every suite.
    All,
}

/// Arguments of `cargo xtask bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Suite to run.
    #[arg(value_enum, default_value = "all")]
    suite: Suite,
    /// Key size in bytes (default 256 MiB; 8 MiB with --quick).
    #[arg(long)]
    size: Option<u64>,
    /// Operations per measured workload (default 2000; 200 with --quick).
    #[arg(long)]
    ops: Option<u64>,
    /// Tasks for the thread-scaling row of random 4 KiB preads (default 8).
    #[arg(long)]
    threads: Option<usize>,
    /// A tiny run for tests: small key, few ops.
    #[arg(long)]
    quick: bool,
    /// Where to write JSON (default `target/bench/<suite>.json`).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Use the cluster whose om is at HOST:PORT instead of starting one.
    #[arg(long)]
    om: Option<String>,
    /// Start the om and the datanodes as processes of their own (the release
    /// binaries, built first, with `ProcessTimings::service`), as they are
    /// deployed, instead of in the bench's process, where they share its
    /// runtime with the client. The repair suite and pread's reuse-tokens and
    /// reuse-secure rows keep clusters of their own in process (pread leaves
    /// those two rows out here).
    #[arg(long, conflicts_with = "om")]
    processes: bool,
}

/// The cluster a bench run measures.
enum BenchCluster {
    /// `--om`: a running cluster, not ours to stop.
    External,
    /// The default: a minicluster inside this process.
    InProcess(Box<MiniCluster>),
    /// `--processes`: the om and datanodes as processes, under a temp dir.
    Processes(Box<ProcessCluster>, tempfile::TempDir),
}

impl BenchCluster {
    /// Starts the cluster `args` asks for, with security off (the baseline
    /// every suite measures; `bench pread` starts clusters of its own for its
    /// reuse-tokens and reuse-secure rows).
    async fn start(args: &BenchArgs) -> anyhow::Result<Self> {
        if args.om.is_some() {
            return Ok(Self::External);
        }
        if !args.processes {
            let cluster = MiniCluster::start(MiniClusterConfig::default().with_security(None))
                .await
                .context("starting the minicluster")?;
            return Ok(Self::InProcess(Box::new(cluster)));
        }
        crate::cluster::build_service_binaries()?;
        let bins = Binaries::locate()?;
        let dir = tempfile::tempdir().context("making the cluster's temp dir")?;
        let options = ProcessOptions {
            tls: false,
            block_tokens: false,
            fault_injection: true,
            ..ProcessOptions::default()
        };
        let started = ProcessCluster::start_with(
            &bins,
            dir.path(),
            MiniClusterConfig::default().datanodes,
            ProcessTimings::service(),
            options,
        )
        .await;
        match started {
            Ok(cluster) => Ok(Self::Processes(Box::new(cluster), dir)),
            // The logs the error names stay for reading.
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "starting the om and datanode processes (kept: {})",
                dir.keep().display()
            ))),
        }
    }

    /// The om's address (`--om` when external).
    fn om_address(&self, args: &BenchArgs) -> anyhow::Result<String> {
        match self {
            Self::External => args.om.clone().context("no om address"),
            Self::InProcess(c) => Ok(c.om_address()),
            Self::Processes(c, _) => Ok(c.om_address()),
        }
    }

    /// A directory on the datanodes' file system, for rows that measure the
    /// disk itself; `None` for an external cluster.
    fn scratch_dir(&self) -> Option<PathBuf> {
        match self {
            Self::External => None,
            Self::InProcess(c) => Some(c.base_dir().join("bench-disk-limit")),
            Self::Processes(c, _) => Some(c.base_dir().join("bench-disk-limit")),
        }
    }

    /// Stops what this run started; after a failed run (`failed`), a process
    /// cluster's directory and logs are kept and named.
    async fn stop(self, failed: bool) -> anyhow::Result<()> {
        match self {
            Self::External => Ok(()),
            Self::InProcess(c) => {
                c.shutdown().await;
                Ok(())
            }
            Self::Processes(mut c, dir) => {
                let stopped = c
                    .stop_all()
                    .await
                    .context("stopping the om and datanode processes");
                if failed {
                    eprintln!(
                        "the cluster's data and logs are kept in {}",
                        dir.keep().display()
                    );
                }
                stopped
            }
        }
    }
}

/// Resolved settings shared by the suites.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) size: u64,
    pub(crate) ops: u64,
    pub(crate) threads: usize,
    pub(crate) quick: bool,
    pub(crate) om: String,
    pub(crate) runtime: crate::RuntimeFlavor,
    pub(crate) external: bool,
    /// `--processes`: the om and datanodes run as processes of their own.
    pub(crate) processes: bool,
    /// `--size` as given (suites with their own default size use it only then).
    pub(crate) size_given: Option<u64>,
    /// A directory on the datanodes' file system (the in-process cluster's
    /// data dir), for rows that measure the disk itself; `None` for an
    /// external cluster.
    pub(crate) scratch_dir: Option<std::path::PathBuf>,
}

impl Settings {
    pub(crate) fn config_json(&self) -> serde_json::Value {
        serde_json::json!({
            "size": self.size,
            "ops": self.ops,
            "threads": self.threads,
            "quick": self.quick,
            "runtime": format!("{:?}", self.runtime),
            "cluster": if self.external {
                "external"
            } else if self.processes {
                "processes"
            } else {
                "in-process"
            },
            "cpus": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        })
    }

    /// A client on the bench cluster with `config`.
    pub(crate) async fn client(&self, config: ClientConfig) -> anyhow::Result<Client> {
        Client::connect(&self.om, config)
            .await
            .with_context(|| format!("connecting to the om at {}", self.om))
    }
}

pub(crate) async fn run(args: BenchArgs, runtime: crate::RuntimeFlavor) -> anyhow::Result<()> {
    let cluster = BenchCluster::start(&args).await?;
    let settings = Settings {
        size: args
            .size
            .unwrap_or(if args.quick { 8 << 20 } else { 256 << 20 }),
        ops: args
            .ops
            .unwrap_or(if args.quick { 200 } else { 2000 })
            .max(1),
        threads: args.threads.unwrap_or(8).max(1),
        quick: args.quick,
        runtime,
        external: args.om.is_some(),
        processes: args.processes,
        size_given: args.size,
        scratch_dir: cluster.scratch_dir(),
        om: cluster.om_address(&args)?,
    };
    let suites: &[Suite] = match args.suite {
        Suite::All => &[
            Suite::Pread,
            Suite::Write,
            Suite::Vectored,
            Suite::S3,
            Suite::Repair,
            Suite::Codec,
            Suite::Meta,
        ],
        Suite::Pread => &[Suite::Pread],
        Suite::Write => &[Suite::Write],
        Suite::Vectored => &[Suite::Vectored],
        Suite::S3 => &[Suite::S3],
        Suite::Repair => &[Suite::Repair],
        Suite::Codec => &[Suite::Codec],
        Suite::Meta => &[Suite::Meta],
    };
    let result = async {
        for suite in suites {
            let report = match suite {
                Suite::Pread => pread::run(&settings).await?,
                Suite::Write => write::run(&settings).await?,
                Suite::Vectored => vectored::run(&settings).await?,
                Suite::S3 => s3::run(&settings).await?,
                Suite::Repair => repair::run(&settings).await?,
                Suite::Codec => codec::run(&settings).await?,
                Suite::Meta => meta::run(&settings).await?,
                Suite::All => continue,
            };
            let table = match suite {
                Suite::Vectored => report.vectored_table(),
                Suite::S3 => report.s3_table(),
                _ => report.table(),
            };
            println!(
                "\n## {} suite\n\n{}\n\n{}\n",
                report.suite,
                table,
                report.ratio_table()
            );
            if *suite == Suite::Pread {
                println!("{}\n", pread::rpc_table(&report));
            }
            let path = match (&args.json, args.suite) {
                (Some(p), Suite::All) => p.with_file_name(format!(
                    "{}-{}.json",
                    p.file_stem()
                        .map_or("bench".into(), |s| s.to_string_lossy()),
                    report.suite
                )),
                (Some(p), _) => p.clone(),
                (None, _) => {
                    crate::workspace_root().join(format!("target/bench/{}.json", report.suite))
                }
            };
            report.write_json(&path)?;
            println!("wrote {}", path.display());
        }
        anyhow::Ok(())
    }
    .await;
    let stopped = cluster.stop(result.is_err()).await;
    result.and(stopped)
}

/// Creates the two buckets most suites compare, unless they exist:
/// `ec_bucket` with the default EC scheme and `rep_bucket` 3-way
/// replicated, both with blocks of `block_size` bytes.
pub(crate) async fn ensure_ec_and_replicated(
    client: &Client,
    ec_bucket: &str,
    rep_bucket: &str,
    block_size: u64,
) -> anyhow::Result<()> {
    let ec = ReplicationConfig::Ec(ec_codec::EcReplicationConfig::default());
    ensure_bucket(client, ec_bucket, ec, block_size).await?;
    let replicated = ReplicationConfig::Replicated { factor: 3 };
    ensure_bucket(client, rep_bucket, replicated, block_size).await
}

/// Creates `bucket` with `replication` unless it exists.
pub(crate) async fn ensure_bucket(
    client: &Client,
    bucket: &str,
    replication: ReplicationConfig,
    block_size: u64,
) -> anyhow::Result<()> {
    match client.bucket(bucket).await {
        Ok(_) => Ok(()),
        Err(ClientError::BucketNotFound(_)) => {
            client
                .create_bucket(
                    bucket,
                    BucketOptions {
                        replication: Some(replication),
                        block_size: Some(block_size),
                        ..Default::default()
                    },
                )
                .await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes `size` bytes of pattern `seed` as `bucket/key` with a progress bar.
pub(crate) async fn write_key(
    client: &Client,
    bucket: &str,
    key: &str,
    size: u64,
    seed: u64,
) -> anyhow::Result<KeyInfo> {
    let bar = ProgressBar::new(size).with_style(
        ProgressStyle::with_template(&format!(
            "writing {bucket}/{key} {{bar:30}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut w = client.create_key(bucket, key, None).await?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < size {
        let n = usize::try_from((size - at).min(buf.len() as u64))?;
        pattern::fill(seed, at, &mut buf[..n]);
        w.write(&buf[..n]).await?;
        at += n as u64;
        bar.set_position(at);
    }
    let info = w.close().await?;
    bar.finish_and_clear();
    Ok(info)
}
