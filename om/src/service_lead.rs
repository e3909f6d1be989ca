//! Several oms on one etcd metadata store (issue 18): every om serves every call, and one
//! at a time runs the background services.
//!
//! Client and datanode calls need no leader: every om operation is one guarded transaction
//! on the store (`tables.rs`), and an open session is rows of it (`session_rows.rs`), so two
//! oms racing on one key, session or upload commit one of them and refuse the other, as two
//! calls on one om do. Datanodes heartbeat every om they are given, so each om places new
//! block groups from liveness of its own.
//!
//! The background services (block deletion, the ReplicationManager with decommissioning,
//! open-key lease expiry, etcd history compaction) scan the whole store and send commands to
//! datanodes: one om runs them, the leader of [`OM_ELECTION`]. Every om campaigns
//! ([`lead_services`]); the winner starts them, and when it stops (resigning, so another om
//! takes over at once) or dies (another takes over once its lease runs out, at most the
//! lease later) they move. An om whose lease renewal fails stops its services at two thirds
//! of the lease, before any other om can win the election at the lease's end, and
//! campaigns again; it serves calls throughout. The services' writes are not fenced by the
//! lead (`transact_fenced`): they run on the om's own store handle, shared with the calls
//! it serves. Each service's writes are guarded
//! transactions, so even two passes at once (an om paused past its lease) stage nothing
//! twice and lose nothing: at worst a deletion or a repair is sent twice, which datanodes
//! take as done. Ozone runs the same split: OM and SCM HA serve from one Ratis leader each,
//! and SCM's background services run on the leader only.
//!
//! Calls that read the services' memory (the ReplicationManager's status) are answered by
//! the leader only: another om answers [`OmErrorCode::NotLeader`] naming it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use meta_store::MetaStore;
use proto_crate::OmErrorCode;
use tonic::Status;

use crate::OzoneManager;
use crate::server::LeaderServices;

/// The election every om on one metadata store campaigns in; its leader (the candidate
/// value is the om's `HOST:PORT`) runs the background services.
pub const OM_ELECTION: &str = "om-services";

/// How long an answer may wait for the store to name the leader; past it the answer names
/// none. A name found is reused for as long.
const LEADER_LOOKUP: Duration = Duration::from_secs(1);

/// Which om of a store runs the background services.
#[derive(Debug)]
pub(crate) enum ServiceLead {
    /// The store's only om (its own redb file): always this one.
    Sole,
    /// One of several oms on etcd: this one while it leads [`OM_ELECTION`].
    Elected {
        leading: tokio::sync::watch::Sender<bool>,
        leader: Box<LeaderName>,
    },
}

impl ServiceLead {
    /// An om on `store` shared with others: not leading until it wins.
    pub(crate) fn elected(store: MetaStore) -> Self {
        Self::Elected {
            leading: tokio::sync::watch::Sender::new(false),
            leader: Box::new(LeaderName::new(store)),
        }
    }

    /// Whether this om runs the services now, and its changes (an om alone on its store:
    /// always).
    pub(crate) fn watch(&self) -> tokio::sync::watch::Receiver<bool> {
        match self {
            Self::Sole => tokio::sync::watch::Sender::new(true).subscribe(),
            Self::Elected { leading, .. } => leading.subscribe(),
        }
    }

    fn set(&self, now: bool) {
        if let Self::Elected { leading, .. } = self {
            leading.send_replace(now);
        }
    }

    /// Ok when this om runs the services; otherwise the NOT_LEADER answer for a call that
    /// only the om running them can answer (`what`), naming the leader when the store does.
    pub(crate) async fn require(&self, what: &str) -> Result<(), Status> {
        match self {
            Self::Sole => Ok(()),
            Self::Elected { leading, leader } => {
                if *leading.borrow() {
                    return Ok(());
                }
                let msg = match leader.get().await {
                    Some(l) => format!(
                        "this om does not run the background services; {what} is answered by \
                         the om at {l}"
                    ),
                    None => format!(
                        "no om runs the background services now ({what}); one takes them over \
                         once the last one's lease runs out"
                    ),
                };
                Err(OmErrorCode::NotLeader.status(msg))
            }
        }
    }
}

/// When the leader was looked up, and the name found (if any).
type Lookup = (Instant, Option<String>);

/// The leader's address as the store last named it, looked up at most once per
/// [`LEADER_LOOKUP`], one lookup at a time (calls that arrive during one wait for it).
#[derive(Debug)]
pub(crate) struct LeaderName {
    store: MetaStore,
    last: tokio::sync::Mutex<Option<Lookup>>,
}

impl LeaderName {
    fn new(store: MetaStore) -> Self {
        Self {
            store,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The leader's address, if the store names one (`None` too when it could not be
    /// asked in time).
    async fn get(&self) -> Option<String> {
        // Held across the lookup: one at a time.
        let mut last = self.last.lock().await;
        if let Some((at, name)) = last.as_ref()
            && at.elapsed() < LEADER_LOOKUP
        {
            return name.clone();
        }
        let name = tokio::time::timeout(LEADER_LOOKUP, self.store.leader(OM_ELECTION))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        *last = Some((Instant::now(), name.clone()));
        name
    }
}

/// How [`lead_services`] campaigns and what it runs while leading.
#[derive(Debug, Clone)]
pub struct ServiceLeadConfig {
    /// The om's `HOST:PORT` as clients reach it: the candidate value others name.
    pub candidate: String,
    /// The leader's lease (at least [`meta_store::MIN_TTL`]): the longest the services stay
    /// without an om after the one running them dies.
    pub ttl: Duration,
    /// How much etcd history the leader keeps: once the history mark (a revision and when
    /// it was seen, kept in the store) is this old, it compacts away the versions older
    /// than it and sets a new mark.
    pub history: Duration,
}

/// Campaigns in [`OM_ELECTION`] on `store` for `om` (opened with
/// [`OzoneManager::open_shared`] on the same store) until `stop` turns true, running the
/// background services and etcd history compaction while it leads
/// ([`meta_store::run_while_leading`]: a failed campaign is made again a third of the lease
/// later; a lost lead ends the term and campaigns again; `stop` resigns, so another om takes
/// over at once). A term's end stops its services at once, cutting off the passes under way
/// (each of their transactions commits whole or not at all). Returns how many terms it led.
///
/// # Errors
/// As `run_while_leading` (an election name etcd refuses; never for [`OM_ELECTION`]).
pub async fn lead_services(
    om: Arc<OzoneManager>,
    store: MetaStore,
    config: ServiceLeadConfig,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<u32, meta_store::StoreError> {
    let ServiceLeadConfig {
        candidate,
        ttl,
        history,
    } = config;
    meta_store::run_while_leading(&store, OM_ELECTION, &candidate, ttl, stop, |_fence| {
        let term = Term::begin(&om, &store, history);
        async move {
            let _term = term;
            std::future::pending::<()>().await;
        }
    })
    .await
}

/// One term of leading the services: they run until it drops.
struct Term {
    om: Arc<OzoneManager>,
    services: Option<LeaderServices>,
    compaction: tokio::task::JoinHandle<()>,
}

impl Term {
    fn begin(om: &Arc<OzoneManager>, store: &MetaStore, history: Duration) -> Self {
        om.lead.set(true);
        tracing::info!("this om runs the background services");
        println!("om running the background services");
        Self {
            om: Arc::clone(om),
            services: Some(LeaderServices::start(om)),
            compaction: tokio::spawn(compact_history(store.clone(), history)),
        }
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        self.compaction.abort();
        if let Some(services) = self.services.take() {
            services.abort(&self.om);
        }
        self.om.lead.set(false);
        tracing::info!("this om no longer runs the background services");
    }
}

/// The `counters` rows of the history mark: a revision and when (unix ms) it was seen.
const MARK_REVISION: &str = "history_mark_revision";
const MARK_MS: &str = "history_mark_ms";

/// Keeps about `history` of etcd's history, so that old versions alone never fill etcd's
/// quota (ARCHITECTURE.md, "Metadata store": space): every `history / 4` (at least 1 s) it
/// reads the history mark, a revision and when it was seen, kept in the store so that it
/// outlives the term (a lead that moves more often than `history` still compacts); once the
/// mark is `history` old, drops the versions older than it and sets a new mark at the
/// current revision.
async fn compact_history(store: MetaStore, history: Duration) {
    let tick = (history / 4).max(Duration::from_secs(1));
    let history_ms = u64::try_from(history.as_millis()).unwrap_or(u64::MAX);
    loop {
        // First at the term's start: a lead that moves often still looks.
        if let Err(e) = compact_once(&store, history_ms).await {
            tracing::warn!(error = %e, "compacting the store's history failed");
        }
        tokio::time::sleep(tick).await;
    }
}

/// One look at the history mark (see [`compact_history`]); returns the revision compacted
/// to, if it compacted.
async fn compact_once(store: &MetaStore, history_ms: u64) -> Result<Option<u64>, crate::OmError> {
    use crate::tables::COUNTERS;
    let now = crate::clock::unix_ms(std::time::SystemTime::now());
    let revision = COUNTERS.get(store, &MARK_REVISION.to_string()).await?;
    let at = COUNTERS.get(store, &MARK_MS.to_string()).await?;
    let current = store.revision().await?;
    let due = match (&revision, &at) {
        // A mark past the store's revision (a store restored from an older copy): set
        // it again.
        (Some(r), Some(_)) if r.value > current => None,
        (Some(r), Some(at)) if now.saturating_sub(at.value) >= history_ms => Some(r.value),
        (Some(_), Some(_)) => return Ok(None),
        // No mark yet (or half of one): set it.
        _ => None,
    };
    let compacted = match due {
        Some(mark) => store.compact_history(current.saturating_sub(mark)).await?,
        None => None,
    };
    if let Some(to) = compacted {
        tracing::info!(revision = to, "compacted the store's history");
    }
    meta_store::transact(store, |tx| {
        Box::pin(async move {
            COUNTERS.put_in(&tx, &MARK_REVISION.to_string(), &current);
            COUNTERS.put_in(&tx, &MARK_MS.to_string(), &now);
            Ok::<(), crate::OmError>(())
        })
    })
    .await?;
    Ok(compacted)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The history mark is a row: a new term (here, a second call) compacts up to the mark
    /// an earlier one set once it is old enough, and sets the next.
    #[tokio::test]
    async fn history_is_compacted_to_a_mark_kept_in_the_store() {
        let (store, _kept) = crate::test_oms::store_on(crate::test_oms::Backend::Etcd).await;
        let hour = 3_600_000;
        assert_eq!(compact_once(&store, hour).await.expect("mark"), None);
        let mark = store.revision().await.expect("revision");
        for i in 0..5u64 {
            meta_store::transact(&store, |tx| {
                Box::pin(async move {
                    crate::tables::COUNTERS.put_in(&tx, &"filler".to_string(), &i);
                    Ok::<(), crate::OmError>(())
                })
            })
            .await
            .expect("write");
        }
        assert_eq!(
            compact_once(&store, hour).await.expect("look"),
            None,
            "the mark is not an hour old"
        );
        let to = compact_once(&store, 0).await.expect("compact");
        assert!(
            to.is_some_and(|to| to >= mark - 1 && to <= mark),
            "{to:?} against the mark at {mark}"
        );
    }
}
