//! `om --listen HOST:PORT --data-dir DIR`: runs the metadata service as its own
//! process until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let om =
        OzoneManager::open(OmConfig::new(&args.data_dir)).context("opening the om database")?;
    let server = OmServer::start(args.listen, Arc::new(om))
        .await
        .context("binding")?;
    println!("om serving on {}", server.address());
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    server.shutdown().await;
    Ok(())
}
