//! `datanode --listen HOST:PORT --data-dir DIR [--om HOST:PORT[,HOST:PORT…]]`: runs one
//! datanode as its own process until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use datanode::{Datanode, DatanodeConfig};

/// Serve containers of blocks from a local directory over gRPC.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Directory for containers, metadata, the datanode id and the id of
    /// the cluster it joined (`cluster.id`).
    #[arg(long)]
    data_dir: PathBuf,
    /// The om to register with (HOST:PORT), or the oms of one cluster
    /// (HOST:PORT,HOST:PORT,…): it registers with, heartbeats to and sends
    /// block reports to each.
    #[arg(long)]
    om: Option<String>,
    /// Serve the admin fault-injection RPCs (for tests and demos only).
    #[arg(long)]
    enable_fault_injection: bool,
    /// Require a valid block token (issued by an om running with
    /// `--security`) on every data RPC.
    #[arg(long)]
    security: bool,
    /// Most block files kept open for reading (least recently used closed
    /// first; 0 opens and closes the file for every read).
    #[arg(long, default_value_t = datanode::DEFAULT_MAX_OPEN_FILES)]
    max_open_files: usize,
    /// MiB of closed blocks' fine checksums (4 bytes per 512 bytes of
    /// block) kept in memory, so that small reads with edges read their
    /// range rather than whole checksum windows; 0 turns them off.
    #[arg(long, default_value_t = datanode::DEFAULT_FINE_CHECKSUM_CACHE_BYTES >> 20)]
    fine_checksum_cache_mib: u64,
    /// Budget of ReadChunk/WriteChunk payload bytes in flight; requests past it wait.
    #[arg(long, default_value_t = datanode::DEFAULT_MAX_INFLIGHT_BYTES)]
    max_inflight_bytes: u64,
    /// Seconds between heartbeats to the om.
    #[arg(long, default_value_t = datanode::DEFAULT_HEARTBEAT_INTERVAL.as_secs_f64())]
    heartbeat_interval: f64,
    /// Seconds between full block reports to the om (each scans every block file; one is also
    /// sent at start).
    #[arg(long, default_value_t = datanode::DEFAULT_BLOCK_REPORT_INTERVAL.as_secs_f64())]
    block_report_interval: f64,
    /// Serve `/metrics` (Prometheus text format) on this address (port 0
    /// picks a free one; its URL is printed at start).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// Log lines as `text` or `json` (one object per line). The filter is
    /// RUST_LOG's (default: info).
    #[arg(long, default_value = "text", value_name = "FORMAT")]
    log_format: proto_crate::LogFormat,
    // TLS: with --tls-ca the datanode serves over TLS with --tls-cert and
    // --tls-key (required), presents that certificate to the om and dials
    // other datanodes over TLS.
    #[command(flatten)]
    tls: proto_crate::tls::TlsArgs,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Before anything slow: a SIGTERM during start-up stops gracefully too.
    let signals = proto_crate::ShutdownSignals::install().context("installing signal handlers")?;
    proto_crate::init_logging_as("info", args.log_format);
    let heartbeat = std::time::Duration::try_from_secs_f64(args.heartbeat_interval)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--heartbeat-interval must be a positive number of seconds")?;
    let block_reports = std::time::Duration::try_from_secs_f64(args.block_report_interval)
        .ok()
        .filter(|d| !d.is_zero())
        .context("--block-report-interval must be a positive number of seconds")?;
    anyhow::ensure!(
        args.max_inflight_bytes >= datanode::MAX_READ_LEN,
        "--max-inflight-bytes must be at least {} (one ReadChunk answer)",
        datanode::MAX_READ_LEN
    );
    let mut config = DatanodeConfig::new(args.listen, &args.data_dir)
        .with_fault_injection(args.enable_fault_injection)
        .with_security(args.security)
        .with_max_open_files(args.max_open_files)
        .with_fine_checksum_cache_bytes(args.fine_checksum_cache_mib.saturating_mul(1 << 20))
        .with_max_inflight_bytes(args.max_inflight_bytes)
        .with_heartbeat_interval(heartbeat)
        .with_block_report_interval(block_reports);
    if let Some(om) = args.om {
        config = config.with_om(om);
    }
    if let Some(tls) = args.tls.load().context("loading the TLS files")? {
        anyhow::ensure!(
            tls.has_identity(),
            "--tls-ca needs the datanode's own --tls-cert and --tls-key"
        );
        config = config.with_tls(tls);
    }
    if let Some(m) = args.metrics_listen {
        config = config.with_metrics_listen(m);
    }
    let dn = Datanode::start(config)
        .await
        .context("starting the datanode")?;
    println!("datanode {} serving on {}", dn.details().uuid, dn.address());
    if let Some(url) = dn.metrics_url() {
        println!("datanode metrics on {url}");
    }
    signals.recv().await;
    dn.shutdown().await;
    Ok(())
}
