//! The crash-consistency test (issue 11, part 4): writers keep writing EC
//! and replicated keys, overwriting them and completing multipart uploads
//! (through the client and through the S3 gateway's handlers) against a [`ProcessCluster`] while a killer SIGKILLs the om or a
//! datanode at seeded random moments and starts it again. Afterwards:
//! - every key whose `close()` (or multipart complete) returned Ok reads
//!   back exactly that version, or one whose commit's outcome was unknown
//!   (its call failed: the om may have committed it all the same); keys
//!   written once must read back exactly their acknowledged version;
//! - a key no acknowledged write produced is absent, or exactly one of the
//!   versions whose outcome was unknown — never partial or corrupt;
//! - every restart came up on its own (no manual repair);
//! - offline, each datanode's store opens, reclaims what no PutBlock
//!   committed, and finds no committed block whose file is short; the whole
//!   cluster then restarts and every key reads back again.
//!
//! SIGKILL ends a process but keeps the kernel's page cache, so this is
//! process-crash consistency: it checks the ordering of file writes,
//! PutBlock and the om's transactions, not fsync against power loss.
//!
//! Run by `cargo test` with one short run (`minicluster/tests/crash.rs`)
//! and by `cargo xtask crash-test --iterations N` for long ones. The seed
//! fixes the operations and the kill schedule; the processes' timing is the
//! machine's, so a failing seed is replayed by running it again (usually
//! with more iterations), with the logs under the base directory.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ec_client::{BucketOptions, Client, ClientConfig, ClientError, ReplicationConfig};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::sync::Mutex;

use crate::pattern;
use crate::process::{Binaries, ProcessCluster, ProcessError, ProcessTimings, Target};

/// What one crash-test run does.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Seed of the operations and of the kill schedule.
    pub seed: u64,
    /// SIGKILLs to deliver (each followed by a restart).
    pub kill_points: usize,
    /// Datanodes (at least 6: rs-3-2 writes need 5 while one is down).
    pub datanodes: usize,
    /// Concurrent writer tasks (each owns its keys).
    pub writers: usize,
    /// Where data dirs and logs go (kept for a failing run's post-mortem).
    pub base_dir: PathBuf,
    /// The binaries to run.
    pub bins: Binaries,
}

/// What a run did, for the caller to print.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// The seed.
    pub seed: u64,
    /// Every kill, in order.
    pub kills: Vec<Target>,
    /// Operations that returned Ok.
    pub ops_ok: u64,
    /// Operations that failed (their outcome is unknown unless nothing
    /// reached the om).
    pub ops_failed: u64,
    /// Failed operations by kind of error (`om NAME`, `om timeout`,
    /// `datanode`, `too few locations`, `s3 CODE`, `other`).
    pub failures: BTreeMap<String, u64>,
    /// Keys checked at the end (each twice: before and after the offline
    /// recovery and cluster restart).
    pub keys_checked: usize,
    /// Block files with no committed metadata that datanodes removed when
    /// they started again (counted from their logs) or at the offline reopen.
    pub orphans_removed: u64,
    /// Block files truncated to their committed length, counted the same way.
    pub tails_truncated: u64,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CrashTestError {
    /// A process could not be started, killed or restarted.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Setting up or verifying through the client failed.
    #[error("{context}: {source}")]
    Client {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: ClientError,
    },
    /// A datanode's store did not open offline.
    #[error("datanode store {dir}: {message}")]
    Store {
        /// Its data dir.
        dir: String,
        /// Why.
        message: String,
    },
    /// A durability or atomicity rule was broken.
    #[error("seed {seed}: {message}")]
    Violation {
        /// The run's seed.
        seed: u64,
        /// What was found.
        message: String,
    },
}

/// A key's content, as the segments it was written from: (pattern seed,
/// length) each, concatenated.
type Version = Vec<(u64, u64)>;

fn content(v: &Version) -> Vec<u8> {
    v.iter()
        .flat_map(|&(seed, len)| pattern::bytes(seed, 0, usize::try_from(len).unwrap_or(0)))
        .collect()
}

/// What a key may hold: the last acknowledged version, or any version whose
/// commit's outcome is unknown (its call failed or timed out; a commit the
/// om received but answered late can even land after a later acknowledged
/// one, so unknown versions stay possible for good). Keys written once are
/// what holds durability to the letter: their only version, if
/// acknowledged, must be there exactly.
#[derive(Debug, Default)]
struct KeyModel {
    acked: Option<Version>,
    unknown: Vec<Version>,
}

type Model = BTreeMap<(String, String), KeyModel>;

mod s3;

/// Buckets: EC keys, replicated keys, multipart uploads through the
/// client, and S3 PUTs and one-part multipart uploads through the gateway.
const BUCKETS: [&str; 4] = ["ec", "rep", "mp", "s3"];
const KEYS_PER_WRITER: usize = 4;

fn client_config() -> ClientConfig {
    let mut c = ClientConfig::default()
        .with_rpc_timeout(Duration::from_secs(3))
        .with_replicated_chunk_size(256 * 1024);
    c.om_timeout = Duration::from_secs(3);
    c
}

/// Runs one crash test.
///
/// # Errors
/// [`CrashTestError::Violation`] for a broken rule; the others when the
/// harness itself fails.
pub async fn run(config: &CrashConfig) -> Result<CrashReport, CrashTestError> {
    let timings = ProcessTimings::default();
    let mut cluster =
        ProcessCluster::start(&config.bins, &config.base_dir, config.datanodes, timings).await?;
    let client = connect(&cluster.om_address()).await?;
    create_buckets(&client).await?;
    let model: Arc<Mutex<Model>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failed: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let mut writers = Vec::new();
    for w in 0..config.writers {
        let ctx = WriterCtx {
            client: client.clone(),
            model: Arc::clone(&model),
            stop: Arc::clone(&stop),
            ok: Arc::clone(&ok),
            failed: Arc::clone(&failed),
            gateway: s3_gateway::Gateway::new(client.clone(), 12 * 1024 * 1024),
            writer: w,
            rng: SmallRng::seed_from_u64(config.seed ^ (w as u64 + 1).wrapping_mul(0x9E37)),
        };
        writers.push(tokio::spawn(ctx.run()));
    }
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let mut report = CrashReport {
        seed: config.seed,
        ..CrashReport::default()
    };
    let killed = async {
        for _ in 0..config.kill_points {
            tokio::time::sleep(Duration::from_millis(rng.random_range(50..400))).await;
            let target = if rng.random_ratio(1, 4) {
                Target::Om
            } else {
                Target::Datanode(rng.random_range(0..config.datanodes))
            };
            cluster.kill(target).await?;
            report.kills.push(target);
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..300))).await;
            cluster.restart(target).await?;
        }
        Ok::<(), CrashTestError>(())
    }
    .await;
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        let _ = w.await;
    }
    killed?;
    report.ops_ok = ok.load(Ordering::SeqCst);
    report.failures = failed.lock().await.clone();
    report.ops_failed = report.failures.values().sum();
    let logged = cluster.datanode_recoveries()?;
    report.orphans_removed += logged.orphans_removed;
    report.tails_truncated += logged.tails_truncated;
    let model = model.lock().await;
    // Verify with a fresh client: nothing cached from the crashes.
    let verifier = connect(&cluster.om_address()).await?;
    report.keys_checked = verify(&verifier, &model, config.seed).await?;

    // Offline: each datanode's store reclaims what no PutBlock committed.
    cluster.kill_all().await?;
    for i in 0..cluster.datanode_count() {
        let Some(dir) = cluster.datanode_dir(i) else {
            continue;
        };
        let store = datanode::ContainerStore::open(dir).map_err(|e| CrashTestError::Store {
            dir: dir.display().to_string(),
            message: e.to_string(),
        })?;
        let r = store.recovery();
        if r.short_files > 0 {
            return Err(CrashTestError::Violation {
                seed: config.seed,
                message: format!(
                    "dn{i}: {} committed blocks have files shorter than committed",
                    r.short_files
                ),
            });
        }
        report.orphans_removed += r.orphans_removed;
        report.tails_truncated += r.tails_truncated;
    }
    cluster.restart(Target::Om).await?;
    for i in 0..cluster.datanode_count() {
        cluster.restart(Target::Datanode(i)).await?;
    }
    let verifier = connect(&cluster.om_address()).await?;
    verify(&verifier, &model, config.seed).await?;
    cluster.kill_all().await?;
    Ok(report)
}

async fn connect(om: &str) -> Result<Client, CrashTestError> {
    Client::connect(om, client_config())
        .await
        .map_err(|source| CrashTestError::Client {
            context: format!("connecting to the om at {om}"),
            source,
        })
}

async fn create_buckets(client: &Client) -> Result<(), CrashTestError> {
    let ec: ec_client::EcReplicationConfig =
        "rs-3-2-64k".parse().map_err(|e| CrashTestError::Client {
            context: "parsing rs-3-2-64k".into(),
            source: ClientError::Ec(e),
        })?;
    let options = [
        (ReplicationConfig::Ec(ec), 256 * 1024),
        (ReplicationConfig::Replicated { factor: 3 }, 1024 * 1024),
        (ReplicationConfig::Replicated { factor: 3 }, 512 * 1024),
        (ReplicationConfig::Ec(ec), 256 * 1024),
    ];
    for (name, (replication, block_size)) in BUCKETS.iter().zip(options) {
        let opts = BucketOptions {
            replication: Some(replication),
            block_size: Some(block_size),
            ..Default::default()
        };
        // The datanodes may still be registering: retry for a while.
        let mut attempt = 0;
        loop {
            match client.create_bucket(name, opts.clone()).await {
                Ok(_) => break,
                Err(e) if attempt >= 50 => {
                    return Err(CrashTestError::Client {
                        context: format!("creating bucket {name}"),
                        source: e,
                    });
                }
                Err(_) => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }
    Ok(())
}

/// One writer task: its own keys, one operation at a time.
struct WriterCtx {
    client: Client,
    model: Arc<Mutex<Model>>,
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<Mutex<BTreeMap<String, u64>>>,
    /// The S3 handlers over the same client.
    gateway: s3_gateway::Gateway,
    writer: usize,
    rng: SmallRng,
}

/// Sizes around the layout boundaries of the buckets (64 KiB cells, 192
/// KiB stripes, 768 KiB EC groups, 256 KiB chunks, 1 MiB blocks).
fn size(rng: &mut SmallRng) -> u64 {
    const EDGES: [u64; 8] = [
        0,
        64 * 1024,
        192 * 1024,
        256 * 1024,
        768 * 1024,
        1024 * 1024,
        1536 * 1024,
        2048 * 1024,
    ];
    let edge = EDGES[rng.random_range(0..EDGES.len())];
    let jitter: i64 = rng.random_range(-3..=3);
    edge.saturating_add_signed(jitter)
}

impl WriterCtx {
    async fn run(mut self) {
        let mut op = 0u64;
        while !self.stop.load(Ordering::SeqCst) {
            op += 1;
            let bucket = BUCKETS[self.rng.random_range(0..BUCKETS.len())];
            // Most writes overwrite one of a few keys; some write a key of
            // their own that nothing overwrites, so that its acknowledged
            // version must survive every later kill exactly.
            let key = if self.rng.random_ratio(1, 6) {
                format!("w{}-once{op}", self.writer)
            } else {
                format!(
                    "w{}-k{}",
                    self.writer,
                    self.rng.random_range(0..KEYS_PER_WRITER)
                )
            };
            let seed = (self.writer as u64) << 48 | op << 8;
            let len = size(&mut self.rng);
            let v = vec![(seed, len)];
            let (version, outcome) = match bucket {
                "mp" => self.multipart(&key, seed).await,
                "s3" if self.rng.random_bool(0.5) => {
                    let r = s3::put(&self.gateway, bucket, &key, &content(&v)).await;
                    (Some(v), r)
                }
                "s3" => {
                    let v = vec![(seed, len.min(700 * 1024))];
                    let (sent, r) = s3::multipart(&self.gateway, bucket, &key, &content(&v)).await;
                    (sent.then_some(v), r)
                }
                _ => {
                    let r = self.client.put_key(bucket, &key, None, &content(&v)).await;
                    (Some(v), r.map(|_| ()).map_err(|e| kind(&e)))
                }
            };
            let mut failure = None;
            let mut model = self.model.lock().await;
            let entry = model.entry((bucket.to_string(), key.clone())).or_default();
            match (version, outcome) {
                (Some(v), Ok(())) => {
                    entry.acked = Some(v);
                    self.ok.fetch_add(1, Ordering::SeqCst);
                }
                (Some(v), Err(e)) => {
                    entry.unknown.push(v);
                    failure = Some(e);
                }
                // Failed before anything could commit.
                (None, Err(e)) => failure = Some(e),
                (None, Ok(())) => {}
            }
            drop(model);
            if let Some(e) = failure {
                *self.failed.lock().await.entry(e).or_default() += 1;
                // Back off as a real client would, instead of spinning on
                // a process that is down.
                tokio::time::sleep(Duration::from_millis(self.rng.random_range(20..100))).await;
            }
        }
    }

    /// A multipart upload of 1–3 parts. Returns the version when the
    /// complete call was made (its outcome may be unknown), `None` when the
    /// upload failed before it.
    async fn multipart(&mut self, key: &str, seed: u64) -> (Option<Version>, Result<(), String>) {
        let up = match self
            .client
            .initiate_multipart_upload("mp", key, None, BTreeMap::new())
            .await
        {
            Ok(up) => up,
            Err(e) => return (None, Err(kind(&e))),
        };
        let parts = self.rng.random_range(1..=3u32);
        let mut version = Vec::new();
        let mut etags = Vec::new();
        for n in 1..=parts {
            let len = size(&mut self.rng).min(700 * 1024);
            let seg = (seed | u64::from(n), len);
            let r = async {
                let mut w = self.client.upload_part(&up, n).await?;
                w.write(&content(&vec![seg])).await?;
                w.close_part(&format!("etag-{n}")).await
            }
            .await;
            match r {
                Ok(p) => {
                    version.push(seg);
                    etags.push((n, p.etag));
                }
                Err(e) => {
                    let _ = self.client.abort_multipart_upload(&up).await;
                    return (None, Err(kind(&e)));
                }
            }
        }
        let r = self
            .client
            .complete_multipart_upload(&up, &etags, 0, BTreeMap::new())
            .await
            .map(|_| ())
            .map_err(|e| kind(&e));
        if r.is_err() {
            let _ = self.client.abort_multipart_upload(&up).await;
        }
        (Some(version), r)
    }
}

/// A client failure's kind, for the report: the failure behind a
/// writer's report ([`ClientError::root`]).
fn kind(e: &ClientError) -> String {
    match e.root() {
        ClientError::Om { code, message, .. } if *code == ec_client::OmErrorCode::Unspecified => {
            // The gRPC code is the message's first word.
            format!("om {}", message.split(':').next().unwrap_or_default())
        }
        ClientError::Om { code, .. } => format!("om {code}"),
        ClientError::OmTimeout { .. } => "om timeout".into(),
        ClientError::BlockStream(_) => "datanode".into(),
        ClientError::InsufficientLocations { .. } => "too few locations".into(),
        ClientError::WriteCancelled { .. } => "cancelled".into(),
        _ => "other".into(),
    }
}

/// Reads every key of `model` and checks it against what it may hold.
/// Returns how many keys were checked.
async fn verify(client: &Client, model: &Model, seed: u64) -> Result<usize, CrashTestError> {
    let violation = |message: String| CrashTestError::Violation { seed, message };
    for ((bucket, key), m) in model {
        let stored = match client.key_info(bucket, key).await {
            Ok(info) => {
                let r = client.open_key(bucket, key).await.map_err(|source| {
                    CrashTestError::Client {
                        context: format!("opening {bucket}/{key}"),
                        source,
                    }
                })?;
                let mut buf = vec![0u8; usize::try_from(info.length).unwrap_or(0)];
                r.read_exact_at(0, &mut buf)
                    .await
                    .map_err(|e| violation(format!("{bucket}/{key} does not read back: {e}")))?;
                Some(buf)
            }
            Err(ClientError::KeyNotFound { .. }) => None,
            Err(source) => {
                return Err(CrashTestError::Client {
                    context: format!("looking up {bucket}/{key}"),
                    source,
                });
            }
        };
        let mut allowed = m.acked.iter().chain(&m.unknown);
        match stored {
            None if m.acked.is_some() => {
                return Err(violation(format!(
                    "{bucket}/{key}: acknowledged, but absent after the crashes"
                )));
            }
            Some(bytes) if !allowed.any(|v| content(v) == bytes) => {
                return Err(violation(format!(
                    "{bucket}/{key}: holds {} bytes matching no version written \
                     (acknowledged: {:?}, unknown outcome: {:?})",
                    bytes.len(),
                    m.acked,
                    m.unknown
                )));
            }
            None | Some(_) => {}
        }
    }
    Ok(model.len())
}
