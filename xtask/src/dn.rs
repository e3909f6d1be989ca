//! `cargo xtask dn stop|start|fault|clear|stats N`: datanodes of a running
//! minicluster, N being the position in `cluster.json`'s `datanodes` list;
//! `cargo xtask dn list [--json]`: every datanode's state as the om sees it.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use datanode::{DatanodeAdminClient, FaultKind, FaultRule, RpcKind};
use minicluster::{ClusterInfo, ControlClient};
use proto_crate::{ReplicaIndex, ResultCode};

/// Datanode subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum DnCommand {
    /// List every datanode the om knows with its state (HEALTHY, STALE,
    /// DEAD), operational state (IN_SERVICE, DECOMMISSIONING,
    /// DECOMMISSIONED), seconds since its last heartbeat, used bytes and blocks.
    List {
        /// Print a JSON list of objects (n, id, address, state, op_state,
        /// last_heartbeat_s, used_bytes, blocks, capacity_bytes, open_files;
        /// n is the position for `dn stop|start N`, null when the om is not
        /// the minicluster's).
        #[arg(long)]
        json: bool,
    },
    /// Decommission datanode N: it gets no new block groups, the om's ReplicationManager
    /// copies everything it holds elsewhere (reads keep working), then it is DECOMMISSIONED
    /// (`dn list` shows the state; `admin repair-status --wait` waits for the copies).
    Decommission {
        /// Position in cluster.json, from 0.
        n: usize,
    },
    /// Stop datanode N (its port closes; data is kept).
    Stop {
        /// Position in cluster.json, from 0.
        n: usize,
    },
    /// Start datanode N again on the same port and data dir.
    Start {
        /// Position in cluster.json, from 0.
        n: usize,
    },
    /// Inject a fault into datanode N.
    Fault {
        /// Position in cluster.json, from 0.
        n: usize,
        /// RPC to fail.
        #[arg(long)]
        rpc: RpcArg,
        /// unavailable | corrupt | zero | short | no-edges | delay-ms=MS | code=NAME
        /// (NAME as in NO_SUCH_BLOCK, REPLICA_INDEX_MISMATCH, IO_EXCEPTION...).
        #[arg(long)]
        kind: String,
        /// Only calls for this replica index.
        #[arg(long)]
        replica_index: Option<u32>,
    },
    /// Remove every fault of datanode N.
    Clear {
        /// Position in cluster.json, from 0.
        n: usize,
    },
    /// Print how many faults datanode N injected and how many rules are active.
    Stats {
        /// Position in cluster.json, from 0.
        n: usize,
    },
}

/// RPC kinds that take faults.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum RpcArg {
    GetBlock,
    ReadChunk,
    WriteChunk,
    PutBlock,
}

impl From<RpcArg> for RpcKind {
    fn from(r: RpcArg) -> Self {
        match r {
            RpcArg::GetBlock => RpcKind::GetBlock,
            RpcArg::ReadChunk => RpcKind::ReadChunk,
            RpcArg::WriteChunk => RpcKind::WriteChunk,
            RpcArg::PutBlock => RpcKind::PutBlock,
        }
    }
}

/// Parses `--kind`.
pub(crate) fn parse_kind(s: &str) -> anyhow::Result<FaultKind> {
    Ok(match s {
        "unavailable" => FaultKind::Unavailable,
        "corrupt" => FaultKind::Corrupt,
        "zero" => FaultKind::Zero,
        "short" => FaultKind::Short,
        "no-edges" => FaultKind::NoEdges,
        _ => {
            if let Some(ms) = s.strip_prefix("delay-ms=") {
                FaultKind::Delay(Duration::from_millis(ms.parse().with_context(|| {
                    format!("delay `{ms}` is not a number of milliseconds")
                })?))
            } else if let Some(name) = s.strip_prefix("code=") {
                FaultKind::Code(ResultCode::from_name(name).with_context(|| {
                    let names: Vec<&str> = ResultCode::ALL.iter().map(|c| c.name()).collect();
                    format!("unknown result code `{name}`; one of {}", names.join(", "))
                })?)
            } else {
                bail!(
                    "unknown fault kind `{s}`: use unavailable, corrupt, zero, short, no-edges, delay-ms=MS or code=NAME"
                )
            }
        }
    })
}

fn datanode(info: &ClusterInfo, n: usize) -> anyhow::Result<&minicluster::DatanodeInfo> {
    info.datanodes
        .get(n)
        .with_context(|| format!("no datanode {n}: the cluster has {}", info.datanodes.len()))
}

async fn control(info: &ClusterInfo) -> anyhow::Result<ControlClient> {
    let addr = info
        .control
        .as_deref()
        .context("cluster.json has no control address (is `cargo xtask minicluster` serving?)")?;
    ControlClient::connect(addr)
        .await
        .with_context(|| format!("connecting to the minicluster control service at {addr}"))
}

async fn admin(
    target: &ozone_cli::Target,
    info: &ClusterInfo,
    n: usize,
) -> anyhow::Result<DatanodeAdminClient> {
    let dn = datanode(info, n)?;
    DatanodeAdminClient::connect(&dn.address, target.tls()?.as_ref())
        .await
        .with_context(|| {
            format!(
                "connecting to datanode {n} at {} (is it running?)",
                dn.address
            )
        })
}

pub(crate) async fn run(target: &ozone_cli::Target, cmd: DnCommand) -> anyhow::Result<()> {
    let info = || target.cluster_info();
    match cmd {
        DnCommand::List { json } => ozone_cli::datanode::list(target, json).await?,
        DnCommand::Decommission { n } => {
            let info = info()?;
            let dn = datanode(&info, n)?;
            let mut admin = target.minicluster_om_admin(&info).await?;
            let state = admin.decommission(&dn.id).await?;
            println!("datanode {n} ({}) is {state}", dn.address);
        }
        DnCommand::Stop { n } => {
            let info = info()?;
            datanode(&info, n)?;
            let addr = control(&info).await?.stop(u32::try_from(n)?).await?;
            println!("datanode {n} ({addr}) stopped");
        }
        DnCommand::Start { n } => {
            let info = info()?;
            datanode(&info, n)?;
            let addr = control(&info).await?.start(u32::try_from(n)?).await?;
            println!("datanode {n} ({addr}) started");
        }
        DnCommand::Fault {
            n,
            rpc,
            kind,
            replica_index,
        } => {
            let info = info()?;
            let mut rule = FaultRule::new(rpc.into(), parse_kind(&kind)?)?;
            if let Some(r) = replica_index {
                let r = ReplicaIndex::new(r)
                    .context("replica indexes start at 1 (0 names no EC internal block)")?;
                rule = rule.for_replica_index(r);
            }
            admin(target, &info, n).await?.inject(rule.clone()).await?;
            println!("datanode {n}: injected {rule}");
        }
        DnCommand::Clear { n } => {
            let info = info()?;
            admin(target, &info, n).await?.clear().await?;
            println!("datanode {n}: faults cleared");
        }
        DnCommand::Stats { n } => {
            let info = info()?;
            let (injected, rules) = admin(target, &info, n).await?.stats().await?;
            println!("datanode {n}: {injected} faults injected, {rules} rules active");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault_kind() {
        assert_eq!(
            parse_kind("unavailable").expect("valid fault kind"),
            FaultKind::Unavailable
        );
        assert_eq!(
            parse_kind("delay-ms=250").expect("valid fault kind"),
            FaultKind::Delay(Duration::from_millis(250))
        );
        assert_eq!(
            parse_kind("code=NO_SUCH_BLOCK").expect("valid fault kind"),
            FaultKind::Code(ResultCode::NoSuchBlock)
        );
        assert!(parse_kind("code=NOPE").is_err());
        assert!(parse_kind("delay-ms=x").is_err());
        assert!(parse_kind("explode").is_err());
    }
}
