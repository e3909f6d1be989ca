//! `om --listen HOST:PORT --data-dir DIR [--etcd URL,URL…]`: runs the
//! metadata service as its own process until Ctrl-C or SIGTERM. With
//! `--etcd`, the metadata lives on etcd and every om given the same members
//! and namespace serves it; they elect the one that runs the background
//! services, which move to another when it stops or dies (`service_lead.rs`).

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
    /// started with the same members and namespace serves; one at a time
    /// runs the background services. Give `--listen` the address clients
    /// reach this om at, or `--advertise`: other oms name the services'
    /// leader by it.
    #[arg(long, value_name = "URL[,URL…]")]
    etcd: Option<String>,
    /// With `--etcd`: the name this om is known by to clients and other oms
    /// (in the election of the om that runs the background services, and in
    /// NOT_LEADER answers): `HOST` (the listening port is added) or
    /// `HOST:PORT`. Default: the listening address (0.0.0.0 named
    /// 127.0.0.1).
    #[arg(long, value_name = "HOST[:PORT]", requires = "etcd")]
    advertise: Option<String>,
    /// CA certificates (PEM) that signed the etcd members' certificates:
    /// TLS to etcd (give `https://` member URLs).
    #[arg(long, value_name = "FILE", requires = "etcd")]
    etcd_ca: Option<PathBuf>,
    /// This om's client certificate (PEM, leaf first) for etcd members
    /// started with `--client-cert-auth`; needs `--etcd-key` and `--etcd-ca`.
    #[arg(long, value_name = "FILE", requires_all = ["etcd_key", "etcd_ca"])]
    etcd_cert: Option<PathBuf>,
    /// The private key (PEM) of `--etcd-cert`.
    #[arg(long, value_name = "FILE", requires = "etcd_cert")]
    etcd_key: Option<PathBuf>,
    /// The etcd user the om authenticates as (etcd's `auth enable`; its role
    /// needs read-write on the namespace's prefix); needs
    /// `--etcd-password-file`.
    #[arg(long, value_name = "NAME", requires_all = ["etcd", "etcd_password_file"])]
    etcd_user: Option<String>,
    /// A file whose first line is the password of `--etcd-user` (not a flag,
    /// so that it is not on the command line for every user to see).
    #[arg(long, value_name = "FILE", requires = "etcd_user")]
    etcd_password_file: Option<PathBuf>,
    /// The prefix of this cluster's keys in etcd (at most 16 bytes; give
    /// each cluster on one etcd its own).
    #[arg(long, default_value = "/ozone/", value_name = "PREFIX")]
    etcd_namespace: String,
    /// Seconds of the services' leader's lease in etcd (whole seconds, at
    /// least 2): another om takes the background services over at most this
    /// long after their om dies, and at once after it stops.
    #[arg(long, default_value_t = 10)]
    lead_ttl: u64,
    /// Seconds of etcd history the services' leader keeps: once the history
    /// mark (a revision and when it was seen, a row of the store, so that it
    /// outlives a move of the lead) is this old, it compacts away the versions
    /// older than it and sets a new one (scans that run longer start again).
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

/// The election of the active-passive om versions (one om served, the others stood by).
const OLD_ELECTION: &str = "om-active";

/// The name `--advertise` gives (`HOST` gets `address`'s port), or `address`.
fn advertised(advertise: Option<&str>, address: SocketAddr) -> anyhow::Result<String> {
    let Some(a) = advertise else {
        return Ok(address.to_string());
    };
    anyhow::ensure!(
        !a.is_empty() && !a.contains(char::is_whitespace) && !a.contains('/'),
        "--advertise `{a}` is not HOST or HOST:PORT"
    );
    let bracketed = |h: &str| h.len() > 2 && h.starts_with('[') && h.ends_with(']');
    let plain = |h: &str| !h.is_empty() && !h.contains([':', '[', ']']);
    // A bracketed IPv6 address, or a name without a colon, is a host alone.
    if bracketed(a) || plain(a) {
        return Ok(format!("{a}:{}", address.port()));
    }
    match a.rsplit_once(':') {
        Some((host, port))
            if (plain(host) || bracketed(host)) && port.parse::<u16>().is_ok_and(|p| p != 0) =>
        {
            Ok(a.to_string())
        }
        _ => anyhow::bail!(
            "--advertise `{a}` is not HOST or HOST:PORT (an IPv6 host goes in brackets)"
        ),
    }
}

/// `config` with the TLS and user of `--etcd-ca`, `--etcd-cert`/`--etcd-key` and
/// `--etcd-user`/`--etcd-password-file`.
fn etcd_security(
    args: &Args,
    config: meta_store::EtcdConfig,
) -> anyhow::Result<meta_store::EtcdConfig> {
    let read = |path: &PathBuf, what: &str| {
        std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))
    };
    let config = match &args.etcd_ca {
        Some(ca) => {
            let tls = meta_store::EtcdTls::new(read(ca, "--etcd-ca")?);
            let tls = match (&args.etcd_cert, &args.etcd_key) {
                (Some(cert), Some(key)) => {
                    tls.with_identity(read(cert, "--etcd-cert")?, read(key, "--etcd-key")?)
                }
                _ => tls,
            };
            config.with_tls(tls)
        }
        None => config,
    };
    Ok(match (&args.etcd_user, &args.etcd_password_file) {
        (Some(user), Some(file)) => {
            let text = String::from_utf8(read(file, "--etcd-password-file")?)
                .context("--etcd-password-file is not UTF-8")?;
            let password = text.lines().next().unwrap_or_default();
            anyhow::ensure!(
                !password.is_empty(),
                "--etcd-password-file {} holds no password on its first line",
                file.display()
            );
            config.with_user(user.clone(), password.to_string())
        }
        _ => config,
    })
}

/// Serves on `--listen` from the etcd store, with every other om of the same members and
/// namespace, until a signal; runs the background services while it leads them
/// (`service_lead.rs`), resigning them on the way out so another om takes over at once.
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
    // Checked before anything starts (the port is known only once bound).
    advertised(
        args.advertise.as_deref(),
        SocketAddr::from(([127, 0, 0, 1], 1)),
    )?;
    let endpoints: Vec<String> = endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    anyhow::ensure!(!endpoints.is_empty(), "--etcd names no member");
    let etcd = etcd_security(
        args,
        meta_store::EtcdConfig::new(endpoints)
            .with_namespace(args.etcd_namespace.as_bytes().to_vec()),
    )?;
    let store = meta_store::MetaStore::Etcd(
        meta_store::EtcdStore::connect(&etcd)
            .await
            .context("connecting to etcd")?,
    );
    // An om of the active-passive versions (one served, the others stood by) leads the
    // election `om-active` and runs its services unaware of this one's: refuse to start
    // beside it.
    if let Some(old) = store
        .leader(OLD_ELECTION)
        .await
        .context("asking etcd for an om of an older version")?
    {
        anyhow::bail!(
            "the om at {old} (an older version, active-passive) still leads this store; stop \
             every om of that version before starting this one"
        );
    }
    let om = Arc::new(
        OzoneManager::open_shared(config, &store)
            .await
            .context("opening the om on etcd")?,
    );
    let server = OmServer::start_with_metrics(args.listen, Arc::clone(&om), args.metrics_listen)
        .await
        .context("binding")?;
    let address = server.address();
    println!("om serving on {address}");
    if let Some(url) = server.metrics_url() {
        println!("om metrics on {url}");
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let lead = tokio::spawn(om::lead_services(
        om,
        store,
        om::ServiceLeadConfig {
            candidate: advertised(args.advertise.as_deref(), address)?,
            ttl,
            history,
        },
        stopped,
    ));
    tokio::pin!(lead);
    tokio::select! {
        () = signals.recv() => {}
        // It ends only on `stop`: anything else leaves the store without this om's
        // services for good, so the om stops (a restart campaigns again).
        ended = &mut lead => {
            server.shutdown().await;
            return match ended {
                Ok(Ok(_)) => Err(anyhow::anyhow!("leading the background services ended")),
                Ok(Err(e)) => Err(anyhow::Error::new(e).context("leading the background services")),
                Err(e) => Err(anyhow::Error::new(e).context("the background services' lead task")),
            };
        }
    }
    // Resigns the services' lead (another om takes them over at once), then stops serving.
    stop.send_replace(true);
    match lead.await {
        Ok(Ok(terms)) => tracing::info!(terms, "stopped; the background services resigned"),
        Ok(Err(e)) => tracing::warn!(error = %e, "leading the background services failed"),
        Err(e) => tracing::warn!(error = %e, "the services' lead task failed"),
    }
    server.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::advertised;

    #[test]
    fn advertise_takes_a_host_or_a_host_and_port() {
        let bound = "0.0.0.0:9862".parse().expect("addr");
        let name = |a: Option<&str>| advertised(a, bound);
        assert_eq!(name(None).expect("default"), "0.0.0.0:9862");
        assert_eq!(name(Some("om1.example")).expect("host"), "om1.example:9862");
        assert_eq!(
            name(Some("om1.example:19862")).expect("host:port"),
            "om1.example:19862"
        );
        assert_eq!(
            name(Some("[fd00::1]")).expect("ipv6 host"),
            "[fd00::1]:9862"
        );
        assert_eq!(
            name(Some("[fd00::1]:1")).expect("ipv6 host:port"),
            "[fd00::1]:1"
        );
        for bad in [
            "",
            "om1:",
            "om1:port",
            "om1:0",
            ":9862",
            "fd00::1",
            "a b",
            "http://om1",
            "]",
            "a]",
            "[]",
            "[fd00::1",
        ] {
            assert!(name(Some(bad)).is_err(), "{bad}");
        }
    }
}
