//! `ozone sh bucket create|list|info|delete`.

use clap::Subcommand;
use ec_client::{BucketInfo, BucketOptions, Client, ReplicationConfig};
use serde_json::json;

use crate::output;
use crate::table::Table;

/// Bucket commands (Ozone's `ozone sh bucket`).
#[derive(Debug, Subcommand)]
pub enum BucketCommand {
    /// Create a bucket.
    Create {
        /// Bucket name (S3 rules: 3-63 characters, lower case, digits, `-`, `.`).
        name: String,
        /// Replication of keys that name none: rs-D-P-SIZEk (e.g. rs-3-2-1024k),
        /// xor-D-1-SIZEk, ONE or THREE. Default: the om's (rs-3-2-1024k).
        #[arg(long, value_name = "CONFIG")]
        replication: Option<ReplicationConfig>,
        /// Internal block size of its keys, bytes (EC: a multiple of the cell
        /// size). Default: the om's (256 MiB).
        #[arg(long, value_name = "BYTES")]
        block_size: Option<u64>,
    },
    /// List every bucket.
    List,
    /// Show one bucket.
    Info {
        /// Bucket name.
        name: String,
    },
    /// Delete an empty bucket.
    Delete {
        /// Bucket name.
        name: String,
    },
}

fn to_json(b: &BucketInfo) -> serde_json::Value {
    json!({
        "name": b.name,
        "replication": b.default_replication.to_string(),
        "block_size": b.block_size,
        "created_unix_ms": b.created_unix_ms,
        "owner": b.owner,
        "acl": b.acl.name(),
    })
}

/// Runs a bucket command; `as_json` prints JSON instead of text.
///
/// # Errors
/// Client errors (a missing bucket is `ClientError::BucketNotFound`), output errors.
pub async fn run(client: &Client, cmd: BucketCommand, as_json: bool) -> anyhow::Result<()> {
    match cmd {
        BucketCommand::Create {
            name,
            replication,
            block_size,
        } => {
            let b = client
                .create_bucket(
                    &name,
                    BucketOptions {
                        replication,
                        block_size,
                        ..Default::default()
                    },
                )
                .await?;
            if as_json {
                output::json(&to_json(&b))?;
            } else {
                output::line(format_args!(
                    "created bucket {} ({}, {}-byte blocks)",
                    b.name, b.default_replication, b.block_size
                ))?;
            }
        }
        BucketCommand::List => {
            let buckets = client.list_buckets().await?;
            if as_json {
                output::json(&buckets.iter().map(to_json).collect())?;
            } else {
                let mut t = Table::new(&["name", "replication", "block size"]);
                for b in &buckets {
                    t.row(vec![
                        b.name.clone(),
                        b.default_replication.to_string(),
                        b.block_size.to_string(),
                    ]);
                }
                output::line(t.render())?;
            }
        }
        BucketCommand::Info { name } => {
            let b = client.bucket(&name).await?;
            if as_json {
                output::json(&to_json(&b))?;
            } else {
                output::line(format_args!(
                    "bucket {}\n  replication  {}\n  block size   {} bytes\n  created      {} ms after the Unix epoch\n  owner        {}\n  acl          {}",
                    b.name,
                    b.default_replication,
                    b.block_size,
                    b.created_unix_ms,
                    if b.owner.is_empty() {
                        "(none: S3 administrators only)"
                    } else {
                        &b.owner
                    },
                    b.acl
                ))?;
            }
        }
        BucketCommand::Delete { name } => {
            client.delete_bucket(&name).await?;
            output::line(format_args!("deleted bucket {name}"))?;
        }
    }
    Ok(())
}
