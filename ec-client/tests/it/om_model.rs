//! Model-based test of the om's metadata operations under concurrency
//! (issue 11, part 2): proptest generates steps of 1–3 operations (create
//! and delete bucket, put key, open and abort a key, delete key, multipart
//! initiate, upload part, complete, abort), each step's operations run at
//! once from separate tasks against a real om over gRPC (reads of a key's
//! length and an upload's parts among them), and then
//! - some serial order of the step's operations, applied to a `BTreeMap`
//!   model, gives every result the om gave (the value, or the error's name),
//! - and the om's state afterwards (buckets, keys with their bytes, uploads
//!   with their parts) equals that order's model state.
//!
//! Names come from tiny sets (2 buckets, 2 keys, 2 upload slots, 2 part
//! numbers) so that operations collide often. `OM_MODEL_TRACE=1` prints
//! each step's operations and results.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use ec_client::{BucketOptions, Client, ClientError, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig};
use proptest::prelude::*;

const BUCKETS: [&str; 2] = ["ba", "bb"];
const KEYS: [&str; 2] = ["x", "y"];

/// Bytes of a key or part written with `tag`.
fn bytes_of(tag: u8) -> Vec<u8> {
    common::data(1000 + u64::from(tag) * 37, u64::from(tag))
}

/// ETag a part written with `tag` is committed with.
fn etag_of(tag: u8) -> String {
    format!("etag-{tag}")
}

#[derive(Debug, Clone)]
enum Op {
    CreateBucket(usize),
    DeleteBucket(usize),
    PutKey {
        bucket: usize,
        key: usize,
        tag: u8,
    },
    /// Opens a key, writes, and drops the writer: nothing may appear.
    AbandonKey {
        bucket: usize,
        key: usize,
        tag: u8,
    },
    DeleteKey {
        bucket: usize,
        key: usize,
    },
    Initiate {
        slot: usize,
        bucket: usize,
        key: usize,
    },
    UploadPart {
        slot: usize,
        part: u32,
        tag: u8,
    },
    /// Completes with these (part, tag) pairs: a pair whose tag is not the
    /// part's current one names a wrong ETag.
    Complete {
        slot: usize,
        parts: Vec<(u32, u8)>,
    },
    Abort {
        slot: usize,
    },
    /// Reads a key's length (isolation: never a half-done commit).
    Lookup {
        bucket: usize,
        key: usize,
    },
    /// Reads an upload's parts.
    ListParts {
        slot: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let b = 0..BUCKETS.len();
    let k = 0..KEYS.len();
    let tag = 0u8..3;
    prop_oneof![
        b.clone().prop_map(Op::CreateBucket),
        b.clone().prop_map(Op::DeleteBucket),
        (b.clone(), k.clone(), tag.clone()).prop_map(|(bucket, key, tag)| Op::PutKey {
            bucket,
            key,
            tag
        }),
        (b.clone(), k.clone(), tag.clone()).prop_map(|(bucket, key, tag)| Op::AbandonKey {
            bucket,
            key,
            tag
        }),
        (b.clone(), k.clone()).prop_map(|(bucket, key)| Op::DeleteKey { bucket, key }),
        (0..2usize, b, k).prop_map(|(slot, bucket, key)| Op::Initiate { slot, bucket, key }),
        (0..2usize, 1..=2u32, tag.clone()).prop_map(|(slot, part, tag)| Op::UploadPart {
            slot,
            part,
            tag
        }),
        // Mostly well-formed part lists; sometimes empty, repeated or
        // out of order ones.
        (0..2usize, prop::collection::vec((1..=2u32, tag), 0..=3))
            .prop_map(|(slot, parts)| Op::Complete { slot, parts }),
        (0..2usize).prop_map(|slot| Op::Abort { slot }),
        (0..BUCKETS.len(), 0..KEYS.len()).prop_map(|(bucket, key)| Op::Lookup { bucket, key }),
        (0..2usize).prop_map(|slot| Op::ListParts { slot }),
    ]
}

/// What an operation returned: a value the model can predict, or the name
/// of the om's error.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Ok,
    /// A key's bytes (complete returns the new key's length).
    Len(u64),
    /// An upload was initiated with this id.
    Upload(String),
    /// An upload's (part number, ETag) pairs.
    Parts(Vec<(u32, String)>),
    Err(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Upload {
    bucket: String,
    key: String,
    /// Part number -> (ETag, bytes).
    parts: BTreeMap<u32, (String, Vec<u8>)>,
}

/// The om's state as the model sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct State {
    buckets: BTreeSet<String>,
    keys: BTreeMap<(String, String), Vec<u8>>,
    uploads: BTreeMap<String, Upload>,
}

fn err(name: &str) -> Outcome {
    Outcome::Err(name.to_string())
}

impl State {
    /// Applies `op` (with upload ids resolved through `slots`) and returns
    /// what it must answer. An initiate takes the id the om gave (`given`).
    fn apply(&mut self, op: &Op, slots: &[Option<String>; 2], given: &Outcome) -> Outcome {
        match op {
            Op::CreateBucket(b) => {
                if self.buckets.insert(BUCKETS[*b].to_string()) {
                    Outcome::Ok
                } else {
                    err("BUCKET_ALREADY_EXISTS")
                }
            }
            Op::DeleteBucket(b) => {
                let name = BUCKETS[*b];
                if !self.buckets.contains(name) {
                    err("BUCKET_NOT_FOUND")
                } else if self.keys.keys().any(|(kb, _)| kb == name)
                    || self.uploads.values().any(|u| u.bucket == name)
                {
                    err("BUCKET_NOT_EMPTY")
                } else {
                    self.buckets.remove(name);
                    Outcome::Ok
                }
            }
            Op::PutKey { bucket, key, tag } => {
                let b = BUCKETS[*bucket];
                if !self.buckets.contains(b) {
                    return err("BUCKET_NOT_FOUND");
                }
                let data = bytes_of(*tag);
                let len = data.len() as u64;
                self.keys
                    .insert((b.to_string(), KEYS[*key].to_string()), data);
                Outcome::Len(len)
            }
            Op::AbandonKey { bucket, .. } => {
                if self.buckets.contains(BUCKETS[*bucket]) {
                    Outcome::Ok
                } else {
                    err("BUCKET_NOT_FOUND")
                }
            }
            Op::DeleteKey { bucket, key } => {
                let b = BUCKETS[*bucket];
                if !self.buckets.contains(b) {
                    return err("BUCKET_NOT_FOUND");
                }
                match self.keys.remove(&(b.to_string(), KEYS[*key].to_string())) {
                    Some(_) => Outcome::Ok,
                    None => err("KEY_NOT_FOUND"),
                }
            }
            Op::Initiate { bucket, key, .. } => {
                let b = BUCKETS[*bucket];
                if !self.buckets.contains(b) {
                    return err("BUCKET_NOT_FOUND");
                }
                let Outcome::Upload(id) = given else {
                    // The om refused what the model allows: no order explains it.
                    return err("INITIATE_SHOULD_HAVE_SUCCEEDED");
                };
                self.uploads.insert(
                    id.clone(),
                    Upload {
                        bucket: b.to_string(),
                        key: KEYS[*key].to_string(),
                        parts: BTreeMap::new(),
                    },
                );
                given.clone()
            }
            Op::UploadPart { slot, part, tag } => {
                let Some(u) = slots[*slot]
                    .as_ref()
                    .and_then(|id| self.uploads.get_mut(id))
                else {
                    return err("NO_SUCH_UPLOAD");
                };
                let data = bytes_of(*tag);
                let len = data.len() as u64;
                u.parts.insert(*part, (etag_of(*tag), data));
                Outcome::Len(len)
            }
            Op::Complete { slot, parts } => {
                let Some(id) = slots[*slot]
                    .as_ref()
                    .filter(|id| self.uploads.contains_key(*id))
                else {
                    return err("NO_SUCH_UPLOAD");
                };
                let u = &self.uploads[id];
                if parts.is_empty() {
                    return err("INVALID_PART");
                }
                if parts.windows(2).any(|w| w[1].0 <= w[0].0) {
                    return err("INVALID_PART_ORDER");
                }
                let mut data = Vec::new();
                for (n, tag) in parts {
                    match u.parts.get(n) {
                        Some((etag, bytes)) if *etag == etag_of(*tag) => data.extend(bytes),
                        _ => return err("INVALID_PART"),
                    }
                }
                if !self.buckets.contains(&u.bucket) {
                    return err("BUCKET_NOT_FOUND");
                }
                let len = data.len() as u64;
                let (bucket, key) = (u.bucket.clone(), u.key.clone());
                self.uploads.remove(id);
                self.keys.insert((bucket, key), data);
                Outcome::Len(len)
            }
            Op::Abort { slot } => {
                match slots[*slot].as_ref().and_then(|id| self.uploads.remove(id)) {
                    Some(_) => Outcome::Ok,
                    None => err("NO_SUCH_UPLOAD"),
                }
            }
            Op::Lookup { bucket, key } => {
                let b = BUCKETS[*bucket];
                if !self.buckets.contains(b) {
                    return err("BUCKET_NOT_FOUND");
                }
                match self.keys.get(&(b.to_string(), KEYS[*key].to_string())) {
                    Some(data) => Outcome::Len(data.len() as u64),
                    None => err("KEY_NOT_FOUND"),
                }
            }
            Op::ListParts { slot } => {
                match slots[*slot].as_ref().and_then(|id| self.uploads.get(id)) {
                    Some(u) => Outcome::Parts(
                        u.parts
                            .iter()
                            .map(|(n, (etag, _))| (*n, etag.clone()))
                            .collect(),
                    ),
                    None => err("NO_SUCH_UPLOAD"),
                }
            }
        }
    }
}

fn outcome_of<T>(r: Result<T, ClientError>, ok: impl FnOnce(T) -> Outcome) -> Outcome {
    match r {
        Ok(v) => ok(v),
        Err(ClientError::Om { code, .. }) => Outcome::Err(code.name().to_string()),
        Err(ClientError::BucketNotFound(_)) => err("BUCKET_NOT_FOUND"),
        Err(ClientError::KeyNotFound { .. }) => err("KEY_NOT_FOUND"),
        Err(e) => Outcome::Err(format!("unexpected: {e}")),
    }
}

/// Runs `op` against the om.
async fn run_op(client: &Client, op: &Op, slots: &[Option<String>; 2]) -> Outcome {
    let id = |slot: usize| {
        slots[slot]
            .clone()
            .unwrap_or_else(|| "no-such-upload".into())
    };
    match op {
        Op::CreateBucket(b) => outcome_of(
            client
                .create_bucket(
                    BUCKETS[*b],
                    BucketOptions {
                        replication: Some(ReplicationConfig::Replicated { factor: 3 }),
                        block_size: Some(1 << 20),
                        ..Default::default()
                    },
                )
                .await,
            |_| Outcome::Ok,
        ),
        Op::DeleteBucket(b) => {
            outcome_of(client.delete_bucket(BUCKETS[*b]).await, |()| Outcome::Ok)
        }
        Op::PutKey { bucket, key, tag } => outcome_of(
            client
                .put_key(BUCKETS[*bucket], KEYS[*key], None, &bytes_of(*tag))
                .await,
            |k| Outcome::Len(k.length),
        ),
        Op::AbandonKey { bucket, key, tag } => {
            let r = async {
                let mut w = client
                    .create_key(BUCKETS[*bucket], KEYS[*key], None)
                    .await?;
                w.write(&bytes_of(*tag)).await?;
                Ok(())
            }
            .await;
            outcome_of(r, |()| Outcome::Ok)
        }
        Op::DeleteKey { bucket, key } => outcome_of(
            client.delete_key(BUCKETS[*bucket], KEYS[*key]).await,
            |()| Outcome::Ok,
        ),
        Op::Initiate { bucket, key, .. } => outcome_of(
            client
                .initiate_multipart_upload(BUCKETS[*bucket], KEYS[*key], None, BTreeMap::new())
                .await,
            Outcome::Upload,
        ),
        Op::UploadPart { slot, part, tag } => {
            let r = async {
                let mut w = client.upload_part(&id(*slot), *part).await?;
                w.write(&bytes_of(*tag)).await?;
                w.close_part(&etag_of(*tag)).await
            }
            .await;
            outcome_of(r, |p| Outcome::Len(p.size))
        }
        Op::Complete { slot, parts } => {
            let list: Vec<(u32, String)> = parts.iter().map(|(n, t)| (*n, etag_of(*t))).collect();
            outcome_of(
                client
                    .complete_multipart_upload(&id(*slot), &list, 0, BTreeMap::new())
                    .await,
                |k| Outcome::Len(k.length),
            )
        }
        Op::Abort { slot } => outcome_of(client.abort_multipart_upload(&id(*slot)).await, |()| {
            Outcome::Ok
        }),
        Op::Lookup { bucket, key } => {
            outcome_of(client.key_info(BUCKETS[*bucket], KEYS[*key]).await, |k| {
                Outcome::Len(k.length)
            })
        }
        Op::ListParts { slot } => outcome_of(client.list_parts(&id(*slot)).await, |u| {
            Outcome::Parts(
                u.parts
                    .into_iter()
                    .map(|p| (p.part_number, p.etag))
                    .collect(),
            )
        }),
    }
}

/// Reads the om's whole state through the client.
async fn observe(client: &Client) -> State {
    let mut s = State::default();
    for b in client.list_buckets().await.expect("list buckets") {
        for k in client
            .list_keys(&b.name, "", "", 0)
            .await
            .expect("list keys")
        {
            let data = common::read_all(client, &b.name, &k.name).await;
            s.keys.insert((b.name.clone(), k.name), data);
        }
        for u in client
            .list_multipart_uploads(&b.name, "")
            .await
            .expect("list uploads")
        {
            let listed = client.list_parts(&u.upload_id).await.expect("list parts");
            let mut parts = BTreeMap::new();
            for p in listed.parts {
                // A part's bytes are identified by its size and ETag (the
                // tag is in both).
                let tag = (0u8..3)
                    .find(|t| etag_of(*t) == p.etag)
                    .expect("known etag");
                assert_eq!(
                    p.size,
                    bytes_of(tag).len() as u64,
                    "part size matches its ETag"
                );
                parts.insert(p.part_number, (p.etag, bytes_of(tag)));
            }
            s.uploads.insert(
                u.upload_id.clone(),
                Upload {
                    bucket: u.bucket,
                    key: u.key,
                    parts,
                },
            );
        }
        s.buckets.insert(b.name);
    }
    s
}

/// Every order of `0..n`.
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for p in permutations(n - 1) {
        for i in 0..=p.len() {
            let mut q = p.clone();
            q.insert(i, n - 1);
            out.push(q);
        }
    }
    out
}

/// The upload slot an operation works on, if any.
fn slot_of(op: &Op) -> Option<usize> {
    match op {
        Op::UploadPart { slot, .. } | Op::Complete { slot, .. } | Op::Abort { slot } => Some(*slot),
        _ => None,
    }
}

/// Whether `step[j]` was refused with CONTENTION while another operation of
/// its step worked on the same upload: the om's `Busy` (a completion or
/// part commit that found the upload taken over by another call) writes
/// nothing and tells the caller to retry, so it is no step of any order.
fn refused_as_busy(step: &[Op], j: usize, result: &Outcome) -> bool {
    *result == err("CONTENTION")
        && matches!(step[j], Op::UploadPart { .. } | Op::Complete { .. })
        && step
            .iter()
            .enumerate()
            .any(|(i, op)| i != j && slot_of(op).is_some() && slot_of(op) == slot_of(&step[j]))
}

/// Runs the steps on a fresh cluster; each step's operations at once.
async fn check(steps: Vec<Vec<Op>>) -> Result<(), String> {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .map_err(|e| e.to_string())?;
    // 512-byte chunks: every key and part, abandoned ones included,
    // allocates a block and writes to it.
    let config = common::test_config().with_replicated_chunk_size(512);
    let clients = [
        cluster
            .client_with(config.clone())
            .await
            .map_err(|e| e.to_string())?,
        cluster
            .client_with(config.clone())
            .await
            .map_err(|e| e.to_string())?,
        cluster
            .client_with(config)
            .await
            .map_err(|e| e.to_string())?,
    ];
    let mut model = State::default();
    let mut slots: [Option<String>; 2] = [None, None];
    for (i, step) in steps.iter().enumerate() {
        let results = futures::future::join_all(
            step.iter()
                .zip(clients.iter().cycle())
                .map(|(op, c)| run_op(c, op, &slots)),
        )
        .await;
        if std::env::var_os("OM_MODEL_TRACE").is_some() {
            eprintln!("{step:?} -> {results:?}");
        }
        let observed = observe(&clients[0]).await;
        let explained = permutations(step.len()).into_iter().find_map(|order| {
            let mut m = model.clone();
            let ok = order.iter().all(|&j| {
                refused_as_busy(step, j, &results[j])
                    || m.apply(&step[j], &slots, &results[j]) == results[j]
            });
            (ok && m == observed).then_some(m)
        });
        match explained {
            Some(m) => model = m,
            None => {
                cluster.shutdown().await;
                return Err(format!(
                    "step {i}: no serial order of {step:?} explains results {results:?} \
                     and state {observed:#?} from {model:#?}"
                ));
            }
        }
        for (op, r) in step.iter().zip(&results) {
            if let (Op::Initiate { slot, .. }, Outcome::Upload(id)) = (op, r) {
                slots[*slot] = Some(id.clone());
            }
        }
    }
    cluster.shutdown().await;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 24,
        max_shrink_iters: 40,
        ..ProptestConfig::default()
    })]

    #[test]
    fn concurrent_om_operations_match_a_serial_model(
        steps in prop::collection::vec(prop::collection::vec(op(), 1..=3), 4..32)
    ) {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        // Buckets exist from the first step often enough to reach the
        // interesting states.
        let mut all = vec![vec![Op::CreateBucket(0)]];
        all.extend(steps);
        rt.block_on(check(all)).map_err(TestCaseError::fail)?;
    }
}
