//! `s3-gateway --om HOST:PORT[,HOST:PORT...] [--listen ADDR] --access-key AK --secret-key SK`:
//! serves S3 over a running cluster until Ctrl-C or SIGTERM. The key pair is
//! the administrator's; the om's S3 users (`cargo xtask admin user create`)
//! sign with their own.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use ec_client::{Client, ClientConfig};
use s3_gateway::{GatewayConfig, S3Gateway};

/// Serve the S3 REST API over an om and its datanodes.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The om (HOST:PORT), or several oms that share their metadata
    /// (HOST:PORT,HOST:PORT,...): the gateway's client fails over along the
    /// list.
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]")]
    om: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9878")]
    listen: SocketAddr,
    /// Access key clients sign with.
    #[arg(long, env = "S3_ACCESS_KEY")]
    access_key: String,
    /// Secret key clients sign with.
    #[arg(long, env = "S3_SECRET_KEY")]
    secret_key: String,
    /// Serve `/metrics` (Prometheus text format) on this address (port 0
    /// picks a free one; its URL is printed at start).
    #[arg(long, value_name = "HOST:PORT")]
    metrics_listen: Option<SocketAddr>,
    /// Requests served at once; one more is answered 503 SlowDown (each
    /// PUT may hold the 12 MiB request buffer and its EC writer's stripes).
    #[arg(long, default_value_t = s3_gateway::DEFAULT_MAX_REQUESTS_IN_FLIGHT, value_name = "N")]
    max_requests_in_flight: usize,
    /// Client connections open at once, idle or not; at the limit new ones
    /// wait in the listen backlog. Keep it below the open-file limit.
    #[arg(long, default_value_t = s3_gateway::DEFAULT_MAX_CONNECTIONS, value_name = "N")]
    max_connections: usize,
    /// Seconds to wait for a client's next bytes, or for it to take the next
    /// bytes of an answer: a silent connection or one that stops reading is
    /// closed, a silent PUT body is answered 400 RequestTimeout.
    #[arg(long, default_value_t = s3_gateway::DEFAULT_REQUEST_IDLE_TIMEOUT.as_secs_f64(), value_name = "SECONDS")]
    request_idle_timeout: f64,
    /// Log lines as `text` or `json` (one object per line). The filter is
    /// RUST_LOG's (default: info).
    #[arg(long, default_value = "text", value_name = "FORMAT")]
    log_format: proto_crate::LogFormat,
    // TLS: --tls-ca makes the gateway's om and datanode channels TLS
    // (trusting that CA); --tls-cert and --tls-key make it serve HTTPS.
    #[command(flatten)]
    tls: proto_crate::tls::TlsArgs,
    /// PEM certificate the gateway presents to the om and datanodes (signed
    /// by --tls-ca; with --om-key). With TLS the om reveals S3 users'
    /// secrets only to a client holding one, so users other than the
    /// --access-key administrator need it.
    #[arg(long, value_name = "PEM", requires_all = ["tls_ca", "om_key"])]
    om_cert: Option<std::path::PathBuf>,
    /// PEM private key of --om-cert.
    #[arg(long, value_name = "PEM", requires = "om_cert")]
    om_key: Option<std::path::PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.max_requests_in_flight == 0 {
        anyhow::bail!("--max-requests-in-flight must be at least 1");
    }
    if args.max_connections == 0 {
        anyhow::bail!("--max-connections must be at least 1");
    }
    let idle = std::time::Duration::try_from_secs_f64(args.request_idle_timeout)
        .ok()
        .filter(|d| !d.is_zero() && d.as_secs() <= 86_400)
        .context("--request-idle-timeout must be a positive number of seconds, at most a day")?;
    // Before anything slow: a SIGTERM during start-up stops gracefully too.
    let signals = proto_crate::ShutdownSignals::install().context("installing signal handlers")?;
    // s3s logs every error answer (a 404 included) at ERROR; the gateway logs
    // its 5xx answers itself and counts the rest in its metrics.
    proto_crate::init_logging_as("info,s3s::ops=off", args.log_format);
    let tls = args.tls.load().context("loading the TLS files")?;
    let client_tls = match (&args.tls.tls_ca, &args.om_cert, &args.om_key) {
        (Some(ca), Some(cert), Some(key)) => Some(
            proto_crate::tls::TlsConfig::load(ca, Some((cert.as_path(), key.as_path())))
                .context("loading --om-cert and --om-key")?,
        ),
        _ => tls
            .as_ref()
            .map(proto_crate::tls::TlsConfig::without_identity),
    };
    let client_config = ClientConfig::default().with_tls(client_tls);
    let client = Client::connect(&args.om, client_config)
        .await
        .with_context(|| format!("connecting to the om at {}", args.om))?;
    let mut config = GatewayConfig::new(args.listen, &args.access_key, &args.secret_key)
        .with_max_requests_in_flight(args.max_requests_in_flight)
        .with_max_connections(args.max_connections)
        .with_request_idle_timeout(idle);
    if let Some(m) = args.metrics_listen {
        config = config.with_metrics_listen(m);
    }
    if let Some(t) = tls.filter(proto_crate::tls::TlsConfig::has_identity) {
        config = config.with_https(t);
    }
    let gw = S3Gateway::start(client, config).await.context("binding")?;
    println!("s3 gateway serving on {}", gw.endpoint());
    if let Some(url) = gw.metrics_url() {
        println!("s3 gateway metrics on {url}");
    }
    signals.recv().await;
    gw.shutdown().await;
    Ok(())
}
