//! `cargo xtask key …`: the `ozone sh key` commands (the same code, from
//! `ozone-cli`), plus `add-replica`, which names datanodes by their position
//! in the minicluster's `cluster.json`. `put` creates a missing bucket.

use anyhow::Context;
use clap::Subcommand;
use ec_client::ReplicaIndex;
use ozone_cli::Target;
use ozone_cli::key::{self, KeyCommand};

/// Key subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum XtaskKeyCommand {
    #[command(flatten)]
    Shared(KeyCommand),
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
    },
}

pub(crate) async fn run(
    target: &Target,
    as_json: bool,
    cmd: XtaskKeyCommand,
) -> anyhow::Result<()> {
    match cmd {
        XtaskKeyCommand::Shared(mut cmd) => {
            if let KeyCommand::Put { create_bucket, .. } = &mut cmd {
                *create_bucket = true;
            }
            key::run(&target.client().await?, cmd, as_json).await
        }
        XtaskKeyCommand::AddReplica {
            target: key_target,
            group,
            index,
            datanode,
        } => {
            let (bucket, key) = key::split(&key_target)?;
            let info = target.cluster_info()?;
            let dn = info.datanodes.get(datanode).with_context(|| {
                format!(
                    "no datanode {datanode}: the cluster has {}",
                    info.datanodes.len()
                )
            })?;
            let mut admin = target.minicluster_om_admin(&info).await?;
            let n = admin
                .add_replica(bucket, key, group, ReplicaIndex::from_wire(index), &dn.id)
                .await?;
            println!(
                "copied {n} bytes of {key_target} group {group} index {index} to datanode {datanode} ({})",
                dn.address
            );
            Ok(())
        }
    }
}
