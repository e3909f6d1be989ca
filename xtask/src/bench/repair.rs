//! The `repair` suite: rebuild one datanode's share of `--size` bytes (256 MiB by default) of
//! rs-3-2-1024k keys, measured against a sequential read of the same keys on the same cluster.
//!
//! It runs on a cluster of its own (six datanodes: each group's five plus one to rebuild on).
//! Keys are written, read back sequentially (the `read-sequential` row), then one datanode is
//! stopped and every index it held is rebuilt on the datanode outside its group through
//! `om::reconstruct_ec_indexes` — the path the ReplicationManager takes — with as many rebuilds
//! at once as the ReplicationManager allows by default, in all and per target (the `rebuild`
//! row; its bytes are the rebuilt internal blocks' committed lengths). The ratio `rebuild/read-sequential` compares
//! MB/s of rebuilt data with MB/s of data read.

use std::time::Instant;

use anyhow::Context;
use ec_client::{ClientConfig, ReplicaIndex, ReplicationConfig};
use ec_codec::{BlockGroupLayout, EcReplicationConfig};
use futures::StreamExt;
use minicluster::{MiniCluster, MiniClusterConfig};
use tokio::io::AsyncReadExt;

use super::{Latencies, Report, Settings, ensure_bucket, write_key};

const BUCKET: &str = "bench-repair";
const KEYS: u64 = 4;

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let mut cluster = MiniCluster::start(MiniClusterConfig::default().with_datanodes(6))
        .await
        .context("starting the repair bench's cluster")?;
    let result = measure(s, &mut cluster, started).await;
    cluster.shutdown().await;
    result
}

async fn measure(s: &Settings, cluster: &mut MiniCluster, started: u64) -> anyhow::Result<Report> {
    let ec = EcReplicationConfig::default();
    let client = cluster.client_with(ClientConfig::default()).await?;
    ensure_bucket(&client, BUCKET, ReplicationConfig::Ec(ec), 256 << 20).await?;
    let per_key = s.size.div_ceil(KEYS).max(1);
    let mut infos = Vec::new();
    for i in 0..KEYS {
        infos.push(write_key(&client, BUCKET, &format!("k{i}"), per_key, 40 + i).await?);
    }

    // Sequential read of every key, 4 MiB at a time.
    let mut lat = Latencies::default();
    let mut buf = vec![0u8; 4 << 20];
    let before = client.metrics();
    let start = Instant::now();
    for info in &infos {
        let t = Instant::now();
        let mut r = client.open_key(BUCKET, &info.name).await?;
        while r.read(&mut buf).await? > 0 {}
        lat.push(t.elapsed());
    }
    let read_elapsed = start.elapsed();
    let read_rpcs = client.metrics().since(&before);
    let mut rows = vec![super::report::row(
        "read-sequential",
        "ec",
        1,
        KEYS,
        per_key * KEYS,
        read_elapsed,
        &lat,
        &read_rpcs,
    )];

    // The datanode holding the most internal blocks goes; each of its indexes is rebuilt on
    // the datanode outside that group.
    let uuids: Vec<String> = cluster
        .datanodes()
        .iter()
        .map(|d| d.uuid().to_string())
        .collect();
    let held = |u: &str| {
        infos
            .iter()
            .flat_map(|k| &k.block_groups)
            .filter(|g| g.pipeline.locations.iter().any(|l| l.datanode.uuid == u))
            .count()
    };
    let victim = uuids
        .iter()
        .max_by_key(|u| held(u))
        .context("no datanode")?
        .clone();
    let mut tasks = Vec::new();
    let mut rebuilt_bytes = 0u64;
    for info in &infos {
        for (gi, g) in info.block_groups.iter().enumerate() {
            let Some(index) = g
                .pipeline
                .locations
                .iter()
                .find(|l| l.datanode.uuid == victim.as_str())
                .and_then(|l| l.replica_index)
            else {
                continue;
            };
            let target = uuids
                .iter()
                .find(|u| {
                    !g.pipeline
                        .locations
                        .iter()
                        .any(|l| l.datanode.uuid == u.as_str())
                })
                .context("a datanode outside the group")?;
            rebuilt_bytes += BlockGroupLayout::new(ec, g.length).internal_block_len(index)?;
            tasks.push((info.name.clone(), gi, index, target.parse()?));
        }
    }
    let n = cluster.datanode_by_uuid(&victim).context("victim")?.index();
    cluster.datanode_mut(n)?.stop().await;
    let om = std::sync::Arc::clone(cluster.om());
    let count = tasks.len() as u64;
    // As the ReplicationManager schedules: at most DEFAULT_MAX_REPAIRS_IN_FLIGHT at once,
    // DEFAULT_MAX_REPAIRS_PER_DATANODE of them per target.
    let per_target: std::collections::HashMap<String, std::sync::Arc<tokio::sync::Semaphore>> =
        uuids
            .iter()
            .map(|u| {
                (
                    u.clone(),
                    std::sync::Arc::new(tokio::sync::Semaphore::new(
                        om::DEFAULT_MAX_REPAIRS_PER_DATANODE,
                    )),
                )
            })
            .collect();
    let start = Instant::now();
    let results: Vec<anyhow::Result<std::time::Duration>> = futures::stream::iter(tasks)
        .map(
            |(key, group, index, target): (
                String,
                usize,
                ReplicaIndex,
                proto_crate::DatanodeId,
            )| {
                let om = std::sync::Arc::clone(&om);
                let slot = per_target.get(target.as_str()).cloned();
                async move {
                    let _permit = match &slot {
                        Some(s) => Some(s.acquire().await?),
                        None => None,
                    };
                    let t = Instant::now();
                    om::reconstruct_ec_indexes(&om, BUCKET, &key, group, &[(index, target)])
                        .await?;
                    Ok(t.elapsed())
                }
            },
        )
        .buffer_unordered(om::DEFAULT_MAX_REPAIRS_IN_FLIGHT)
        .collect()
        .await;
    let elapsed = start.elapsed();
    let mut lat = Latencies::default();
    for r in results {
        lat.push(r?);
    }
    rows.push(super::report::row(
        "rebuild",
        "ec",
        om::DEFAULT_MAX_REPAIRS_IN_FLIGHT,
        count,
        rebuilt_bytes,
        elapsed,
        &lat,
        &Default::default(),
    ));
    let mut report = Report {
        suite: "repair".into(),
        started_unix_ms: started,
        config: s.config_json(),
        rows,
        ratios: Default::default(),
    };
    report.mb_ratio(
        "rebuild/read-sequential (MB/s)",
        ("rebuild", "ec"),
        ("read-sequential", "ec"),
    );
    Ok(report)
}
