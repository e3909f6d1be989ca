//! `om --listen HOST:PORT --data-dir DIR [--etcd URL,URL…]`: runs the
//! metadata service as its own process until Ctrl-C or SIGTERM. With
//! `--etcd`, the metadata lives on etcd and every om given the same members
//! and namespace campaigns to lead it: one serves, the others stand by
//! (answering NOT_LEADER) and take over when it dies (`standby.rs`).

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
    /// Directory for the om database (with `--etcd`, only the om's lock
    /// and an empty `om.redb`).
    #[arg(long)]
    data_dir: PathBuf,
    /// Keep the metadata on etcd instead of `DATA_DIR/om.redb`: the
    /// members' client URLs (`http://HOST:PORT`), comma-separated. Every om
    /// started with the same members and namespace campaigns to lead: one
    /// serves, the others stand by and take over when it dies. Give
    /// `--listen` the address clients reach this om at: standbys name the
    /// leader by it (0.0.0.0 is named 127.0.0.1).
    #[arg(long, value_name = "URL[,URL…]")]
    etcd: Option<String>,
    /// The prefix of this cluster's keys in etcd (at most 16 bytes; give
    /// each cluster on one etcd its own).
    #[arg(long, default_value = "/ozone/", value_name = "PREFIX")]
    etcd_namespace: String,
    /// Seconds of the leading om's lease in etcd (whole seconds, at least 2):
    /// a standby takes over at most this long after the leader dies, and at
    /// once after it stops.
    #[arg(long, default_value_t = 10)]
    lead_ttl: u64,
    /// Seconds of etcd history the leading om keeps: every this long it
    /// compacts away the versions older than the revision it saw one period
    /// before (scans that run longer start again).
    #[arg(long, default_value_t = 300.0)]
    etcd_history: f64,
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
    if let Some(endpoints) = &args.etcd {
        return serve_on_etcd(&args, endpoints, config, signals).await;
    }
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

/// Stands by on `--listen` until this om leads the etcd store, then serves
/// there until a signal (resigning, so a standby takes over at once) or
/// until the lead is lost (exiting with an error: a restart stands by).
async fn serve_on_etcd(
    args: &Args,
    endpoints: &str,
    config: OmConfig,
    signals: proto_crate::ShutdownSignals,
) -> anyhow::Result<()> {
    let ttl = Duration::from_secs(args.lead_ttl);
    anyhow::ensure!(
        ttl >= meta_store::MIN_TTL,
        "--lead-ttl must be at least {} s",
        meta_store::MIN_TTL.as_secs()
    );
    let history = seconds(args.etcd_history, "--etcd-history")?;
    let endpoints: Vec<String> = endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    anyhow::ensure!(!endpoints.is_empty(), "--etcd names no member");
    let etcd = meta_store::EtcdConfig::new(endpoints)
        .with_namespace(args.etcd_namespace.as_bytes().to_vec());
    let store = meta_store::MetaStore::Etcd(
        meta_store::EtcdStore::connect(&etcd)
            .await
            .context("connecting to etcd")?,
    );
    let standby = om::StandbyServer::start(args.listen, config.tls.as_ref(), store.clone())
        .await
        .context("binding")?;
    let address = standby.address();
    println!("om standby, serving on {address}");
    let stop = signals.recv();
    tokio::pin!(stop);
    let candidate = address.to_string();
    // A campaign that fails (its etcd member went away, the cluster lost
    // quorum for a while) is made again: a standby waits for good.
    let mut leadership = loop {
        let campaign = store.campaign(om::OM_ELECTION, &candidate, ttl);
        let failed = tokio::select! {
            won = campaign => match won {
                Ok(leadership) => break leadership,
                Err(e) => e,
            },
            () = &mut stop => {
                standby.shutdown().await;
                return Ok(());
            }
        };
        tracing::warn!(error = %failed, detail = ?failed, "campaigning to lead the metadata store failed; trying again");
        tokio::select! {
            () = tokio::time::sleep(ttl / 3) => {}
            () = &mut stop => {
                standby.shutdown().await;
                return Ok(());
            }
        }
    };
    // Opened while the standby still answers NOT_LEADER (clients wait for
    // a leader rather than find the port closed), then the address changes
    // hands. A failure here resigns at once, so the other om need not wait
    // out the lease.
    let serving = async {
        let om = OzoneManager::open_leading(config, &store, &leadership)
            .await
            .context("opening the om on etcd")?;
        standby.shutdown().await;
        // Bound on the IP given (the standby's own, 0.0.0.0 included) and the
        // port it had; the standby's listener may close a moment late.
        let listen = SocketAddr::new(args.listen.ip(), address.port());
        let om = Arc::new(om);
        let mut tries = 0;
        loop {
            match OmServer::start_with_metrics(listen, Arc::clone(&om), args.metrics_listen).await {
                Ok(server) => break anyhow::Ok(server),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 20 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(anyhow::Error::new(e).context("binding")),
            }
        }
    }
    .await;
    let server = match serving {
        Ok(server) => server,
        Err(e) => {
            if let Err(r) = leadership.resign().await {
                tracing::warn!(error = %r, "resigning after a failed start failed");
            }
            return Err(e);
        }
    };
    println!("om leading the metadata store, serving on {address}");
    if let Some(url) = server.metrics_url() {
        println!("om metrics on {url}");
    }
    let compaction = tokio::spawn(compact_history(store.clone(), history));
    tokio::select! {
        () = &mut stop => {}
        () = leadership.lost() => {
            // Fail-stop: another om may lead a third of the lease from now,
            // and this om's memory (leases, registry) must stop answering at
            // once, not after a graceful shutdown. Its writes are fenced
            // already; a restart stands by.
            tracing::error!("the lead of the metadata store was lost (its lease could not be renewed in time); exiting");
            eprintln!("om: lost the lead of the metadata store; exiting so that a restart stands by");
            std::process::exit(LOST_LEAD_EXIT);
        }
    }
    compaction.abort();
    server.shutdown().await;
    if let Err(e) = leadership.resign().await {
        tracing::warn!(error = %e, "resigning the lead failed; a standby takes over once the lease runs out");
    }
    Ok(())
}

/// Exit status of an om that lost the lead of its metadata store.
const LOST_LEAD_EXIT: i32 = 75;

/// Every `history`, drops the etcd versions older than the revision seen
/// one period before, so that old versions alone never fill etcd's quota
/// (ARCHITECTURE.md, "Metadata store": space). Runs while this om leads.
async fn compact_history(store: meta_store::MetaStore, history: Duration) {
    let mut kept_from: Option<u64> = None;
    loop {
        tokio::time::sleep(history).await;
        let now = match store.revision().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading the store's revision failed");
                continue;
            }
        };
        if let Some(from) = kept_from {
            match store.compact_history(now.saturating_sub(from)).await {
                Ok(Some(at)) => tracing::info!(revision = at, "compacted the store's history"),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "compacting the store's history failed"),
            }
        }
        kept_from = Some(now);
    }
}
