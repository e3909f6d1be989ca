//! `cargo xtask ...`: the project's command line. Parses arguments and calls
//! library code (minicluster, ec-client); it owns no data-path logic.

mod admin;
mod bench;
mod cluster;
mod crash;
mod demo;
mod dn;
mod http;
mod key;
mod soak;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Run a local EC cluster, move keys in and out of it, measure it.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", version, about)]
struct Cli {
    /// Tokio runtime of this process. `current-thread` (default) runs client
    /// and in-process cluster on one thread: on a 2-core VM every cross-thread
    /// wake-up costs tens of microseconds, doubling a loopback RPC's latency.
    /// `multi-thread` uses one worker per core.
    #[arg(long, global = true, value_enum, default_value = "current-thread")]
    runtime: RuntimeFlavor,
    /// Log lines (stderr; RUST_LOG filters them, default warn) as `text` or `json`.
    #[arg(long, global = true, default_value = "text", value_name = "FORMAT")]
    log_format: proto_crate::LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// Tokio runtime flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum RuntimeFlavor {
    /// One thread for everything (plus the blocking pool).
    CurrentThread,
    /// One worker thread per core.
    MultiThread,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start an om and N datanodes on loopback, write a key, read it back
    /// (sequentially and with random preads), print what it cost, then serve
    /// until Ctrl-C.
    Minicluster(demo::MiniclusterArgs),
    /// Run the om, N datanodes and the S3 gateway as separate processes (the
    /// release binaries, built first) with the binaries' own timings; write
    /// cluster.json (with their pids) and serve until Ctrl-C.
    Cluster(cluster::ClusterArgs),
    /// Put, get, describe and list keys on a running cluster.
    Key {
        #[command(flatten)]
        target: ozone_cli::Target,
        /// Print results as JSON.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: key::XtaskKeyCommand,
    },
    /// Measure read and write modes side by side on one cluster; print
    /// Markdown tables and write JSON under target/bench/.
    Bench(bench::BenchArgs),
    /// A long mixed workload (EC, replicated, S3) while datanodes are
    /// stopped and started; samples open files, in-flight bytes, disk and
    /// RSS, prints a table, writes target/soak/soak.{json,svg}.
    Soak(soak::SoakArgs),
    /// Crash consistency: SIGKILL om and datanode processes at seeded
    /// random moments during writes, restart them, verify every
    /// acknowledged key; N runs with seeds S, S+1, ….
    CrashTest(crash::CrashArgs),
    /// Stop, start and inject faults into datanodes of a running minicluster;
    /// list their liveness states.
    Dn {
        #[command(flatten)]
        target: ozone_cli::Target,
        #[command(subcommand)]
        command: dn::DnCommand,
    },
    /// Cluster administration: the ReplicationManager's repair status, S3 users.
    Admin {
        #[command(flatten)]
        target: ozone_cli::Target,
        #[command(subcommand)]
        command: admin::AdminCommand,
    },
}

/// Workspace root (the parent of this crate's directory).
pub(crate) fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map_or(manifest.clone(), std::path::Path::to_path_buf)
}

/// `target`, defaulting to this workspace's minicluster (`target/minicluster`,
/// where `cargo xtask minicluster` writes `cluster.json`) when it names none.
fn default_cluster(mut target: ozone_cli::Target) -> ozone_cli::Target {
    if target.om.is_none() && target.data_dir.is_none() {
        target.data_dir = Some(workspace_root().join(ozone_cli::cluster::DEFAULT_DATA_DIR));
    }
    target
}

fn main() -> std::process::ExitCode {
    // s3s logs every error answer (a 404 included) at ERROR; the gateway
    // counts them in its metrics instead.
    let cli = Cli::parse();
    proto_crate::init_logging_as("warn,s3s::ops=off", cli.log_format);
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // `cargo xtask key info … | head`: the reader left; not a failure.
        Err(e) if ozone_cli::output::is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // The chain of causes, one line, no backtrace: these are user-facing.
            ozone_cli::output::status(format_args!("error: {e:#}"));
            // As `ozone`: 3 when the bucket or key does not exist.
            std::process::ExitCode::from(ozone_cli::exit_status(&e))
        }
    }
}

/// Runs `work` (a command that starts clusters of its own) until it ends or
/// SIGINT/SIGTERM arrives. On a signal the work is dropped, so its clusters
/// stop (spawned processes are killed on drop) and their temporary
/// directories are removed, and the run fails with "interrupted". Killed
/// outright, a bench left its cluster's files behind: 1.6 GB per `bench
/// pread` in the temporary directory.
async fn interruptible(
    work: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    let signals = proto_crate::ShutdownSignals::install().context("installing signal handlers")?;
    tokio::select! {
        result = work => result,
        () = signals.recv() => {
            anyhow::bail!("interrupted: its clusters were stopped and their files removed")
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = match cli.runtime {
        RuntimeFlavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        RuntimeFlavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build()?;
    let flavor = cli.runtime;
    runtime.block_on(async {
        match cli.command {
            Command::Minicluster(args) => demo::run(args).await,
            Command::Cluster(args) => cluster::run(args).await,
            Command::Key {
                target,
                json,
                command,
            } => key::run(&default_cluster(target), json, command).await,
            Command::Dn { target, command } => dn::run(&default_cluster(target), command).await,
            Command::Admin { target, command } => {
                admin::run(&default_cluster(target), command).await
            }
            Command::Bench(args) => interruptible(bench::run(args, flavor)).await,
            Command::Soak(args) => interruptible(soak::run(args)).await,
            Command::CrashTest(args) => interruptible(crash::run(args)).await,
        }
    })
}
