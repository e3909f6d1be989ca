//! The `meta` suite: the om's metadata store on redb and on etcd (one local
//! member, and three), side by side in one run, with the transaction shapes
//! of the om's key operations (issue 18; the om itself is not on the store
//! yet, so these are the store's own rates, the floor under the om's):
//!
//! - `open-commit`: what opening and committing a key costs the store: a
//!   guarded create of an open-key record, a read of the key, and a commit
//!   guarded on that read that writes the key and deletes the open record
//!   (one op = one get + two transactions);
//! - `lookup`: a get of a committed key (what a key lookup reads);
//! - `list-100`: a scan of 100 rows of one bucket;
//! - the same `open-commit` and `lookup` from `--threads` tasks at once.
//!
//! Modes `om-redb`, `om-etcd-1` and `om-etcd-3` run the same workloads on the om itself
//! (in process, five registered datanodes that never serve, since allocation reads only
//! the registry): on its own `om.redb`, and on the same etcd members as `om --etcd` runs
//! (another namespace; sessions, leases and client counts all rows of the store).
//! `open-commit` is `open_key`, `allocate_block_group` and `commit_key` of one group,
//! `lookup` is `lookup_key`, `list-100` is `list_keys` of 100. `WORKLOAD om-redb/redb` is
//! what the om's own work (its transactions, decoding and bookkeeping) costs over the
//! store's floor.
//!
//! Ratios `WORKLOAD etcd-1/redb` and `etcd-3/redb` say what etcd costs the store;
//! `WORKLOAD om-etcd-1/om-redb` and `om-etcd-3/om-redb` what it costs the om, which is
//! what a user choosing `om --etcd` over one machine's `om.redb` gives up.
//! Every mode's store is fresh, under a temp dir of its own; etcd runs as
//! real members on loopback (`LocalEtcd`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use meta_store::local_etcd::LocalEtcd;
use meta_store::{EtcdConfig, EtcdStore, MetaStore, RedbStore, Table, Txn};

use super::{Latencies, Report, Row, Settings};

/// `(bucket, key) -> (size, generation)`, the shape of the om's key table.
const KEYS: Table<(String, String), (u64, u64)> = Table::new("keys");
/// Open-key records: `(bucket, key, session) -> client`.
const OPEN: Table<(String, String, u64), String> = Table::new("open_keys");

/// One store under test and what keeps it running.
struct Backend {
    mode: &'static str,
    store: MetaStore,
    /// The members, for a store on etcd.
    etcd: Option<LocalEtcd>,
}

async fn backends(dir: &std::path::Path) -> anyhow::Result<Vec<Backend>> {
    let redb = RedbStore::open(&dir.join("meta.redb")).context("opening redb")?;
    let mut out = vec![Backend {
        mode: "redb",
        store: MetaStore::Redb(redb),
        etcd: None,
    }];
    for (mode, members) in [("etcd-1", 1), ("etcd-3", 3)] {
        let etcd = LocalEtcd::start(&dir.join(mode), members)
            .await
            .with_context(|| format!("starting {members} etcd member(s)"))?;
        let store = EtcdStore::connect(&EtcdConfig::new(etcd.endpoints()))
            .await
            .context("connecting to etcd")?;
        out.push(Backend {
            mode,
            store: MetaStore::Etcd(store),
            etcd: Some(etcd),
        });
    }
    Ok(out)
}

/// The om under `dir` — on its own redb file, or on `etcd`'s members (in namespace
/// `/om-bench/`, apart from the store modes' rows) as `om --etcd` opens it — with five
/// registered datanodes (never stale during a run) and the bench's buckets.
async fn om_backend(
    dir: &std::path::Path,
    etcd: Option<&LocalEtcd>,
) -> anyhow::Result<Arc<om::OzoneManager>> {
    let forever = Duration::from_secs(365 * 24 * 3600);
    let config = om::OmConfig::new(dir).with_liveness(forever, forever);
    let om = match etcd {
        None => om::OzoneManager::open(config)
            .await
            .context("opening the om")?,
        Some(etcd) => {
            let store = MetaStore::Etcd(
                EtcdStore::connect(
                    &EtcdConfig::new(etcd.endpoints()).with_namespace(b"/om-bench/".to_vec()),
                )
                .await
                .context("connecting the om to etcd")?,
            );
            om::OzoneManager::open_shared(config, &store)
                .await
                .context("opening the om on etcd")?
        }
    };
    for i in 0..5u16 {
        om.register_datanode(proto_crate::DatanodeDetails {
            uuid: proto_crate::DatanodeId::from_u128(u128::from(i) + 1),
            address: format!("127.0.0.1:{}", 1 + i),
        })
        .await?;
    }
    for bucket in ["bench", "bench-mt"] {
        om.create_bucket(bucket, None, None).await?;
    }
    Ok(Arc::new(om))
}

/// Opens, allocates one group for and commits key `name` of `bucket` on the om.
async fn om_open_commit(
    om: &Arc<om::OzoneManager>,
    bucket: &str,
    name: &str,
) -> anyhow::Result<()> {
    let s = om.open_key(bucket, name, None).await?;
    let g = om.allocate_block_group(s.session_id, &[]).await?;
    let g = proto_crate::BlockGroup { length: 1, ..g };
    om.commit_key(s.session_id, &[g], 1, std::collections::BTreeMap::new())
        .await?;
    Ok(())
}

/// The om workloads, as the store's below, as mode `mode` (see [`om_backend`]).
async fn om_rows(
    s: &Settings,
    dir: &std::path::Path,
    ops: u64,
    mode: &'static str,
    etcd: Option<&LocalEtcd>,
) -> anyhow::Result<Vec<Row>> {
    let om = om_backend(&dir.join(mode), etcd).await?;
    let mut rows = Vec::new();
    for (bucket, tasks) in [("bench", 1), ("bench-mt", s.threads)] {
        let om = Arc::clone(&om);
        rows.push(
            measure("open-commit", mode, tasks, ops, move |i| {
                let om = Arc::clone(&om);
                async move { om_open_commit(&om, bucket, &format!("k{i:08}")).await }
            })
            .await?,
        );
    }
    for tasks in [1, s.threads] {
        let om = Arc::clone(&om);
        rows.push(
            measure("lookup", mode, tasks, s.ops, move |i| {
                let om = Arc::clone(&om);
                async move {
                    let key = format!("k{:08}", i % ops);
                    om.lookup_key("bench", &key).await?;
                    Ok(())
                }
            })
            .await?,
        );
    }
    let om = Arc::clone(&om);
    rows.push(
        measure("list-100", mode, 1, (s.ops / 10).max(1), move |i| {
            let om = Arc::clone(&om);
            async move {
                let after = format!("k{:08}", (i * 37) % ops);
                let page = om.list_keys("bench", "", &after, 100).await?;
                anyhow::ensure!(
                    !page.is_empty() || (i * 37) % ops + 1 >= ops,
                    "an empty page"
                );
                Ok(())
            }
        })
        .await?,
    );
    Ok(rows)
}

/// Mode of the rows measured on the om on its own redb file.
const OM_MODE: &str = "om-redb";
/// Modes of the rows measured on the om on etcd, by store mode.
const OM_ETCD_MODES: [(&str, &str); 2] = [("etcd-1", "om-etcd-1"), ("etcd-3", "om-etcd-3")];

/// Opens and commits key `name` of `bucket` as session `session`.
async fn open_commit(
    store: &MetaStore,
    bucket: &str,
    name: &str,
    session: u64,
) -> anyhow::Result<()> {
    let open = (bucket.to_string(), name.to_string(), session);
    let txn = OPEN.when_absent(Txn::new(), &open);
    let txn = OPEN.put(txn, &open, &"bench".to_string());
    anyhow::ensure!(store.commit(txn).await?.committed(), "open conflicted");
    let key = (bucket.to_string(), name.to_string());
    let seen = KEYS.get(store, &key).await?;
    let generation = seen.as_ref().map_or(0, |r| r.value.1 + 1);
    let txn = KEYS.when_as_read(Txn::new(), &key, seen.as_ref());
    let txn = KEYS.put(txn, &key, &(4096, generation));
    let txn = OPEN.delete(txn, &open);
    anyhow::ensure!(store.commit(txn).await?.committed(), "commit conflicted");
    Ok(())
}

/// Runs `op(i)` for `i` in `0..ops`, from `tasks` tasks; returns the row.
async fn measure<F, Fut>(
    workload: &str,
    mode: &str,
    tasks: usize,
    ops: u64,
    op: F,
) -> anyhow::Result<Row>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let per_task = (ops / tasks as u64).max(1);
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks as u64)
        .map(|t| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut lat = Latencies::default();
                for i in 0..per_task {
                    let began = Instant::now();
                    op(t * per_task + i).await?;
                    lat.push(began.elapsed());
                }
                anyhow::Ok(lat)
            })
        })
        .collect();
    let mut lat = Latencies::default();
    for h in handles {
        lat.extend(h.await??);
    }
    let total = per_task * tasks as u64;
    Ok(super::report::row(
        workload,
        mode,
        tasks,
        total,
        0,
        start.elapsed(),
        &lat,
        &block_stream::MetricsSnapshot::default(),
    ))
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let dir = tempfile::tempdir().context("temp dir")?;
    let backends = backends(dir.path()).await?;
    // Each open-commit is three store calls, two of them durable writes.
    let ops = (s.ops / 4).max(1);
    let mut rows = Vec::new();
    for b in &backends {
        let store = b.store.clone();
        rows.push(
            measure("open-commit", b.mode, 1, ops, move |i| {
                let store = store.clone();
                async move { open_commit(&store, "bench", &format!("k{i:08}"), i).await }
            })
            .await?,
        );
        let store = b.store.clone();
        rows.push(
            measure("open-commit", b.mode, s.threads, ops, move |i| {
                let store = store.clone();
                async move { open_commit(&store, "bench-mt", &format!("k{i:08}"), i).await }
            })
            .await?,
        );
        for tasks in [1, s.threads] {
            let store = b.store.clone();
            rows.push(
                measure("lookup", b.mode, tasks, s.ops, move |i| {
                    let store = store.clone();
                    async move {
                        let key = ("bench".to_string(), format!("k{:08}", i % ops));
                        KEYS.get(&store, &key)
                            .await?
                            .context("a committed key is missing")?;
                        Ok(())
                    }
                })
                .await?,
            );
        }
        let store = b.store.clone();
        rows.push(
            measure("list-100", b.mode, 1, (s.ops / 10).max(1), move |i| {
                let store = store.clone();
                async move {
                    let after = ("bench".to_string(), format!("k{:08}", (i * 37) % ops));
                    let rows = KEYS
                        .scan(&store, &"bench".to_string(), Some(&after), 100)
                        .await?;
                    anyhow::ensure!(
                        !rows.rows.is_empty() || !rows.more,
                        "an empty page with more"
                    );
                    Ok(())
                }
            })
            .await?,
        );
    }
    rows.extend(om_rows(s, dir.path(), ops, OM_MODE, None).await?);
    for (store_mode, mode) in OM_ETCD_MODES {
        let etcd = backends
            .iter()
            .find(|b| b.mode == store_mode)
            .and_then(|b| b.etcd.as_ref());
        anyhow::ensure!(etcd.is_some(), "no {store_mode} members for the om");
        rows.extend(om_rows(s, dir.path(), ops, mode, etcd).await?);
    }
    let mut report = Report {
        suite: "meta".into(),
        started_unix_ms: started,
        config: s.config_json(),
        rows,
        ratios: Default::default(),
    };
    for w in ["open-commit", "lookup", "list-100"] {
        for mode in ["etcd-1", "etcd-3", OM_MODE] {
            report.ratio(&format!("{w} {mode}/redb"), w, mode, "redb");
        }
        for (_, mode) in OM_ETCD_MODES {
            report.ratio(&format!("{w} {mode}/{OM_MODE}"), w, mode, OM_MODE);
        }
    }
    for mode in [
        "redb",
        "etcd-1",
        "etcd-3",
        OM_MODE,
        "om-etcd-1",
        "om-etcd-3",
    ] {
        let one = report.find("open-commit", mode).map(|r| r.ops_per_sec);
        let many = report
            .rows
            .iter()
            .find(|r| {
                r.workload == "open-commit"
                    && r.mode == mode
                    && r.threads == s.threads
                    && s.threads > 1
            })
            .map(|r| r.ops_per_sec);
        if let (Some(a), Some(b)) = (one, many) {
            report.ratios.insert(
                format!("open-commit {mode} {}-tasks/1-task", s.threads),
                ((b / a) * 1000.0).round() / 1000.0,
            );
        }
    }
    Ok(report)
}
