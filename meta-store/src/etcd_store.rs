//! [`EtcdStore`]: the metadata store on an etcd cluster (etcd's v3 API
//! through the `etcd-client` crate).
//!
//! Every key lives under the store's namespace (a key prefix, so that
//! several clusters or tests can share one etcd): key `K` is etcd key
//! `NAMESPACE k/K`, election `E` lives under `NAMESPACE e/E`. The prefix is
//! added on the way in and removed on the way out. Reads are linearizable (etcd's
//! default, not `serializable`), so a read sees every commit that returned
//! before it started, on whichever member answers.

use std::time::Duration;

use etcd_client::{Client, Compare as EtcdCompare, CompareOp, GetOptions, Txn as EtcdTxn, TxnOp};

use crate::etcd_config::{EtcdConfig, connect_client};
use crate::{Compare, Entry, Op, Outcome, Page, StoreError, Txn, prefix_end};

/// Longest namespace, bytes: the namespace and `k/` are added to every
/// key, and [`ENTRY_OVERHEAD_BYTES`](crate::ENTRY_OVERHEAD_BYTES) covers them
/// with etcd's own framing of a put (about 40 bytes).
pub const MAX_NAMESPACE_BYTES: usize = 16;

/// The metadata store on etcd. Cheap to clone: clones share the channels.
///
/// The client spreads calls over the members at random and does not skip a
/// member that is down. A read that fails in transport, or gets no answer
/// within a third of the call deadline, is sent again (on another pick)
/// until the deadline has passed; so is a commit whose connection was
/// refused (it was never sent). A commit that failed after it may have been
/// sent is [`StoreError::CommitOutcomeUnknown`]: it may have been applied,
/// and only the caller can tell by reading.
#[derive(Clone)]
pub struct EtcdStore {
    /// Key-value calls: each bounded by the call deadline.
    client: std::sync::Arc<Client>,
    /// Election calls: a campaign waits as long as another candidate leads,
    /// so these channels have no request deadline (a lost lease ends the wait).
    elections: std::sync::Arc<Client>,
    namespace: Vec<u8>,
    timeout: Duration,
    /// How it connected, for calls that go to each member in turn
    /// (defragmentation: see [`crate::space`]).
    pub(crate) config: std::sync::Arc<EtcdConfig>,
    /// Renewals of the KV client's auth token, one at a time: calls that
    /// found the token expired together renew it once.
    renewal: std::sync::Arc<TokenRenewal>,
    /// When set ([`MetaStore::fenced`](crate::MetaStore::fenced)), every
    /// commit that writes also requires this leadership to hold.
    pub(crate) fence: Option<crate::Fence>,
}

/// The KV client's token renewals: a lock that lets one run at a time, and
/// how many have run (a call that saw the token before the last renewal
/// does not renew again).
#[derive(Debug, Default)]
struct TokenRenewal {
    lock: tokio::sync::Mutex<()>,
    done: std::sync::atomic::AtomicU64,
}

/// Largest answer a range read decodes, bytes (64 MiB): a page of `limit`
/// entries of up to 1.5 MiB each past it fails with [`StoreError::Etcd`];
/// callers page large values with small limits.
pub const MAX_PAGE_BYTES: usize = 64 * 1024 * 1024;

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("namespace", &String::from_utf8_lossy(&self.namespace))
            .finish_non_exhaustive()
    }
}

/// Pause between tries of a call that failed in transport.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Whether `e` says the call never reached a member: no connection could
/// be made (refused, timed out, a failed TLS handshake). Any call, commits
/// included, is safe to send again then. Other I/O errors may come from a
/// connection the call already went out on, so they are not counted here.
pub(crate) fn not_sent(e: &etcd_client::Error) -> bool {
    // etcd_client::Error does not chain its sources: start from the status
    // (or transport error) it wraps.
    let source: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(t) => Some(t),
        _ => None,
    };
    source.is_some_and(proto_crate::transport::never_sent)
}

/// Whether `e` is a failure of the transport or of a member's availability
/// (a closed connection, a member without a leader, the call deadline: a
/// proposal forwarded to a leader that just died waits until then), after
/// which a read can be sent again and a commit's outcome is unknown.
pub(crate) fn transient(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            use std::error::Error as _;
            match s.code() {
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => true,
                // tonic reports a connection that broke mid-call as Unknown,
                // and its own call deadline as Cancelled, with the transport
                // error as the source (a member's answer has none).
                tonic::Code::Unknown | tonic::Code::Cancelled => s.source().is_some(),
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether etcd refused the call's auth token as invalid (expired, or
/// issued by a member that has since restarted). etcd checks the token
/// before it proposes a write, so the call was not applied. The KV service
/// answers `UNAUTHENTICATED`; the election service, which relays through
/// etcd's own client, `UNKNOWN` with the same message.
pub(crate) fn auth_expired(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s)
        if matches!(s.code(), tonic::Code::Unauthenticated | tonic::Code::Unknown)
            && s.message().contains("invalid auth token"))
}

/// Which failures a call is sent again after.
#[derive(Clone, Copy)]
enum Retry {
    /// Reads: any transient failure.
    Transient,
    /// Commits: only a failure to connect.
    NotSent,
}

impl EtcdStore {
    /// Connects to the cluster `config` names.
    ///
    /// # Errors
    /// [`StoreError::InvalidNamespace`] for an empty namespace or one longer
    /// than [`MAX_NAMESPACE_BYTES`]; [`StoreError::InvalidEndpoint`] for no
    /// endpoint, or one that is not a URL of the scheme TLS calls for. With
    /// a user it authenticates here: [`StoreError::Timeout`] if no member
    /// answers in time, [`StoreError::Etcd`] if etcd refuses. Without one,
    /// no member is contacted until the first call.
    pub async fn connect(config: &EtcdConfig) -> Result<Self, StoreError> {
        if config.namespace.is_empty() || config.namespace.len() > MAX_NAMESPACE_BYTES {
            return Err(StoreError::InvalidNamespace {
                len: config.namespace.len(),
            });
        }
        let elections = connect_client(config, &config.endpoints, None).await?;
        let client = connect_client(config, &config.endpoints, Some(config.timeout)).await?;
        Ok(Self {
            client: std::sync::Arc::new(client),
            elections: std::sync::Arc::new(elections),
            namespace: config.namespace.clone(),
            timeout: config.timeout,
            config: std::sync::Arc::new(config.clone()),
            renewal: std::sync::Arc::default(),
            fence: None,
        })
    }

    /// How many times the KV client's auth token has been renewed since
    /// connecting (etcd refused it as expired, or a restarted member forgot
    /// it). Calls that find it expired at once renew it once between them:
    /// etcd checks a password with bcrypt, so a renewal per call would load
    /// every member after each idle spell.
    #[must_use]
    pub fn token_renewals(&self) -> u64 {
        self.renewal.done.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Renews the KV client's token, unless another call renewed it after
    /// `seen` (the count read before this call's failed attempt).
    async fn renew_token(&self, seen: u64) -> Result<(), StoreError> {
        let _one = self.renewal.lock.lock().await;
        if self.token_renewals() != seen {
            return Ok(());
        }
        self.client.refresh_token().await?;
        self.renewal
            .done
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// Runs `call` on a fresh KV client, again while it fails as `retry`
    /// allows and the deadline has not passed. A read's attempt gets a third
    /// of the deadline, so one hung member leaves time to try another.
    async fn retrying<T, F, Fut>(&self, retry: Retry, call: F) -> Result<T, StoreError>
    where
        F: Fn(etcd_client::KvClient) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let started = std::time::Instant::now();
        let mut refreshed = false;
        loop {
            let seen = self.token_renewals();
            let kv = self
                .client
                .kv_client()
                .max_decoding_message_size(MAX_PAGE_BYTES);
            let attempt = match retry {
                Retry::Transient => match tokio::time::timeout(self.timeout / 3, call(kv)).await {
                    Ok(r) => r,
                    Err(_) if started.elapsed() < self.timeout => {
                        tracing::debug!("etcd read unanswered; sending it again");
                        continue;
                    }
                    Err(_) => return Err(StoreError::Timeout(self.timeout)),
                },
                Retry::NotSent => call(kv).await,
            };
            let in_time = started.elapsed() < self.timeout;
            match attempt {
                Ok(v) => return Ok(v),
                // etcd refused the token before proposing anything (it
                // expired after `--auth-token-ttl` idle, or the member
                // restarted): authenticate again, once per call.
                Err(e) if auth_expired(&e) && !refreshed => {
                    refreshed = true;
                    self.renew_token(seen).await?;
                    continue;
                }
                Err(e) if not_sent(&e) && in_time => {}
                // Never sent, so never applied, even for a commit.
                Err(e) if not_sent(&e) => return Err(StoreError::Etcd(e)),
                Err(e) if transient(&e) => match retry {
                    Retry::Transient if in_time => {}
                    Retry::Transient => return Err(StoreError::Etcd(e)),
                    Retry::NotSent => return Err(StoreError::CommitOutcomeUnknown(e)),
                },
                Err(e) => return Err(crate::space::refusal(e)),
            }
            tracing::debug!("etcd call failed in transport; sending it again");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    /// A KV client (for compaction; no retries: see [`crate::space`]).
    pub(crate) fn kv_client(&self) -> etcd_client::KvClient {
        self.client.kv_client()
    }

    /// A maintenance client (alarms) over the balanced channels.
    pub(crate) fn maintenance_client(&self) -> etcd_client::MaintenanceClient {
        self.client.maintenance_client()
    }

    /// The deadline of one call.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// A client for elections and leases (no request deadline; cheap: it
    /// shares the channels and the auth token).
    pub(crate) fn election_client(&self) -> Client {
        Client::clone(&self.elections)
    }

    /// Whether the store authenticates as an etcd user.
    pub(crate) fn has_user(&self) -> bool {
        self.config.user.is_some()
    }

    /// The etcd key prefix of election `name`: `NAMESPACE e/NAME`, apart
    /// from the store's keys (`NAMESPACE k/KEY`).
    pub(crate) fn election_name(&self, name: &str) -> Vec<u8> {
        let mut k = self.namespace.clone();
        k.extend_from_slice(b"e/");
        k.extend_from_slice(name.as_bytes());
        k
    }

    /// Where the store's keys live in etcd: `NAMESPACE k/`.
    fn key_prefix(&self) -> Vec<u8> {
        let mut k = self.namespace.clone();
        k.extend_from_slice(b"k/");
        k
    }

    fn full(&self, key: &[u8]) -> Vec<u8> {
        let mut k = self.key_prefix();
        k.extend_from_slice(key);
        k
    }

    /// The etcd key that ends the range ending at `end` (`None`: the end of
    /// the keyspace, which is the end of the store's namespace).
    fn range_end(&self, end: Option<&[u8]>) -> Vec<u8> {
        match end {
            Some(e) => self.full(e),
            None => prefix_end(&self.key_prefix()).unwrap_or_else(|| vec![0]),
        }
    }

    fn entry(&self, kv: &etcd_client::KeyValue) -> Result<Entry, StoreError> {
        let key = kv
            .key()
            .strip_prefix(self.key_prefix().as_slice())
            .ok_or_else(|| {
                StoreError::Protocol(format!(
                    "a key outside the namespace: {:?}",
                    String::from_utf8_lossy(kv.key())
                ))
            })?;
        Ok(Entry {
            key: key.to_vec(),
            value: kv.value().to_vec(),
            create_revision: revision(kv.create_revision())?,
            mod_revision: revision(kv.mod_revision())?,
        })
    }

    pub(crate) async fn get(&self, key: &[u8]) -> Result<Option<Entry>, StoreError> {
        self.get_at(key, None).await
    }

    /// The entry at `key` as of `revision` (`None`: now).
    pub(crate) async fn get_at(
        &self,
        key: &[u8],
        revision: Option<u64>,
    ) -> Result<Option<Entry>, StoreError> {
        let key = self.full(key);
        let options = at(GetOptions::new(), revision)?;
        let resp = self
            .retrying(Retry::Transient, |mut kv| {
                let (key, options) = (key.clone(), options.clone());
                async move { kv.get(key, Some(options)).await }
            })
            .await
            .map_err(|e| compacted(e, revision))?;
        resp.kvs().first().map(|kv| self.entry(kv)).transpose()
    }

    pub(crate) async fn range(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
    ) -> Result<Page, StoreError> {
        self.range_at(start, end, limit, None).await
    }

    /// [`range`](Self::range) as of `revision` (`None`: now).
    pub(crate) async fn range_at(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        limit: usize,
        revision: Option<u64>,
    ) -> Result<Page, StoreError> {
        let end = self.range_end(end);
        let start = self.full(start);
        if end <= start {
            // An empty or inverted range holds nothing (etcd's answer too;
            // this saves the call).
            return Ok(Page {
                entries: Vec::new(),
                more: false,
                revision: match revision {
                    Some(r) => r,
                    None => self.revision().await?,
                },
            });
        }
        let options = at(
            GetOptions::new()
                .with_range(end)
                .with_limit(i64::try_from(limit).unwrap_or(i64::MAX)),
            revision,
        )?;
        let resp = self
            .retrying(Retry::Transient, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await
            .map_err(|e| compacted(e, revision))?;
        let entries = resp
            .kvs()
            .iter()
            .map(|kv| self.entry(kv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Page {
            entries,
            more: resp.more(),
            revision: match revision {
                Some(r) => r,
                None => header_revision(resp.header())?,
            },
        })
    }

    /// How many keys `start <= key < end` holds now (etcd's `count_only` range: no values
    /// sent).
    pub(crate) async fn count(&self, start: &[u8], end: Option<&[u8]>) -> Result<u64, StoreError> {
        let end = self.range_end(end);
        let start = self.full(start);
        if end <= start {
            return Ok(0);
        }
        let options = GetOptions::new().with_range(end).with_count_only();
        let resp = self
            .retrying(Retry::Transient, |mut kv| {
                let (start, options) = (start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await?;
        u64::try_from(resp.count()).map_err(|_| {
            StoreError::Protocol(format!("etcd answered a negative count {}", resp.count()))
        })
    }

    pub(crate) async fn commit(&self, txn: Txn) -> Result<Outcome, StoreError> {
        let compares: Vec<EtcdCompare> = txn
            .compares()
            .iter()
            .filter_map(|c| match c {
                Compare::Absent(k) => Some(EtcdCompare::create_revision(
                    self.full(k),
                    CompareOp::Equal,
                    0,
                )),
                Compare::ModRevision(k, r) => Some(EtcdCompare::mod_revision(
                    self.full(k),
                    CompareOp::Equal,
                    i64::try_from(*r).unwrap_or(i64::MAX),
                )),
                Compare::Leading(f) => Some(EtcdCompare::create_revision(
                    f.key().to_vec(),
                    CompareOp::Equal,
                    i64::try_from(f.create_revision()).unwrap_or(i64::MAX),
                )),
                Compare::RangeUnchangedSince {
                    start,
                    end,
                    revision,
                } => {
                    let start = self.full(start);
                    let end = self.range_end(end.as_deref());
                    // An empty or inverted range holds no key, so the
                    // compare holds: nothing to send.
                    (end > start).then(|| {
                        EtcdCompare::mod_revision(
                            start,
                            CompareOp::Less,
                            i64::try_from(revision.saturating_add(1)).unwrap_or(i64::MAX),
                        )
                        .with_range(end)
                    })
                }
            })
            .collect();
        let mut ops: Vec<TxnOp> = txn
            .ops()
            .iter()
            .map(|o| match o {
                Op::Put(k, v) => TxnOp::put(self.full(k), v.clone(), None),
                Op::Delete(k) => TxnOp::delete(self.full(k), None),
            })
            .collect();
        if ops.is_empty() {
            // etcd answers a Txn without ops from whichever member got it,
            // however far behind (it counts as a serializable read); one
            // linearizable read in it makes the member catch up first, so
            // a check of reads sees every commit before it.
            ops.push(TxnOp::get(
                self.key_prefix(),
                Some(GetOptions::new().with_count_only()),
            ));
        }
        let txn = EtcdTxn::new().when(compares).and_then(ops);
        let resp = self
            .retrying(Retry::NotSent, |mut kv| {
                let txn = txn.clone();
                async move { kv.txn(txn).await }
            })
            .await?;
        if resp.succeeded() {
            Ok(Outcome::Committed {
                revision: header_revision(resp.header())?,
            })
        } else {
            Ok(Outcome::Conflict)
        }
    }

    pub(crate) async fn revision(&self) -> Result<u64, StoreError> {
        // A one-key read of the namespace answers with the cluster's revision.
        let options = GetOptions::new().with_count_only();
        let resp = self
            .retrying(Retry::Transient, |mut kv| {
                let (key, options) = (self.namespace.clone(), options.clone());
                async move { kv.get(key, Some(options)).await }
            })
            .await?;
        header_revision(resp.header())
    }
}

/// `options` reading as of `revision` (`None`: now).
fn at(options: GetOptions, revision: Option<u64>) -> Result<GetOptions, StoreError> {
    Ok(match revision {
        Some(r) => options.with_revision(
            i64::try_from(r).map_err(|_| StoreError::Protocol(format!("revision {r}")))?,
        ),
        None => options,
    })
}

/// A read at `revision` refused because etcd compacted it: [`StoreError::Compacted`].
fn compacted(e: StoreError, revision: Option<u64>) -> StoreError {
    match (&e, revision) {
        (StoreError::Etcd(etcd_client::Error::GRpcStatus(s)), Some(revision))
            if s.message().contains(crate::space::ALREADY_COMPACTED) =>
        {
            StoreError::Compacted { revision }
        }
        _ => e,
    }
}

fn revision(r: i64) -> Result<u64, StoreError> {
    u64::try_from(r).map_err(|_| StoreError::Protocol(format!("a negative revision {r}")))
}

fn header_revision(h: Option<&etcd_client::ResponseHeader>) -> Result<u64, StoreError> {
    let h = h.ok_or_else(|| StoreError::Protocol("a response without a header".into()))?;
    revision(h.revision())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_connection_is_not_sent_and_other_failures_may_have_been() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = etcd_client::Error::GRpcStatus(tonic::Status::from_error(Box::new(refused)));
        assert!(not_sent(&e));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let e = etcd_client::Error::GRpcStatus(tonic::Status::from_error(Box::new(reset)));
        assert!(!not_sent(&e));
        // A connection broken mid-call (tonic: Unknown with a source) is transient.
        assert!(transient(&e));
    }

    #[test]
    fn a_members_own_refusal_is_not_transient() {
        let answer = |code| etcd_client::Error::GRpcStatus(tonic::Status::new(code, "x"));
        assert!(transient(&answer(tonic::Code::Unavailable)));
        assert!(transient(&answer(tonic::Code::DeadlineExceeded)));
        // Without a local source these are the member's answers.
        assert!(!transient(&answer(tonic::Code::Unknown)));
        assert!(!transient(&answer(tonic::Code::Cancelled)));
        assert!(!transient(&answer(tonic::Code::InvalidArgument)));
        assert!(!not_sent(&answer(tonic::Code::Unavailable)));
    }
}
