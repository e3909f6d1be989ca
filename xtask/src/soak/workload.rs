//! The soak's mixed workload and its model.
//!
//! Each worker owns its keys, so a per-worker model of what each key holds
//! is exact without coordination. A key's model is the set of values it may
//! hold: one after an acknowledged write or delete; after a failed one, the
//! old value or the new (a write whose acknowledgement was lost may still
//! have committed). A successful read must match one candidate — then the
//! set narrows to it — or it counts as wrong bytes. Values are (seed,
//! length) of `minicluster::pattern`, regenerated to verify, so the model
//! holds no data.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ec_client::{Client, ClientError};
use minicluster::pattern;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A key's content: `None` = absent, else (pattern seed, length).
type Value = Option<(u64, u64)>;

/// Counters the workers feed and the sampler reads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) ops: AtomicU64,
    pub(crate) errors: AtomicU64,
    /// Reads whose bytes matched no value the key may hold.
    pub(crate) wrong: AtomicU64,
    pub(crate) bytes_written: AtomicU64,
    pub(crate) bytes_read: AtomicU64,
}

/// Buckets of the soak.
pub(crate) const EC_BUCKET: &str = "soak-ec";
pub(crate) const REP_BUCKET: &str = "soak-rep";
pub(crate) const S3_BUCKET: &str = "soak-s3";

/// What one worker needs.
pub(crate) struct Worker {
    pub(crate) id: usize,
    pub(crate) client: Client,
    pub(crate) s3: Option<SocketAddr>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) max_size: u64,
    pub(crate) keys: usize,
    pub(crate) seed: u64,
}

struct Model {
    keys: HashMap<(&'static str, String), Vec<Value>>,
}

impl Model {
    fn candidates(&self, k: &(&'static str, String)) -> Vec<Value> {
        self.keys.get(k).cloned().unwrap_or_else(|| vec![None])
    }
    fn settle(&mut self, k: (&'static str, String), v: Value) {
        self.keys.insert(k, vec![v]);
    }
    fn maybe(&mut self, k: (&'static str, String), v: Value) {
        let e = self.keys.entry(k).or_insert_with(|| vec![None]);
        if !e.contains(&v) {
            e.push(v);
        }
    }
}

fn matches(v: Value, got: &[u8], offset: u64) -> bool {
    match v {
        None => false,
        Some((seed, len)) => {
            offset + got.len() as u64 <= len && pattern::bytes(seed, offset, got.len()) == got
        }
    }
}

impl Worker {
    /// Runs operations until `stop` is set.
    pub(crate) async fn run(self, stop: Arc<std::sync::atomic::AtomicBool>) {
        let mut rng = SmallRng::seed_from_u64(self.seed);
        let mut model = Model {
            keys: HashMap::new(),
        };
        let mut next_seed = self.seed.wrapping_mul(1_000_003);
        while !stop.load(Ordering::Relaxed) {
            let bucket: &'static str = match rng.random_range(0..10) {
                0..=3 => EC_BUCKET,
                4..=7 => REP_BUCKET,
                _ if self.s3.is_some() => S3_BUCKET,
                _ => EC_BUCKET,
            };
            let key = (
                bucket,
                format!("w{}-k{}", self.id, rng.random_range(0..self.keys)),
            );
            let op = rng.random_range(0..100);
            next_seed = next_seed.wrapping_add(1);
            let ok = match op {
                0..=29 => {
                    let len = rng.random_range(1..=self.max_size);
                    self.put(&mut model, key, next_seed, len).await
                }
                30..=54 => self.get(&mut model, key).await,
                55..=84 => self.pread(&mut model, key, &mut rng).await,
                _ => self.delete(&mut model, key).await,
            };
            self.counters.ops.fetch_add(1, Ordering::Relaxed);
            if !ok {
                self.counters.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn wrong(&self, what: &str, key: &(&str, String)) {
        tracing::error!(bucket = key.0, key = %key.1, "{what}: bytes match no value the key may hold");
        self.counters.wrong.fetch_add(1, Ordering::Relaxed);
    }

    async fn put(
        &self,
        model: &mut Model,
        key: (&'static str, String),
        seed: u64,
        len: u64,
    ) -> bool {
        let Ok(n) = usize::try_from(len) else {
            return false;
        };
        let data = pattern::bytes(seed, 0, n);
        let result = if key.0 == S3_BUCKET {
            match self.s3 {
                Some(addr) => {
                    crate::http::request(addr, "PUT", &format!("/{}/{}", key.0, key.1), &[], &data)
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if r.status == 200 {
                                Ok(())
                            } else {
                                Err(format!("status {}", r.status))
                            }
                        })
                }
                None => Err("no gateway".into()),
            }
        } else {
            self.client
                .put_key(key.0, &key.1, None, &data)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        match result {
            Ok(()) => {
                self.counters
                    .bytes_written
                    .fetch_add(len, Ordering::Relaxed);
                model.settle(key, Some((seed, len)));
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "put failed");
                model.maybe(key, Some((seed, len)));
                false
            }
        }
    }

    async fn delete(&self, model: &mut Model, key: (&'static str, String)) -> bool {
        let result = if key.0 == S3_BUCKET {
            match self.s3 {
                Some(addr) => {
                    crate::http::request(addr, "DELETE", &format!("/{}/{}", key.0, key.1), &[], &[])
                        .await
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if r.status == 204 {
                                Ok(())
                            } else {
                                Err(format!("status {}", r.status))
                            }
                        })
                }
                None => Err("no gateway".into()),
            }
        } else {
            match self.client.delete_key(key.0, &key.1).await {
                Ok(()) | Err(ClientError::KeyNotFound { .. }) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        };
        match result {
            Ok(()) => {
                model.settle(key, None);
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "delete failed");
                model.maybe(key, None);
                false
            }
        }
    }

    /// Reads the whole key and checks it against the model.
    async fn get(&self, model: &mut Model, key: (&'static str, String)) -> bool {
        let got: Result<Option<Vec<u8>>, String> = if key.0 == S3_BUCKET {
            match self.s3 {
                Some(addr) => match crate::http::request(
                    addr,
                    "GET",
                    &format!("/{}/{}", key.0, key.1),
                    &[],
                    &[],
                )
                .await
                {
                    Ok(r) if r.status == 200 => Ok(Some(r.body)),
                    Ok(r) if r.status == 404 => Ok(None),
                    Ok(r) => Err(format!("status {}", r.status)),
                    Err(e) => Err(e.to_string()),
                },
                None => Err("no gateway".into()),
            }
        } else {
            match self.client.open_key(key.0, &key.1).await {
                Ok(s) => s
                    .read_range(0, s.len())
                    .await
                    .map(|b| Some(b.to_vec()))
                    .map_err(|e| e.to_string()),
                Err(ClientError::KeyNotFound { .. }) => Ok(None),
                Err(e) => Err(e.to_string()),
            }
        };
        let candidates = model.candidates(&key);
        match got {
            Ok(None) => {
                if candidates.contains(&None) {
                    model.settle(key, None);
                } else {
                    self.wrong("a key the model holds is missing", &key);
                }
                true
            }
            Ok(Some(bytes)) => {
                self.counters
                    .bytes_read
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                match candidates.iter().find(|v| {
                    v.is_some_and(|(_, len)| len == bytes.len() as u64) && matches(**v, &bytes, 0)
                }) {
                    Some(v) => model.settle(key, *v),
                    None => self.wrong("GET", &key),
                }
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "get failed");
                false
            }
        }
    }

    /// A positioned read of a random range of a key the model knows.
    async fn pread(
        &self,
        model: &mut Model,
        key: (&'static str, String),
        rng: &mut SmallRng,
    ) -> bool {
        if key.0 == S3_BUCKET {
            return self.get(model, key).await;
        }
        let candidates = model.candidates(&key);
        let [Some((_, len))] = candidates[..] else {
            // Absent or uncertain: a whole read settles it.
            return self.get(model, key).await;
        };
        let offset = rng.random_range(0..len);
        let n = rng.random_range(1..=(len - offset).min(256 * 1024));
        let got = match self.client.open_key(key.0, &key.1).await {
            Ok(s) => s.read_range(offset, n).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match got {
            Ok(bytes) => {
                self.counters
                    .bytes_read
                    .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if bytes.len() as u64 != n || !matches(candidates[0], &bytes, offset) {
                    self.wrong("pread", &key);
                }
                true
            }
            Err(e) => {
                tracing::debug!(error = %e, "pread failed");
                false
            }
        }
    }
}
