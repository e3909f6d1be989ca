//! `om --listen HOST:PORT --data-dir DIR`: runs the metadata service as its own
//! process until Ctrl-C or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use om::{OmConfig, OmServer, OzoneManager};

/// Serve the datanode registry, buckets and keys over gRPC.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:9862")]
    listen: SocketAddr,
    /// Directory for the om database.
    #[arg(long)]
    data_dir: PathBuf,
    /// Seconds without a heartbeat after which a datanode is STALE (no new block groups).
    #[arg(long, default_value_t = 30.0)]
    stale_after: f64,
    /// Seconds without a heartbeat after which a datanode is DEAD.
    #[arg(long, default_value_t = 90.0)]
    dead_after: f64,
    /// Seconds an open key may go with neither an allocation nor a renewal
    /// (writers renew every third of it while they live) before it is
    /// aborted and its blocks reclaimed.
    #[arg(long, default_value_t = om::DEFAULT_OPEN_KEY_LEASE.as_secs_f64())]
    open_key_lease: f64,
    /// Most open key sessions one client may hold.
    #[arg(long, default_value_t = om::DEFAULT_MAX_SESSIONS_PER_CLIENT)]
    max_sessions_per_client: usize,
    /// Seconds between runs of the background services (lease expiry,
    /// block deletion retries).
    #[arg(long, default_value_t = om::DEFAULT_SERVICE_INTERVAL.as_secs_f64())]
    service_interval: f64,
    /// Seconds a freed block waits before its deletion is sent (readers that
    /// opened the key before it was overwritten or deleted can finish).
    #[arg(long, default_value_t = om::DEFAULT_DELETION_GRACE.as_secs_f64())]
    deletion_grace: f64,
    /// Longest time, in seconds, between two full ReplicationManager scans of every key while
    /// nothing it watches (datanode states, block reports) changes.
    #[arg(long, default_value_t = om::DEFAULT_FULL_SCAN_INTERVAL.as_secs_f64())]
    full_scan_interval: f64,
    /// Repairs (EC rebuilds, replica copies) the ReplicationManager runs at once.
    #[arg(long, default_value_t = om::DEFAULT_MAX_REPAIRS_IN_FLIGHT)]
    max_repairs_in_flight: usize,
    /// Repairs writing to one datanode at once.
    #[arg(long, default_value_t = om::DEFAULT_MAX_REPAIRS_PER_DATANODE)]
    max_repairs_per_datanode: usize,
    /// Serve `/metrics` (Prometheus text format) on this address (port 0
    /// picks a free one; its URL is printed at start).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// Security: hand out a block token with every block location (datanodes
    /// started with `--security` refuse data RPCs without a valid one).
    #[arg(long)]
    security: bool,
    /// Seconds a block token stays valid (and one signing key signs); keys
    /// rotate on this period and are kept until their last token expires.
    #[arg(long, default_value_t = om::DEFAULT_BLOCK_TOKEN_LIFETIME.as_secs_f64())]
    block_token_lifetime: f64,
    /// Log lines as `text` or `json` (one object per line). The filter is
    /// RUST_LOG's (default: info).
    #[arg(long, default_value = "text", value_name = "FORMAT")]
    log_format: proto_crate::LogFormat,
    // TLS: the om serves over TLS with --tls-cert/--tls-key (both required
    // with --tls-ca), takes datanode calls only from peers presenting a
    // certificate the CA signed, and dials datanodes over TLS.
    #[command(flatten)]
    tls: proto_crate::tls::TlsArgs,
}

fn seconds(v: f64, flag: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("{flag} must be a positive number of seconds"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Before anything slow: a SIGTERM during start-up stops gracefully too.
    let signals = proto_crate::ShutdownSignals::install().context("installing signal handlers")?;
    proto_crate::init_logging_as("info", args.log_format);
    let stale = seconds(args.stale_after, "--stale-after")?;
    let dead = seconds(args.dead_after, "--dead-after")?;
    anyhow::ensure!(
        dead >= stale,
        "--dead-after must not be shorter than --stale-after"
    );
    anyhow::ensure!(
        args.max_sessions_per_client > 0,
        "--max-sessions-per-client must be positive"
    );
    anyhow::ensure!(
        args.max_repairs_in_flight > 0 && args.max_repairs_per_datanode > 0,
        "--max-repairs-in-flight and --max-repairs-per-datanode must be positive"
    );
    let config = OmConfig::new(&args.data_dir)
        .with_repair(om::RepairConfig {
            max_in_flight: args.max_repairs_in_flight,
            max_per_datanode: args.max_repairs_per_datanode,
        })
        .with_liveness(stale, dead)
        .with_open_key_lease(seconds(args.open_key_lease, "--open-key-lease")?)
        .with_max_sessions_per_client(args.max_sessions_per_client)
        .with_service_interval(seconds(args.service_interval, "--service-interval")?)
        .with_full_scan_interval(seconds(args.full_scan_interval, "--full-scan-interval")?)
        .with_deletion_grace(
            Duration::try_from_secs_f64(args.deletion_grace)
                .context("--deletion-grace must be a number of seconds")?,
        );
    let lifetime = seconds(args.block_token_lifetime, "--block-token-lifetime")?;
    anyhow::ensure!(
        lifetime >= om::MIN_BLOCK_TOKEN_LIFETIME,
        "--block-token-lifetime must be at least {} s",
        om::MIN_BLOCK_TOKEN_LIFETIME.as_secs_f64()
    );
    let config = if args.security {
        config.with_security(om::BlockTokenConfig { lifetime })
    } else {
        config
    };
    let config = match args.tls.load().context("loading the TLS files")? {
        Some(tls) => {
            anyhow::ensure!(
                tls.has_identity(),
                "--tls-ca needs the om's own --tls-cert and --tls-key"
            );
            config.with_tls(tls)
        }
        None => config,
    };
    let om = OzoneManager::open(config)
        .await
        .context("opening the om database")?;
    let server = OmServer::start_with_metrics(args.listen, Arc::new(om), args.metrics_listen)
        .await
        .context("binding")?;
    println!("om serving on {}", server.address());
    if let Some(url) = server.metrics_url() {
        println!("om metrics on {url}");
    }
    signals.recv().await;
    server.shutdown().await;
    Ok(())
}
