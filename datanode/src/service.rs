//! The gRPC service: converts wire messages into domain types (a conversion
//! failure is `INVALID_ARGUMENT`), calls the [`ContainerStore`], and turns its
//! errors into statuses carrying a result code.

use std::sync::Arc;

use block_stream::config::MAX_BYTES_PER_CHECKSUM;
use proto_crate::wire::datanode as pb;
use proto_crate::wire::datanode::datanode_service_server::DatanodeService;
use proto_crate::{BlockData, BlockId, ChecksumType, ChunkInfo, ProtocolError, ResultCode};
use tonic::{Request, Response, Status};

use crate::fault::FaultInjector;
use crate::inflight::{InflightBudget, hold};
use crate::metrics::{DatanodeMetrics, RpcKind};
use crate::reconstruction::{
    EcReconstructionCommand, EcReconstructionCoordinator, ReconstructionError,
};
use crate::storage::{ContainerStore, MAX_READ_LEN};
use crate::tokens::BlockTokenVerifier;
use proto_crate::block_token::AccessModes;

/// The datanode's implementation of `DatanodeService`.
#[derive(Debug, Clone)]
pub struct DatanodeGrpcService {
    uuid: Arc<str>,
    store: Arc<ContainerStore>,
    metrics: Arc<DatanodeMetrics>,
    faults: Arc<FaultInjector>,
    budget: Arc<InflightBudget>,
    reconstruction: Arc<EcReconstructionCoordinator>,
    /// With security on: checks each data RPC's block token.
    tokens: Option<Arc<BlockTokenVerifier>>,
}

impl DatanodeGrpcService {
    /// The service of datanode `uuid` over `store`, counting into `metrics`,
    /// consulting `faults` before each call's I/O and charging
    /// ReadChunk/WriteChunk payloads to `budget` (see [`InflightBudget`]).
    #[must_use]
    pub fn new(
        uuid: &str,
        store: Arc<ContainerStore>,
        metrics: Arc<DatanodeMetrics>,
        faults: Arc<FaultInjector>,
        budget: Arc<InflightBudget>,
    ) -> Self {
        Self {
            uuid: Arc::from(uuid),
            store,
            metrics,
            faults,
            budget,
            reconstruction: Arc::new(EcReconstructionCoordinator::default()),
            tokens: None,
        }
    }

    /// The same service running the om's `ReconstructEcGroup` orders on
    /// `coordinator` (its own datanode clients: TLS, limits).
    #[must_use]
    pub fn with_reconstruction(mut self, coordinator: Arc<EcReconstructionCoordinator>) -> Self {
        self.reconstruction = coordinator;
        self
    }

    /// The same service checking block tokens with `verifier` (security on).
    #[must_use]
    pub fn with_block_tokens(mut self, verifier: Arc<BlockTokenVerifier>) -> Self {
        self.tokens = Some(verifier);
        self
    }

    /// With security on, checks the call's token for `needed` on `block`.
    fn authorize(
        &self,
        md: &tonic::metadata::MetadataMap,
        block: Option<BlockId>,
        needed: AccessModes,
        rpc: &'static str,
    ) -> Result<(), Status> {
        match &self.tokens {
            Some(v) => v.check(md, block, needed, rpc),
            None => Ok(()),
        }
    }
}

fn bad(e: ProtocolError) -> Status {
    proto_crate::status(ResultCode::InvalidArgument, e.to_string())
}

/// The checksum type and bytesPerChecksum of a ReadChunk's edge request:
/// CRC32 or CRC32C, 1 byte to `MAX_BYTES_PER_CHECKSUM` (4 MiB) windows.
fn edge_windows(e: pb::EdgeChecksumRequest) -> Result<(ChecksumType, u32), ProtocolError> {
    let ty = ChecksumType::try_from(e.r#type)?;
    if ty == ChecksumType::None {
        return Err(ProtocolError::InvalidField {
            field: "edges.type",
            reason: "edges need a checksum type (CRC32 or CRC32C)".into(),
        });
    }
    if e.bytes_per_checksum == 0 || e.bytes_per_checksum > MAX_BYTES_PER_CHECKSUM {
        return Err(ProtocolError::InvalidField {
            field: "edges.bytes_per_checksum",
            reason: format!(
                "{} is outside 1..={MAX_BYTES_PER_CHECKSUM}",
                e.bytes_per_checksum
            ),
        });
    }
    Ok((ty, e.bytes_per_checksum))
}

fn block_id(b: Option<pb::BlockId>) -> Result<BlockId, Status> {
    b.map(BlockId::from)
        .ok_or_else(|| bad(ProtocolError::MissingField("block_id")))
}

fn chunk(c: Option<pb::ChunkInfo>) -> Result<ChunkInfo, Status> {
    c.ok_or(ProtocolError::MissingField("chunk"))
        .and_then(ChunkInfo::try_from)
        .map_err(bad)
}

#[tonic::async_trait]
impl DatanodeService for DatanodeGrpcService {
    async fn get_block(
        &self,
        req: Request<pb::GetBlockRequest>,
    ) -> Result<Response<pb::GetBlockResponse>, Status> {
        self.metrics.record(RpcKind::GetBlock);
        let (md, _, req) = req.into_parts();
        let id = block_id(req.block_id)?;
        self.authorize(&md, Some(id), AccessModes::READ, "GetBlock")?;
        self.faults.before(RpcKind::GetBlock, Some(id)).await?;
        let data = self.store.get_block(id)?;
        Ok(Response::new(pb::GetBlockResponse {
            block_data: Some(BlockData::clone(&data).into()),
        }))
    }

    async fn read_chunk(
        &self,
        req: Request<pb::ReadChunkRequest>,
    ) -> Result<Response<pb::ReadChunkResponse>, Status> {
        self.metrics.record(RpcKind::ReadChunk);
        let (md, _, req) = req.into_parts();
        let id = block_id(req.block_id)?;
        self.authorize(&md, Some(id), AccessModes::READ, "ReadChunk")?;
        let chunk = req
            .chunk
            .ok_or(ProtocolError::MissingField("chunk"))
            .and_then(ChunkInfo::from_read_wire)
            .map_err(bad)?;
        let windows = req.edges.map(edge_windows).transpose().map_err(bad)?;
        // With edges the store reads around the range (through the block's
        // fine checksums, or whole checksum windows) and only the range is
        // sent. The plan checks the range asked for first, so that a
        // refusal names it rather than what is read around it.
        let plan = match windows {
            Some((ty, bpc)) => Some(
                self.store
                    .edge_plan(id, &chunk, ty, bpc, req.offset, req.len)
                    .await?,
            ),
            None => None,
        };
        let (start, read_len) = plan
            .as_ref()
            .map_or((req.offset, req.len), |p| (p.start, p.len));
        self.faults.before(RpcKind::ReadChunk, Some(id)).await?;
        // Oversized reads are charged nothing: the store refuses them
        // before allocating.
        let charge = if read_len <= MAX_READ_LEN {
            read_len
        } else {
            0
        };
        let permit = self.budget.acquire(charge).await;
        let read = self.store.read(id, &chunk, start, read_len).await?;
        let (data, edges) = match plan {
            None => (read, None),
            Some(plan) => {
                let (range, e) = plan.edges(&read, req.len).ok_or_else(|| {
                    proto_crate::status(
                        ResultCode::IoException,
                        format!(
                            "the store read {} bytes of block {id} for {} with {} before them",
                            read.len(),
                            req.len,
                            plan.head()
                        ),
                    )
                })?;
                (read.slice(range), Some(e.into()))
            }
        };
        let data = hold(self.faults.mangle(id, data), permit);
        let edges = edges.filter(|_| !self.faults.drops_edges(id));
        self.metrics.record_read(data.len() as u64);
        Ok(Response::new(pb::ReadChunkResponse { data, edges }))
    }

    async fn write_chunk(
        &self,
        req: Request<pb::WriteChunkRequest>,
    ) -> Result<Response<pb::WriteChunkResponse>, Status> {
        self.metrics.record(RpcKind::WriteChunk);
        let (md, _, req) = req.into_parts();
        let id = block_id(req.block_id)?;
        self.authorize(&md, Some(id), AccessModes::WRITE, "WriteChunk")?;
        let chunk = chunk(req.chunk)?;
        let n = req.data.len() as u64;
        self.faults.before(RpcKind::WriteChunk, Some(id)).await?;
        let _permit = self.budget.acquire(n).await;
        // A repair's first chunk may replace a block deleted here earlier.
        if req.repair && chunk.offset == 0 {
            self.store.revive(id).await?;
        }
        self.store.write_chunk(id, &chunk, req.data).await?;
        self.metrics.record_written(n);
        Ok(Response::new(pb::WriteChunkResponse {}))
    }

    async fn put_block(
        &self,
        req: Request<pb::PutBlockRequest>,
    ) -> Result<Response<pb::PutBlockResponse>, Status> {
        self.metrics.record(RpcKind::PutBlock);
        let (md, _, req) = req.into_parts();
        let commit = proto_crate::BlockCommit::from_flags(req.eof, req.sync);
        let data = req
            .block_data
            .ok_or(ProtocolError::MissingField("block_data"))
            .and_then(BlockData::try_from)
            .map_err(bad)?;
        self.authorize(&md, Some(data.block_id), AccessModes::WRITE, "PutBlock")?;
        self.faults
            .before(RpcKind::PutBlock, Some(data.block_id))
            .await?;
        // A repair's empty record (a padding index) may replace a deleted block too.
        if req.repair && data.chunks.is_empty() {
            self.store.revive(data.block_id).await?;
        }
        let len = self.store.put_block(data, commit).await?;
        Ok(Response::new(pb::PutBlockResponse {
            committed_block_length: len,
        }))
    }

    async fn list_block(
        &self,
        req: Request<pb::ListBlockRequest>,
    ) -> Result<Response<pb::ListBlockResponse>, Status> {
        self.metrics.record(RpcKind::ListBlock);
        let (md, _, req) = req.into_parts();
        // Lists blocks of a whole container: the om's service token only.
        self.authorize(&md, None, AccessModes::READ, "ListBlock")?;
        let blocks = self
            .store
            .list_blocks(req.container_id, req.start_local_id, req.count)?;
        Ok(Response::new(pb::ListBlockResponse {
            blocks: blocks.iter().map(|b| BlockData::clone(b).into()).collect(),
        }))
    }

    async fn get_committed_block_length(
        &self,
        req: Request<pb::GetCommittedBlockLengthRequest>,
    ) -> Result<Response<pb::GetCommittedBlockLengthResponse>, Status> {
        self.metrics.record(RpcKind::GetCommittedBlockLength);
        let (md, _, req) = req.into_parts();
        let id = block_id(req.block_id)?;
        self.authorize(&md, Some(id), AccessModes::READ, "GetCommittedBlockLength")?;
        let data = self.store.get_block(id)?;
        Ok(Response::new(pb::GetCommittedBlockLengthResponse {
            block_id: Some(id.into()),
            length: data.size,
        }))
    }

    async fn create_container(
        &self,
        req: Request<pb::CreateContainerRequest>,
    ) -> Result<Response<pb::CreateContainerResponse>, Status> {
        self.metrics.record(RpcKind::CreateContainer);
        let (md, _, req) = req.into_parts();
        self.authorize(&md, None, AccessModes::WRITE, "CreateContainer")?;
        self.store.create_container(req.container_id).await?;
        Ok(Response::new(pb::CreateContainerResponse {}))
    }

    async fn delete_blocks(
        &self,
        req: Request<pb::DeleteBlocksRequest>,
    ) -> Result<Response<pb::DeleteBlocksResponse>, Status> {
        self.metrics.record(RpcKind::DeleteBlocks);
        let (md, _, req) = req.into_parts();
        self.authorize(&md, None, AccessModes::DELETE, "DeleteBlocks")?;
        if !req.datanode_uuid.is_empty() && *req.datanode_uuid != *self.uuid {
            return Err(bad(ProtocolError::InvalidField {
                field: "datanode_uuid",
                reason: format!(
                    "DeleteBlocks meant for datanode {} reached datanode {}",
                    req.datanode_uuid, self.uuid
                ),
            }));
        }
        let ids: Vec<BlockId> = req.block_ids.into_iter().map(BlockId::from).collect();
        let deleted = self.store.delete_blocks(&ids).await?;
        Ok(Response::new(pb::DeleteBlocksResponse { deleted }))
    }

    async fn reconstruct_ec_group(
        &self,
        req: Request<pb::ReconstructEcGroupRequest>,
    ) -> Result<Response<pb::ReconstructEcGroupResponse>, Status> {
        self.metrics.record(RpcKind::ReconstructEcGroup);
        let reconstruction_status =
            |e: ReconstructionError| proto_crate::status(e.code(), e.to_string());
        let (md, _, req) = req.into_parts();
        let group = BlockId {
            container_id: req.container_id,
            local_id: req.local_id,
            replica_index: None,
        };
        // The coordinator reads the sources and writes the targets with the
        // same token, so it must allow both on every index of the group.
        self.authorize(
            &md,
            Some(group),
            AccessModes::READ_WRITE,
            "ReconstructEcGroup",
        )?;
        let mut cmd = EcReconstructionCommand::try_from(req).map_err(reconstruction_status)?;
        cmd.token = proto_crate::block_token::carried(&md)
            .ok()
            .flatten()
            .map(proto_crate::block_token::BlockToken::from_bytes);
        let report = self
            .reconstruction
            .reconstruct(&cmd)
            .await
            .map_err(reconstruction_status)?;
        tracing::info!(
            group = %format!("{}:{}", cmd.container_id, cmd.local_id),
            rebuilt = ?report.rebuilt,
            bytes_read = report.bytes_read,
            skipped = report.skipped.len(),
            "EC reconstruction done"
        );
        Ok(Response::new(report.into()))
    }
}
