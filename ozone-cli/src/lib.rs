//! `ozone`: a command line shaped like Ozone's `ozone sh` and `ozone admin`,
//! over [`ec_client`]. Install it with `cargo install --path ozone-cli`.
//!
//! ```text
//! ozone sh bucket create|list|info|delete
//! ozone sh key put|get|cat|ls|info|delete|cp|rename
//! ozone admin datanode list
//! ```
//!
//! Every command takes `--om HOST:PORT` (a list `HOST:PORT,HOST:PORT` for key
//! and bucket commands; or `OZONE_OM_ADDRESS`; default: the
//! running minicluster's, from `cluster.json` under `--data-dir` or
//! `target/minicluster`) and `--json` (read commands print JSON). Exit
//! status: 0 success, 1 failure, 2 bad usage, 3 the bucket, key or upload
//! does not exist ([`exit_status`]). `cargo xtask key …` and `cargo xtask dn
//! list` call the same functions.

pub mod bucket;
pub mod cluster;
pub mod datanode;
pub mod key;
pub mod output;
pub mod table;

use clap::{Parser, Subcommand};
use ec_client::{ClientError, OmErrorCode};

pub use cluster::Target;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "ozone",
    version,
    about = "Buckets, keys and datanodes of an Ozone-style EC cluster"
)]
pub struct Cli {
    /// Which cluster.
    #[command(flatten)]
    pub target: Target,
    /// Print results as JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log lines (stderr; RUST_LOG filters them, default warn) as `text` or `json`.
    #[arg(long, global = true, default_value = "text", value_name = "FORMAT")]
    pub log_format: proto_crate::LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Buckets and keys (Ozone's `ozone sh`).
    Sh {
        /// Object kind.
        #[command(subcommand)]
        command: ShCommand,
    },
    /// Cluster administration (Ozone's `ozone admin`).
    Admin {
        /// What to administer.
        #[command(subcommand)]
        command: AdminCommand,
    },
}

/// `ozone sh …`.
#[derive(Debug, Subcommand)]
pub enum ShCommand {
    /// Bucket operations.
    Bucket {
        /// Operation.
        #[command(subcommand)]
        command: bucket::BucketCommand,
    },
    /// Key operations.
    Key {
        /// Operation.
        #[command(subcommand)]
        command: key::KeyCommand,
    },
}

/// `ozone admin …`.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Datanodes.
    Datanode {
        /// Operation.
        #[command(subcommand)]
        command: DatanodeCommand,
    },
}

/// `ozone admin datanode …`.
#[derive(Debug, Subcommand)]
pub enum DatanodeCommand {
    /// Every datanode the om knows: liveness, operational state, last
    /// heartbeat, used bytes, blocks, open files.
    List,
}

/// Runs a parsed command line.
///
/// # Errors
/// Whatever the command fails with; [`exit_status`] classifies it.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Sh { command } => {
            let client = cli.target.client().await?;
            match command {
                ShCommand::Bucket { command } => bucket::run(&client, command, cli.json).await,
                ShCommand::Key { command } => key::run(&client, command, cli.json).await,
            }
        }
        Command::Admin {
            command:
                AdminCommand::Datanode {
                    command: DatanodeCommand::List,
                },
        } => datanode::list(&cli.target, cli.json).await,
    }
}

/// Exit status 3: what the command names does not exist.
pub const EXIT_NOT_FOUND: u8 = 3;

/// The exit status of a failed command: [`EXIT_NOT_FOUND`] when a bucket,
/// key or multipart upload does not exist, 1 otherwise. (A closed output
/// pipe is not a failure: see [`output::is_broken_pipe`].)
#[must_use]
pub fn exit_status(e: &anyhow::Error) -> u8 {
    let missing = e.chain().any(|c| {
        c.downcast_ref::<ClientError>().is_some_and(|c| {
            matches!(
                c.root(),
                ClientError::KeyNotFound { .. }
                    | ClientError::BucketNotFound(_)
                    | ClientError::Om {
                        code: OmErrorCode::KeyNotFound
                            | OmErrorCode::BucketNotFound
                            | OmErrorCode::NoSuchUpload,
                        ..
                    }
            )
        })
    });
    if missing { EXIT_NOT_FOUND } else { 1 }
}
