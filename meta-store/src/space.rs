//! Space: what happens when the store is full, and how its space comes back.
//!
//! etcd keeps every version of every key until the history is compacted,
//! and its backend file (bbolt) does not shrink until a member is
//! defragmented. Its quota (`--quota-backend-bytes`, 2 GiB by default, at
//! most 8 GiB recommended) bounds that file: a write that would take it past
//! the quota is refused with "database space exceeded", and the member raises
//! a cluster-wide NOSPACE alarm after which every write that adds data is
//! refused (reads and delete-only transactions still run) until the alarm is
//! disarmed. Both surface as [`StoreError::SpaceExhausted`]. The first is
//! checked before the write is proposed, so nothing was written; but etcd
//! checks again when it applies a write — after writing it — and answers
//! the same error when the backend reached the quota in between (another
//! commit, or its own batched growth), so a caller re-reads before
//! retrying.
//!
//! [`MetaStore::compact_history`](crate::MetaStore::compact_history) drops
//! old versions (run it periodically; guarded commits compare current
//! revisions only, so compaction never changes their outcome), and
//! [`MetaStore::reclaim_space`](crate::MetaStore::reclaim_space) is etcd's
//! documented recovery from NOSPACE: compact, defragment every member,
//! disarm the alarm.
//!
//! redb keeps one version of each key and reuses freed pages, so it has no
//! history to compact; it runs out of space only when its disk is full
//! (`ENOSPC`), which is [`StoreError::SpaceExhausted`] too. redb refuses
//! every call after an I/O failure, so the store is reopened once the disk
//! has room.

use std::time::Duration;

use etcd_client::{AlarmAction, AlarmType, CompactionOptions};

use crate::StoreError;
use crate::etcd_config::connect_client;
use crate::etcd_store::EtcdStore;

/// Deadline of defragmenting one member: it rewrites the member's whole
/// backend file and blocks the member's reads and writes meanwhile.
pub const DEFRAGMENT_TIMEOUT: Duration = Duration::from_secs(120);

/// The message etcd answers a write past its quota with (gRPC
/// `RESOURCE_EXHAUSTED`; `ErrGRPCNoSpace` in etcd's `rpctypes`).
const NO_SPACE: &str = "database space exceeded";

/// etcd's answer to a compaction, or a read, at a revision already compacted.
pub(crate) const ALREADY_COMPACTED: &str = "required revision has been compacted";

/// Maps an etcd refusal to the store's error: a write past the quota is
/// [`StoreError::SpaceExhausted`], anything else [`StoreError::Etcd`].
pub(crate) fn refusal(e: etcd_client::Error) -> StoreError {
    match &e {
        etcd_client::Error::GRpcStatus(s)
            if s.code() == tonic::Code::ResourceExhausted && s.message().contains(NO_SPACE) =>
        {
            StoreError::SpaceExhausted(format!("etcd: {}", s.message()))
        }
        _ => StoreError::Etcd(e),
    }
}

/// Maps a redb failure to the store's error: a full disk is
/// [`StoreError::SpaceExhausted`], anything else [`StoreError::Redb`].
pub(crate) fn redb_failure(e: redb::Error) -> StoreError {
    let io = match &e {
        redb::Error::Io(io) => Some(io),
        _ => None,
    };
    match io {
        Some(io) if io.kind() == std::io::ErrorKind::StorageFull => {
            StoreError::SpaceExhausted(format!("redb: {io}"))
        }
        _ => StoreError::Redb(e),
    }
}

/// What [`MetaStore::reclaim_space`](crate::MetaStore::reclaim_space) did to
/// one etcd member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpace {
    /// The member's client URL.
    pub endpoint: String,
    /// Size of its backend file before defragmenting, bytes.
    pub db_bytes_before: u64,
    /// Size after, bytes.
    pub db_bytes_after: u64,
}

fn db_bytes(v: i64) -> Result<u64, StoreError> {
    u64::try_from(v).map_err(|_| StoreError::Protocol(format!("a negative database size {v}")))
}

impl EtcdStore {
    /// Compacts the history before `current revision - retain` (nothing if
    /// that is not past the last compaction). Returns the revision
    /// compacted to, if any.
    pub(crate) async fn compact_history(&self, retain: u64) -> Result<Option<u64>, StoreError> {
        self.compact_within(retain, self.call_timeout()).await
    }

    /// [`compact_history`](Self::compact_history) with its own deadline (a
    /// physical compaction of a large store takes longer than a call).
    async fn compact_within(
        &self,
        retain: u64,
        deadline: Duration,
    ) -> Result<Option<u64>, StoreError> {
        let current = self.revision().await?;
        let Some(to) = current.checked_sub(retain).filter(|r| *r > 0) else {
            return Ok(None);
        };
        let rev = i64::try_from(to).map_err(|_| StoreError::Protocol(format!("revision {to}")))?;
        // `physical`: the answer comes once the old versions are gone from
        // the backend, so a defragmentation after it gives their space back.
        let options = CompactionOptions::new().with_physical();
        match tokio::time::timeout(deadline, self.kv_client().compact(rev, Some(options))).await {
            Err(_) => Err(StoreError::Timeout(deadline)),
            Ok(Ok(_)) => Ok(Some(to)),
            Ok(Err(etcd_client::Error::GRpcStatus(s)))
                if s.message().contains(ALREADY_COMPACTED) =>
            {
                Ok(None)
            }
            Ok(Err(e)) => Err(refusal(e)),
        }
    }

    /// Compacts all history, defragments each member, disarms NOSPACE.
    pub(crate) async fn reclaim_space(&self) -> Result<Vec<MemberSpace>, StoreError> {
        self.compact_within(0, DEFRAGMENT_TIMEOUT).await?;
        let mut members = Vec::with_capacity(self.config.endpoints.len());
        for endpoint in &self.config.endpoints {
            // One connection to this member alone: a defragmentation runs
            // on the member it reaches, and the balanced channels pick one.
            let one = std::slice::from_ref(endpoint);
            let mut client = connect_client(&self.config, one, Some(DEFRAGMENT_TIMEOUT)).await?;
            let before = db_bytes(client.status().await?.db_size())?;
            client.defragment().await.map_err(refusal)?;
            let after = db_bytes(client.status().await?.db_size())?;
            tracing::info!(endpoint, before, after, "etcd member defragmented");
            members.push(MemberSpace {
                endpoint: endpoint.clone(),
                db_bytes_before: before,
                db_bytes_after: after,
            });
        }
        let mut maintenance = self.maintenance_client();
        let alarms = maintenance
            .alarm(AlarmAction::Get, AlarmType::None, None)
            .await?;
        for alarm in alarms.alarms() {
            if alarm.alarm() == AlarmType::Nospace {
                let mut options = etcd_client::AlarmOptions::new();
                options.with_member(alarm.member_id());
                maintenance
                    .alarm(AlarmAction::Deactivate, AlarmType::Nospace, Some(options))
                    .await?;
                tracing::info!(member = alarm.member_id(), "etcd NOSPACE alarm disarmed");
            }
        }
        Ok(members)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_past_the_quota_is_space_exhausted_and_other_refusals_are_not() {
        let answer =
            |code, msg: &str| etcd_client::Error::GRpcStatus(tonic::Status::new(code, msg));
        let e = refusal(answer(
            tonic::Code::ResourceExhausted,
            "etcdserver: mvcc: database space exceeded",
        ));
        assert!(matches!(e, StoreError::SpaceExhausted(_)), "{e:?}");
        // Too many requests is also RESOURCE_EXHAUSTED, but not about space.
        let e = refusal(answer(
            tonic::Code::ResourceExhausted,
            "etcdserver: too many requests",
        ));
        assert!(matches!(e, StoreError::Etcd(_)), "{e:?}");
        let e = refusal(answer(tonic::Code::InvalidArgument, NO_SPACE));
        assert!(matches!(e, StoreError::Etcd(_)), "{e:?}");
    }

    #[test]
    fn a_full_disk_under_redb_is_space_exhausted() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let e = redb_failure(redb::Error::Io(full));
        assert!(matches!(e, StoreError::SpaceExhausted(_)), "{e:?}");
        let other = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let e = redb_failure(redb::Error::Io(other));
        assert!(matches!(e, StoreError::Redb(_)), "{e:?}");
    }
}
