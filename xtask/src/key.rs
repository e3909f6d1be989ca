//! `cargo xtask key put|get|info|ls`: keys on a running cluster.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Subcommand;
use ec_client::{
    BucketOptions, Client, ClientConfig, ClientError, ReplicaIndex, ReplicationConfig,
};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cluster_file;

/// Key subcommands. Each takes `--om HOST:PORT`, defaulting to the om in
/// `target/minicluster/cluster.json`.
#[derive(Debug, Subcommand)]
pub(crate) enum KeyCommand {
    /// Write FILE as BUCKET/KEY (creating the bucket if missing).
    Put {
        /// BUCKET/KEY.
        target: String,
        /// File to upload.
        file: PathBuf,
        /// Replication (rs-3-2-1024k, rs-6-3-1024k, ...); default: the bucket's.
        #[arg(long)]
        replication: Option<ReplicationConfig>,
        /// The om (HOST:PORT).
        #[arg(long)]
        om: Option<String>,
    },
    /// Read BUCKET/KEY into OUT (`-` for stdout).
    Get {
        /// BUCKET/KEY.
        target: String,
        /// Output file, or `-` for stdout.
        out: String,
        /// First byte to read.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Bytes to read (default: to the end).
        #[arg(long)]
        length: Option<u64>,
        /// The om (HOST:PORT).
        #[arg(long)]
        om: Option<String>,
    },
    /// Print BUCKET/KEY's metadata as JSON, with each replica's stored length.
    Info {
        /// BUCKET/KEY.
        target: String,
        /// The om (HOST:PORT).
        #[arg(long)]
        om: Option<String>,
    },
    /// Copy replica index R of block group G (from 0) of BUCKET/KEY to
    /// datanode N (its position in cluster.json) as a spare replica.
    AddReplica {
        /// BUCKET/KEY.
        target: String,
        /// Block group, counting from 0.
        #[arg(long)]
        group: u32,
        /// Replica index to copy (1..=d+p).
        #[arg(long)]
        index: u32,
        /// Datanode to copy to: its position in cluster.json, from 0.
        #[arg(long)]
        datanode: usize,
        /// The om (HOST:PORT).
        #[arg(long)]
        om: Option<String>,
    },
    /// Delete BUCKET/KEY; its blocks are freed on the datanodes by the om's
    /// block deleting service.
    Delete {
        /// BUCKET/KEY.
        target: String,
        /// The om (HOST:PORT).
        #[arg(long)]
        om: Option<String>,
    },
    /// List the keys of BUCKET.
    Ls {
        /// Bucket.
        bucket: String,
        /// Only keys starting with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
        /// The om (HOST:PORT).
        #[arg(long)]
        om: Option<String>,
    },
}

fn split(target: &str) -> anyhow::Result<(&str, &str)> {
    match target.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() => Ok((b, k)),
        _ => bail!("expected BUCKET/KEY, got `{target}`"),
    }
}

async fn connect(om: Option<String>) -> anyhow::Result<Client> {
    let om = cluster_file::om_address(om)?;
    Client::connect(&om, ClientConfig::default())
        .await
        .with_context(|| format!("connecting to the om at {om}"))
}

pub(crate) async fn run(cmd: KeyCommand) -> anyhow::Result<()> {
    match cmd {
        KeyCommand::Put {
            target,
            file,
            replication,
            om,
        } => put(&connect(om).await?, &target, &file, replication).await,
        KeyCommand::Get {
            target,
            out,
            offset,
            length,
            om,
        } => get(&connect(om).await?, &target, &out, offset, length).await,
        KeyCommand::Info { target, om } => info(&connect(om).await?, &target).await,
        KeyCommand::AddReplica {
            target,
            group,
            index,
            datanode,
            om,
        } => {
            let (bucket, key) = split(&target)?;
            let info = cluster_file::read(&cluster_file::default_path())?;
            let dn = info.datanodes.get(datanode).with_context(|| {
                format!(
                    "no datanode {datanode}: the cluster has {}",
                    info.datanodes.len()
                )
            })?;
            let om = om.unwrap_or(info.om.clone());
            let mut admin = om::OmAdminClient::connect(&om)
                .await
                .with_context(|| format!("connecting to the om at {om}"))?;
            let n = admin
                .add_replica(bucket, key, group, ReplicaIndex::from_wire(index), &dn.id)
                .await?;
            println!(
                "copied {n} bytes of {target} group {group} index {index} to datanode {datanode} ({})",
                dn.address
            );
            Ok(())
        }
        KeyCommand::Delete { target, om } => {
            let (bucket, key) = split(&target)?;
            connect(om).await?.delete_key(bucket, key).await?;
            eprintln!("deleted {target}");
            Ok(())
        }
        KeyCommand::Ls { bucket, prefix, om } => {
            let client = connect(om).await?;
            for k in client.list_keys(&bucket, &prefix, "", 0).await? {
                println!(
                    "{:>14}  {:<14}  {}",
                    k.length,
                    k.replication.to_string(),
                    k.name
                );
            }
            Ok(())
        }
    }
}

async fn put(
    client: &Client,
    target: &str,
    file: &PathBuf,
    replication: Option<ReplicationConfig>,
) -> anyhow::Result<()> {
    let (bucket, key) = split(target)?;
    match client.bucket(bucket).await {
        Ok(_) => {}
        Err(ClientError::BucketNotFound(_)) => {
            client
                .create_bucket(
                    bucket,
                    BucketOptions {
                        replication,
                        block_size: None,
                    },
                )
                .await?;
        }
        Err(e) => return Err(e.into()),
    }
    let mut f = tokio::fs::File::open(file)
        .await
        .with_context(|| format!("opening {}", file.display()))?;
    let mut w = client.create_key(bucket, key, replication).await?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        w.write(&buf[..n]).await?;
    }
    let info = w.close().await?;
    eprintln!(
        "put {bucket}/{key}: {} bytes, {}",
        info.length, info.replication
    );
    Ok(())
}

async fn get(
    client: &Client,
    target: &str,
    out: &str,
    offset: u64,
    length: Option<u64>,
) -> anyhow::Result<()> {
    let (bucket, key) = split(target)?;
    let stream = client.open_key(bucket, key).await?;
    let len = stream.len();
    if offset > len {
        bail!("offset {offset} is past the end of {target} ({len} bytes)");
    }
    let end = match length {
        Some(l) => offset
            .checked_add(l)
            .filter(|e| *e <= len)
            .with_context(|| {
                format!("range {offset}+{l} ends past the end of {target} ({len} bytes)")
            })?,
        None => len,
    };
    let mut sink: Box<dyn tokio::io::AsyncWrite + Unpin + Send> = if out == "-" {
        Box::new(tokio::io::stdout())
    } else {
        Box::new(
            tokio::fs::File::create(out)
                .await
                .with_context(|| format!("creating {out}"))?,
        )
    };
    let mut at = offset;
    while at < end {
        let n = (end - at).min(4 << 20);
        let bytes = stream.read_range(at, n).await?;
        if bytes.is_empty() {
            bail!("unexpected end of {target} at {at}");
        }
        sink.write_all(&bytes).await?;
        at += bytes.len() as u64;
    }
    sink.flush().await?;
    Ok(())
}

async fn info(client: &Client, target: &str) -> anyhow::Result<()> {
    let (bucket, key) = split(target)?;
    let info = client.key_info(bucket, key).await?;
    let mut groups = Vec::new();
    for g in &info.block_groups {
        let mut replicas = Vec::new();
        for loc in &g.pipeline.locations {
            let length = match block_stream::XceiverClientManager::direct(&loc.datanode.address) {
                Ok(dn) => match dn
                    .get_committed_block_length(g.block_id(loc.replica_index))
                    .await
                {
                    Ok(l) => json!(l),
                    Err(e) => json!({ "error": e.to_string() }),
                },
                Err(e) => json!({ "error": e.to_string() }),
            };
            replicas.push(json!({
                "index": ReplicaIndex::to_wire(loc.replica_index),
                "datanode": loc.datanode.uuid.as_str(),
                "address": loc.datanode.address,
                "length": length,
            }));
        }
        groups.push(json!({
            "container_id": g.container_id,
            "local_id": g.local_id,
            "length": g.length,
            "replicas": replicas,
        }));
    }
    let doc = json!({
        "length": info.length,
        "replication": info.replication.to_string(),
        "block_groups": groups,
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}
