//! `s3-gateway --om HOST:PORT [--listen ADDR] --access-key AK --secret-key SK`:
//! serves S3 over a running cluster until Ctrl-C.

use std::net::SocketAddr;

use anyhow::Context;
use clap::Parser;
use ec_client::{Client, ClientConfig};
use s3_gateway::{GatewayConfig, S3Gateway};

/// Serve the S3 REST API over an om and its datanodes.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The om (HOST:PORT).
    #[arg(long)]
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    proto_crate::init_logging("info");
    let args = Args::parse();
    let client = Client::connect(&args.om, ClientConfig::default())
        .await
        .with_context(|| format!("connecting to the om at {}", args.om))?;
    let gw = S3Gateway::start(
        client,
        GatewayConfig::new(args.listen, &args.access_key, &args.secret_key),
    )
    .await
    .context("binding")?;
    println!("s3 gateway serving on http://{}", gw.address());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    gw.shutdown().await;
    Ok(())
}
