//! Fault injection: a per-datanode [`FaultInjector`] consulted by the service
//! at named points before I/O (and on ReadChunk answers), switchable at run
//! time from the minicluster's handles or the admin RPC.
//!
//! Per-datanode rather than a process-global failpoint registry: the
//! minicluster runs many datanodes in one process and tests run in parallel.

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use proto_crate::wire::admin as pb;
use proto_crate::{BlockId, ReplicaIndex, ResultCode};
use tonic::Status;

use crate::RpcKind;

/// What an injected fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Answer UNAVAILABLE (result code `UNAVAILABLE`).
    Unavailable,
    /// Answer with this result code.
    Code(ResultCode),
    /// Sleep before serving (async; other calls are not held up).
    Delay(Duration),
    /// ReadChunk only: flip the bits of every 512th byte of the answer, so the
    /// client sees a checksum mismatch.
    Corrupt,
    /// ReadChunk only: answer zero bytes.
    Zero,
    /// ReadChunk only: answer the first half of the bytes.
    Short,
    /// ReadChunk only: answer without the edge checksums the client asked
    /// for (`ReadChunkRequest.edges`), as a datanode from before them does.
    NoEdges,
}

impl FaultKind {
    fn is_data_fault(self) -> bool {
        matches!(
            self,
            Self::Corrupt | Self::Zero | Self::Short | Self::NoEdges
        )
    }
}

/// One injected fault: an RPC kind, what happens, and which calls it hits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultRule {
    /// The RPC it applies to (GetBlock, ReadChunk, WriteChunk or PutBlock).
    pub rpc: RpcKind,
    /// What happens.
    pub kind: FaultKind,
    /// Only calls for this (container id, local id); `None` = every block.
    pub block: Option<(u64, u64)>,
    /// Only calls for this EC replica index; `None` = every block, whatever its index.
    pub replica_index: Option<ReplicaIndex>,
}

/// As `dn fault` takes it: `ReadChunk: corrupt`, with `, block C/L` and
/// `, replica index R` when the rule is narrowed.
impl std::fmt::Display for FaultRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ", self.rpc)?;
        match self.kind {
            FaultKind::Unavailable => f.write_str("unavailable")?,
            FaultKind::Code(c) => write!(f, "code={}", c.name())?,
            FaultKind::Delay(d) => write!(f, "delay-ms={}", d.as_millis())?,
            FaultKind::Corrupt => f.write_str("corrupt")?,
            FaultKind::Zero => f.write_str("zero")?,
            FaultKind::Short => f.write_str("short")?,
            FaultKind::NoEdges => f.write_str("no-edges")?,
        }
        if let Some((c, l)) = self.block {
            write!(f, ", block container {c} local id {l}")?;
        }
        if let Some(r) = self.replica_index {
            write!(f, ", replica index {r} only")?;
        }
        Ok(())
    }
}

/// Why a fault rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid fault: {0}")]
pub struct InvalidFault(pub String);

impl FaultRule {
    /// A rule hitting every call of `rpc`.
    ///
    /// # Errors
    /// [`InvalidFault`] when a data fault (corrupt, zero, short, no-edges) targets
    /// another RPC than ReadChunk, or the RPC kind cannot take faults.
    pub fn new(rpc: RpcKind, kind: FaultKind) -> Result<Self, InvalidFault> {
        if !matches!(
            rpc,
            RpcKind::GetBlock | RpcKind::ReadChunk | RpcKind::WriteChunk | RpcKind::PutBlock
        ) {
            return Err(InvalidFault(format!("{rpc:?} does not take faults")));
        }
        if kind.is_data_fault() && rpc != RpcKind::ReadChunk {
            return Err(InvalidFault(format!(
                "{kind:?} applies to ReadChunk answers only, not {rpc:?}"
            )));
        }
        Ok(Self {
            rpc,
            kind,
            block: None,
            replica_index: None,
        })
    }

    /// Restricts the rule to one block (container id, local id).
    #[must_use]
    pub fn for_block(mut self, container_id: u64, local_id: u64) -> Self {
        self.block = Some((container_id, local_id));
        self
    }

    /// Restricts the rule to one replica index.
    #[must_use]
    pub fn for_replica_index(mut self, r: ReplicaIndex) -> Self {
        self.replica_index = Some(r);
        self
    }

    fn matches(&self, rpc: RpcKind, block: Option<BlockId>) -> bool {
        if self.rpc != rpc {
            return false;
        }
        match block {
            Some(b) => {
                self.block
                    .is_none_or(|(c, l)| c == b.container_id && l == b.local_id)
                    && self
                        .replica_index
                        .is_none_or(|r| Some(r) == b.replica_index)
            }
            None => self.block.is_none() && self.replica_index.is_none(),
        }
    }
}

fn rpc_from_wire(r: i32) -> Result<RpcKind, InvalidFault> {
    match pb::FaultRpc::try_from(r) {
        Ok(pb::FaultRpc::GetBlock) => Ok(RpcKind::GetBlock),
        Ok(pb::FaultRpc::ReadChunk) => Ok(RpcKind::ReadChunk),
        Ok(pb::FaultRpc::WriteChunk) => Ok(RpcKind::WriteChunk),
        Ok(pb::FaultRpc::PutBlock) => Ok(RpcKind::PutBlock),
        _ => Err(InvalidFault(format!("unknown fault rpc {r}"))),
    }
}

impl TryFrom<pb::Fault> for FaultRule {
    type Error = InvalidFault;
    fn try_from(f: pb::Fault) -> Result<Self, InvalidFault> {
        use pb::fault::Kind;
        let rpc = rpc_from_wire(f.rpc)?;
        let kind = match f.kind {
            Some(Kind::Unavailable(_)) => FaultKind::Unavailable,
            Some(Kind::ResultCode(c)) => {
                let code = proto_crate::wire::datanode::Result::try_from(c)
                    .map_err(|_| InvalidFault(format!("unknown result code {c}")))?;
                let name = code.as_str_name().trim_start_matches("RESULT_");
                FaultKind::Code(
                    ResultCode::from_name(name)
                        .ok_or_else(|| InvalidFault(format!("unknown result code {c}")))?,
                )
            }
            Some(Kind::DelayMs(ms)) => FaultKind::Delay(Duration::from_millis(ms)),
            Some(Kind::Corrupt(_)) => FaultKind::Corrupt,
            Some(Kind::Zero(_)) => FaultKind::Zero,
            Some(Kind::Short(_)) => FaultKind::Short,
            Some(Kind::NoEdges(_)) => FaultKind::NoEdges,
            None => return Err(InvalidFault("fault kind missing".into())),
        };
        let mut rule = FaultRule::new(rpc, kind)?;
        if f.container_id != 0 || f.local_id != 0 {
            rule = rule.for_block(f.container_id, f.local_id);
        }
        if f.has_replica_index {
            let r = ReplicaIndex::new(f.replica_index)
                .ok_or_else(|| InvalidFault("replica index 0 names no EC internal block".into()))?;
            rule = rule.for_replica_index(r);
        }
        Ok(rule)
    }
}

impl From<FaultRule> for pb::Fault {
    fn from(r: FaultRule) -> Self {
        use pb::fault::Kind;
        let rpc = match r.rpc {
            RpcKind::GetBlock => pb::FaultRpc::GetBlock,
            RpcKind::ReadChunk => pb::FaultRpc::ReadChunk,
            RpcKind::WriteChunk => pb::FaultRpc::WriteChunk,
            RpcKind::PutBlock => pb::FaultRpc::PutBlock,
            _ => pb::FaultRpc::Unspecified,
        };
        let kind = match r.kind {
            FaultKind::Unavailable => Kind::Unavailable(true),
            FaultKind::Code(c) => Kind::ResultCode(
                proto_crate::wire::datanode::Result::from_str_name(&format!("RESULT_{}", c.name()))
                    .map_or(0, |v| v as i32),
            ),
            FaultKind::Delay(d) => Kind::DelayMs(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            FaultKind::Corrupt => Kind::Corrupt(true),
            FaultKind::Zero => Kind::Zero(true),
            FaultKind::Short => Kind::Short(true),
            FaultKind::NoEdges => Kind::NoEdges(true),
        };
        let (container_id, local_id) = r.block.unwrap_or((0, 0));
        Self {
            rpc: rpc as i32,
            kind: Some(kind),
            container_id,
            local_id,
            has_replica_index: r.replica_index.is_some(),
            replica_index: ReplicaIndex::to_wire(r.replica_index),
        }
    }
}

/// The fault rules of one datanode and how many faults they injected.
/// Rules come only from the operator's admin calls (served only with
/// `--enable-fault-injection`), never from data-path requests.
#[derive(Debug, Default)]
pub struct FaultInjector {
    rules: RwLock<Vec<FaultRule>>,
    injected_total: AtomicU64,
}

impl FaultInjector {
    /// Adds a rule; it applies from the next call on.
    pub fn add(&self, rule: FaultRule) {
        self.rules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(rule);
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.rules
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }

    /// Rules in force.
    #[must_use]
    pub fn rules(&self) -> Vec<FaultRule> {
        self.rules
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Faults injected so far (each delayed, failed or mangled call counts once per rule).
    #[must_use]
    pub fn injected(&self) -> u64 {
        self.injected_total.load(Ordering::Relaxed)
    }

    fn matching(&self, rpc: RpcKind, block: Option<BlockId>) -> Vec<FaultKind> {
        let rules = self
            .rules
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if rules.is_empty() {
            return Vec::new();
        }
        rules
            .iter()
            .filter(|r| r.matches(rpc, block))
            .map(|r| r.kind)
            .collect()
    }

    /// Called before a call's I/O: sleeps for matching delays, then fails the
    /// call if an error rule matches.
    ///
    /// # Errors
    /// The injected status.
    pub(crate) async fn before(&self, rpc: RpcKind, block: Option<BlockId>) -> Result<(), Status> {
        for kind in self.matching(rpc, block) {
            match kind {
                FaultKind::Delay(d) => {
                    self.injected_total.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(d).await;
                }
                FaultKind::Unavailable => {
                    self.injected_total.fetch_add(1, Ordering::Relaxed);
                    return Err(proto_crate::status(
                        ResultCode::Unavailable,
                        "injected fault: unavailable",
                    ));
                }
                FaultKind::Code(code) => {
                    self.injected_total.fetch_add(1, Ordering::Relaxed);
                    return Err(proto_crate::status(code, format!("injected fault: {code}")));
                }
                FaultKind::Corrupt | FaultKind::Zero | FaultKind::Short | FaultKind::NoEdges => {}
            }
        }
        Ok(())
    }

    /// Whether a matching rule drops the edge checksums of a ReadChunk answer.
    pub(crate) fn drops_edges(&self, block: BlockId) -> bool {
        let drop = self
            .matching(RpcKind::ReadChunk, Some(block))
            .contains(&FaultKind::NoEdges);
        if drop {
            self.injected_total.fetch_add(1, Ordering::Relaxed);
        }
        drop
    }

    /// Applies matching data faults to a ReadChunk answer.
    pub(crate) fn mangle(&self, block: BlockId, data: Bytes) -> Bytes {
        let mut data = data;
        for kind in self.matching(RpcKind::ReadChunk, Some(block)) {
            match kind {
                FaultKind::Corrupt => {
                    self.injected_total.fetch_add(1, Ordering::Relaxed);
                    let mut m = BytesMut::from(&data[..]);
                    for b in m.iter_mut().step_by(512) {
                        *b ^= 0xFF;
                    }
                    data = m.freeze();
                }
                FaultKind::Zero => {
                    self.injected_total.fetch_add(1, Ordering::Relaxed);
                    data = Bytes::new();
                }
                FaultKind::Short => {
                    self.injected_total.fetch_add(1, Ordering::Relaxed);
                    data.truncate(data.len() / 2);
                }
                FaultKind::Delay(_)
                | FaultKind::Unavailable
                | FaultKind::Code(_)
                | FaultKind::NoEdges => {}
            }
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ri: u32) -> BlockId {
        BlockId {
            container_id: 1,
            local_id: 2,
            replica_index: ReplicaIndex::new(ri),
        }
    }

    #[test]
    fn rules_round_trip_through_the_wire() {
        let rules = [
            FaultRule::new(RpcKind::ReadChunk, FaultKind::Corrupt)
                .expect("valid fault rule")
                .for_replica_index(ReplicaIndex::new(3).expect("an index")),
            FaultRule::new(
                RpcKind::GetBlock,
                FaultKind::Code(ResultCode::ReplicaIndexMismatch),
            )
            .expect("valid fault rule"),
            FaultRule::new(
                RpcKind::PutBlock,
                FaultKind::Delay(Duration::from_millis(5)),
            )
            .expect("valid fault rule")
            .for_block(1, 2),
            FaultRule::new(RpcKind::WriteChunk, FaultKind::Unavailable).expect("valid fault rule"),
        ];
        for r in rules {
            assert_eq!(
                FaultRule::try_from(pb::Fault::from(r.clone())).expect("valid fault rule"),
                r
            );
        }
        assert!(FaultRule::new(RpcKind::PutBlock, FaultKind::Zero).is_err());
        assert!(FaultRule::try_from(pb::Fault::default()).is_err());
    }

    #[tokio::test]
    async fn matching_and_counting() {
        let f = FaultInjector::default();
        f.add(
            FaultRule::new(RpcKind::ReadChunk, FaultKind::Short)
                .expect("valid fault rule")
                .for_replica_index(ReplicaIndex::new(2).expect("an index")),
        );
        f.add(
            FaultRule::new(RpcKind::GetBlock, FaultKind::Unavailable)
                .expect("valid fault rule")
                .for_block(1, 2),
        );
        let data = Bytes::from_static(b"0123456789");
        assert_eq!(f.mangle(block(1), data.clone()), data);
        assert_eq!(&f.mangle(block(2), data)[..], b"01234");
        assert!(f.before(RpcKind::GetBlock, Some(block(5))).await.is_err());
        assert!(f.before(RpcKind::ReadChunk, Some(block(5))).await.is_ok());
        assert_eq!(f.injected(), 2);
        f.clear();
        assert!(f.before(RpcKind::GetBlock, Some(block(5))).await.is_ok());
    }
}
