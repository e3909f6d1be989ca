//! The datanode client: one cached gRPC client per datanode, typed calls,
//! per-attempt deadlines, status -> [`BlockStreamError`] mapping.
//!
//! Models Ozone's `XceiverClientGrpc` (one client per datanode, reused by
//! every stream) and `XceiverClientManager` (the cache). Unlike Ozone's, a
//! client has two HTTP/2 connections: one for small calls and one, opened on
//! first use, for bulk transfers ([`XceiverConfig::bulk_transfer_bytes`]).

use proto_crate::block_token::{self, BlockToken};
use proto_crate::request_id;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic::service::interceptor::InterceptedService;

use bytes::Bytes;
use proto_crate::wire::datanode as pb;
use proto_crate::wire::datanode::datanode_service_client::DatanodeServiceClient;
use proto_crate::{BlockCommit, BlockData, BlockId, ChunkInfo, ResultCode, result_code};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::checksum;
use crate::config::MAX_BYTES_PER_CHECKSUM;
use crate::metrics::DatanodeCounters;
use crate::token::{BlockTokenSource, Renewal};
use crate::{BlockStreamError, ClientMetrics, Result, RpcKind, XceiverConfig};
use std::sync::atomic::{AtomicU64, Ordering};

/// Who a write is made for: a client writing a key, or a repair the om ordered (an EC
/// rebuild or a replica copy), whose writes may replace a block the datanode deleted
/// earlier (see `WriteChunkRequest.repair` in `datanode.proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteOrigin {
    /// A key writer: a deleted block stays deleted.
    #[default]
    Client,
    /// A repair: Ozone's `ECReconstructionCoordinator`, or a replica copy.
    Repair,
}

/// Hands out one cached [`XceiverClient`] per datanode address.
///
/// Connections open lazily on first use and reconnect by themselves after a
/// datanode restarts on the same address. The cache holds at most
/// `XceiverConfig::max_cached_channels` clients (each up to two connections:
/// small calls and bulk transfers), least recently used out.
#[derive(Debug)]
pub struct XceiverClientManager {
    config: XceiverConfig,
    metrics: Arc<ClientMetrics>,
    /// Bounded: see above.
    clients: Mutex<ChannelCache>,
}

/// Cached clients by address, with their last-use tick.
#[derive(Debug, Default)]
struct ChannelCache {
    clients: HashMap<String, (XceiverClient, u64)>,
    tick: u64,
}

impl XceiverClientManager {
    /// A client of the datanode at `address` (`HOST:PORT`) with the default
    /// [`XceiverConfig`] (30 s RPC deadline, 5 s connect) and counters of
    /// its own, on a new channel each call: for tools and tests that talk to
    /// one datanode once, outside any `ec_client::Client`. Tools that count
    /// RPCs or reuse the channel build a manager with
    /// [`new`](Self::new) instead.
    ///
    /// # Errors
    /// [`BlockStreamError::InvalidArgument`](crate::BlockStreamError) for a
    /// malformed address.
    pub fn direct(address: &str) -> Result<XceiverClient> {
        Self::direct_with(address, XceiverConfig::default())
    }

    /// [`direct`](Self::direct) with `config`'s settings (its TLS above all).
    ///
    /// # Errors
    /// [`BlockStreamError::InvalidArgument`](crate::BlockStreamError) for a
    /// malformed address.
    pub fn direct_with(address: &str, config: XceiverConfig) -> Result<XceiverClient> {
        Self::new(config, Arc::default()).client(address)
    }

    /// A manager with no channels yet; every client it creates counts into `metrics`.
    #[must_use]
    pub fn new(config: XceiverConfig, metrics: Arc<ClientMetrics>) -> Self {
        Self {
            config,
            metrics,
            clients: Mutex::new(ChannelCache::default()),
        }
    }

    /// Datanode clients cached now (at most `max_cached_channels`).
    #[must_use]
    pub fn cached_channels(&self) -> usize {
        self.clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clients
            .len()
    }

    /// The settings every client uses.
    #[must_use]
    pub fn config(&self) -> &XceiverConfig {
        &self.config
    }

    /// The counters every client of this manager feeds.
    #[must_use]
    pub fn metrics(&self) -> &Arc<ClientMetrics> {
        &self.metrics
    }

    /// The cached client of the datanode at `address` (`HOST:PORT`), created on
    /// first use (no I/O happens here).
    ///
    /// # Errors
    /// [`BlockStreamError::InvalidArgument`] if `address` is not a valid `HOST:PORT`.
    pub fn client(&self, address: &str) -> Result<XceiverClient> {
        let mut guard = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ChannelCache { clients, tick } = &mut *guard;
        *tick += 1;
        if let Some((c, used)) = clients.get_mut(address) {
            *used = *tick;
            return Ok(c.clone());
        }
        let c = XceiverClient::connect_lazy(address, &self.config, Arc::clone(&self.metrics))?;
        let max = self.config.max_cached_channels.max(1);
        while clients.len() >= max {
            // A linear scan, only when a new address arrives at a full cache.
            let Some(victim) = clients
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(a, _)| a.clone())
            else {
                break;
            };
            clients.remove(&victim);
        }
        clients.insert(address.to_string(), (c.clone(), *tick));
        Ok(c)
    }
}

/// Typed, counted, deadline-bound calls to one datanode. Cheap to clone; all
/// clones share its connections: one for small calls and, when
/// [`XceiverConfig::bulk_transfer_bytes`] is set, one for bulk transfers.
#[derive(Debug, Clone)]
pub struct XceiverClient {
    address: Arc<str>,
    /// Every call carries the current request id ([`request_id::attach`]).
    inner: Inner,
    /// The connection of transfers of at least the given bytes (it connects
    /// on its first call), when bulk transfers are kept apart.
    bulk: Option<(Inner, u64)>,
    counters: Arc<DatanodeCounters>,
    metrics: Arc<ClientMetrics>,
    rpc_timeout: Duration,
    /// Whether readers of this client verify checksums
    /// ([`XceiverConfig::verify_checksum`]).
    verify_checksum: bool,
    /// When the datanode last answered a request for edge checksums without
    /// them (a datanode from before them), as milliseconds since
    /// [`EPOCH`] plus one (0: never). For `edges_probe_interval` after it,
    /// verified reads ask for whole windows at once. Shared by every clone.
    no_edges_at: Arc<AtomicU64>,
    edges_probe_interval: Duration,
    /// The block token sent with every call (security on), if any.
    token: Option<Arc<BlockTokenSource>>,
}

/// The instant [`XceiverClient`]s measure their no-edges marks from (the
/// first use in this process).
static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

/// Milliseconds since [`EPOCH`] (monotonic).
fn since_epoch_ms() -> u64 {
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Whether verified reads should ask a datanode for whole windows at `now`
/// (milliseconds since [`EPOCH`]): its no-edges `mark` (the time it last
/// answered without edges, plus one; 0: never) is less than `probe_ms` old.
/// When the interval is over, the first caller renews the mark and gets
/// `false` (it probes with edges); callers beside it see the renewed mark and
/// get `true`, so a datanode still without edges is probed by one read, not
/// by every read in flight. An answer with edges clears the mark.
fn edges_known_missing_at(mark: &AtomicU64, now: u64, probe_ms: u64) -> bool {
    let at = mark.load(Ordering::Relaxed);
    if at == 0 {
        return false;
    }
    if now < (at - 1).saturating_add(probe_ms) {
        return true;
    }
    mark.compare_exchange(
        at,
        now.saturating_add(1),
        Ordering::Relaxed,
        Ordering::Relaxed,
    )
    .is_err()
}

/// The generated client type every call goes through.
type Inner = DatanodeServiceClient<InterceptedService<Channel, request_id::Attach>>;

impl XceiverClient {
    fn connect_lazy(
        address: &str,
        config: &XceiverConfig,
        metrics: Arc<ClientMetrics>,
    ) -> Result<Self> {
        let endpoint = proto_crate::tls::endpoint(address, config.tls.as_ref())
            .map_err(|e| BlockStreamError::InvalidArgument(format!("datanode {e}")))?
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            .max_frame_size(config.http2_max_frame_size)
            .initial_stream_window_size(8 * 1024 * 1024)
            .initial_connection_window_size(32 * 1024 * 1024);
        let client = |channel| {
            DatanodeServiceClient::with_interceptor(
                channel,
                request_id::attach as request_id::Attach,
            )
            .max_decoding_message_size(config.max_message_size)
            .max_encoding_message_size(config.max_message_size)
        };
        // Each `connect_lazy` is a connection of its own.
        let bulk = config
            .bulk_transfer_bytes
            .map(|from| (client(endpoint.connect_lazy()), from));
        Ok(Self {
            address: address.into(),
            counters: metrics.datanode(address),
            inner: client(endpoint.connect_lazy()),
            bulk,
            metrics,
            rpc_timeout: config.rpc_timeout,
            verify_checksum: config.verify_checksum,
            no_edges_at: Arc::default(),
            edges_probe_interval: config.edges_probe_interval,
            token: None,
        })
    }

    /// This client, sending `token`'s current token with every call (and
    /// renewing it as [`BlockTokenSource`] says). Cheap: the channel is shared.
    #[must_use]
    pub fn with_token(mut self, token: Option<Arc<BlockTokenSource>>) -> Self {
        self.token = token;
        self
    }

    /// This client, sending the fixed `token` (if any) with every call.
    #[must_use]
    pub fn with_fixed_token(self, token: Option<&BlockToken>) -> Self {
        self.with_token(token.cloned().map(BlockTokenSource::fixed))
    }

    /// `HOST:PORT` of the datanode.
    #[must_use]
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Whether block readers verify what this client reads against the
    /// chunks' checksums ([`XceiverConfig::verify_checksum`] of its manager).
    #[must_use]
    pub fn verifies_checksum(&self) -> bool {
        self.verify_checksum
    }

    /// The generated client of a call that moves `bytes` of payload: the
    /// bulk connection's from `bulk_transfer_bytes` on, the other's below.
    fn connection(&self, bytes: u64) -> Inner {
        match &self.bulk {
            Some((bulk, from)) if bytes >= *from => bulk.clone(),
            _ => self.inner.clone(),
        }
    }

    /// Runs an RPC that moves `bytes` of payload (which picks its
    /// connection): `send` gets a clone of the generated client and `msg` as
    /// a request carrying the block token. A refused token is renewed once
    /// (see [`BlockTokenSource`]) and the call repeated with the new one.
    async fn call<M, T, F, Fut>(
        &self,
        kind: RpcKind,
        block: Option<BlockId>,
        bytes: u64,
        msg: M,
        send: F,
    ) -> Result<T>
    where
        M: Clone,
        F: Fn(Inner, tonic::Request<M>) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        let Some(source) = self.token.as_ref() else {
            return self
                .attempt(
                    kind,
                    block,
                    send(self.connection(bytes), tonic::Request::new(msg)),
                )
                .await;
        };
        let token = source.current();
        let first = block_token::request(msg.clone(), Some(&token));
        let err = match self
            .attempt(kind, block, send(self.connection(bytes), first))
            .await
        {
            Err(e) if e.is_token_failure() && source.can_refresh() => e,
            other => return other,
        };
        match source.renew(&token).await {
            Ok(renewal @ (Renewal::Fetched | Renewal::ByAnother)) => {
                if renewal == Renewal::Fetched {
                    self.metrics.record_token_refresh();
                }
                let again = block_token::request(msg, Some(&source.current()));
                self.attempt(kind, block, send(self.connection(bytes), again))
                    .await
            }
            Ok(Renewal::None) => Err(err),
            Err(why) => {
                tracing::warn!(%why, %err, "renewing a refused block token");
                Err(err)
            }
        }
    }

    /// Runs one attempt of an RPC: counts it, bounds it by the per-attempt
    /// deadline, maps a failed status.
    async fn attempt<T, F>(&self, kind: RpcKind, block: Option<BlockId>, fut: F) -> Result<T>
    where
        F: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        self.metrics.record_rpc(&self.counters, kind);
        match tokio::time::timeout(self.rpc_timeout, fut).await {
            Err(_) => Err(BlockStreamError::Timeout {
                kind,
                datanode: self.address.to_string(),
                block,
                after: self.rpc_timeout,
            }),
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(self.map_status(kind, block, &status)),
        }
    }

    fn map_status(
        &self,
        kind: RpcKind,
        block: Option<BlockId>,
        status: &Status,
    ) -> BlockStreamError {
        let datanode = self.address.to_string();
        let code = result_code(status);
        if code == ResultCode::Unspecified {
            match status.code() {
                Code::DeadlineExceeded => {
                    return BlockStreamError::Timeout {
                        kind,
                        datanode,
                        block,
                        after: self.rpc_timeout,
                    };
                }
                // No result code: the call never reached our service (connection
                // refused, reset, GOAWAY during shutdown, ...).
                Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Aborted => {
                    return BlockStreamError::Unavailable {
                        kind,
                        datanode,
                        block,
                        message: status.message().to_string(),
                    };
                }
                _ => {}
            }
        }
        if code == ResultCode::Unavailable {
            return BlockStreamError::Unavailable {
                kind,
                datanode,
                block,
                message: status.message().to_string(),
            };
        }
        BlockStreamError::Datanode {
            kind,
            datanode,
            block,
            code,
            message: status.message().to_string(),
        }
    }

    fn protocol(&self, source: proto_crate::ProtocolError) -> BlockStreamError {
        BlockStreamError::Protocol {
            datanode: self.address.to_string(),
            source,
        }
    }

    /// GetBlock: the committed [`BlockData`] of `block` (chunk list, size, metadata).
    ///
    /// # Errors
    /// Not-found and index-mismatch result codes as [`BlockStreamError::Datanode`];
    /// transport failures, deadlines; a reply for another block id as `Protocol`.
    pub async fn get_block(&self, block: BlockId) -> Result<BlockData> {
        let resp = self
            .call(
                RpcKind::GetBlock,
                Some(block),
                0,
                pb::GetBlockRequest {
                    block_id: Some(block.into()),
                },
                |mut c, r| async move { c.get_block(r).await },
            )
            .await?;
        let data = resp
            .block_data
            .ok_or(proto_crate::ProtocolError::MissingField("block_data"))
            .and_then(BlockData::try_from)
            .map_err(|e| self.protocol(e))?;
        if data.block_id.container_id != block.container_id
            || data.block_id.local_id != block.local_id
        {
            return Err(self.protocol(proto_crate::ProtocolError::InvalidField {
                field: "block_data.block_id",
                reason: format!("asked for {block}, got {}", data.block_id),
            }));
        }
        Ok(data)
    }

    /// ReadChunk: exactly `len` bytes of `chunk` at block-relative `offset`.
    /// Checksums are not verified here (see [`read_chunk_verified`](Self::read_chunk_verified)).
    ///
    /// # Errors
    /// [`BlockStreamError::ShortRead`] if the answer is not exactly `len` bytes
    /// (a short or zero-byte answer is a failed location, never retried here);
    /// result codes and transport failures as for every call.
    pub async fn read_chunk(
        &self,
        block: BlockId,
        chunk: &ChunkInfo,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        Ok(self
            .read_chunk_with(block, chunk, offset, len, None)
            .await?
            .0)
    }

    /// ReadChunk of exactly `len` bytes of `chunk` at block-relative `offset`,
    /// verified against the chunk's checksums (those GetBlock listed). A range
    /// that does not start and end on checksum window boundaries asks the
    /// datanode for the checksums of the window bytes around it
    /// ([`checksum::EdgeChecksums`](crate::checksum::EdgeChecksums)) and
    /// folds them in ([`checksum::verify_with_edges`](crate::checksum::verify_with_edges)),
    /// so only the wanted bytes cross the network. A datanode that answers
    /// without edges (one older than them) is asked again for the whole
    /// windows, which are verified as they are, and for
    /// [`XceiverConfig::edges_probe_interval`] after that is asked for whole
    /// windows at once; so are chunks whose windows are larger
    /// than [`MAX_BYTES_PER_CHECKSUM`](crate::config::MAX_BYTES_PER_CHECKSUM),
    /// the most a datanode sums for edges.
    ///
    /// # Errors
    /// [`BlockStreamError::ChecksumMismatch`] for a window that differs (a
    /// failed location); as [`read_chunk`](Self::read_chunk) otherwise.
    pub async fn read_chunk_verified(
        &self,
        block: BlockId,
        chunk: &ChunkInfo,
        offset: u64,
        len: u64,
    ) -> Result<Bytes> {
        let cs = &chunk.checksum;
        if checksum::needs_edges(chunk, offset, len)
            && cs.bytes_per_checksum <= MAX_BYTES_PER_CHECKSUM
            && !self.edges_known_missing()
        {
            let ask = pb::EdgeChecksumRequest {
                r#type: pb::ChecksumType::from(cs.ty).into(),
                bytes_per_checksum: cs.bytes_per_checksum,
            };
            let (bytes, edges) = self
                .read_chunk_with(block, chunk, offset, len, Some(ask))
                .await?;
            if let Some(edges) = edges {
                if self.no_edges_at.load(Ordering::Relaxed) != 0 {
                    // A probe answered with edges: the datanode has them now.
                    self.no_edges_at.store(0, Ordering::Relaxed);
                }
                checksum::verify_with_edges(block, self.address(), chunk, offset, &bytes, edges)?;
                return Ok(bytes);
            }
            self.no_edges_at
                .store(since_epoch_ms().saturating_add(1), Ordering::Relaxed);
        }
        // On window boundaries already, the range is its own widening.
        let (w_off, w_len) = checksum::widen(chunk, offset, len);
        let widened = self.read_chunk(block, chunk, w_off, w_len).await?;
        checksum::verify(block, self.address(), chunk, w_off, &widened)?;
        let from = usize::try_from(offset - w_off).unwrap_or(usize::MAX);
        let to = usize::try_from(offset + len - w_off).unwrap_or(usize::MAX);
        Ok(widened.slice(from..to))
    }

    /// Whether the datanode answered without edges within the last
    /// `edges_probe_interval` ([`edges_known_missing_at`]).
    fn edges_known_missing(&self) -> bool {
        let probe = u64::try_from(self.edges_probe_interval.as_millis()).unwrap_or(u64::MAX);
        edges_known_missing_at(&self.no_edges_at, since_epoch_ms(), probe)
    }

    /// One ReadChunk, asking for `edges` when given; the bytes and the
    /// edges the datanode answered.
    async fn read_chunk_with(
        &self,
        block: BlockId,
        chunk: &ChunkInfo,
        offset: u64,
        len: u64,
        edges: Option<pb::EdgeChecksumRequest>,
    ) -> Result<(Bytes, Option<checksum::EdgeChecksums>)> {
        let resp = self
            .call(
                RpcKind::ReadChunk,
                Some(block),
                len,
                pb::ReadChunkRequest {
                    block_id: Some(block.into()),
                    chunk: Some(chunk.to_read_wire()),
                    offset,
                    len,
                    edges,
                },
                |mut c, r| async move { c.read_chunk(r).await },
            )
            .await?;
        let got = resp.data.len() as u64;
        self.metrics.record_read(got);
        if got != len {
            return Err(BlockStreamError::ShortRead {
                block,
                datanode: self.address.to_string(),
                offset,
                expected: len,
                got,
            });
        }
        Ok((resp.data, resp.edges.map(checksum::EdgeChecksums::from)))
    }

    /// WriteChunk: appends `data` as `chunk` (whose offset must continue the block).
    ///
    /// # Errors
    /// Result codes (offset mismatch, index mismatch, I/O) and transport failures.
    pub async fn write_chunk(&self, block: BlockId, chunk: ChunkInfo, data: Bytes) -> Result<()> {
        self.write_chunk_from(WriteOrigin::Client, block, chunk, data)
            .await
    }

    /// [`write_chunk`](Self::write_chunk) on behalf of `origin`.
    ///
    /// # Errors
    /// As [`write_chunk`](Self::write_chunk).
    pub async fn write_chunk_from(
        &self,
        origin: WriteOrigin,
        block: BlockId,
        chunk: ChunkInfo,
        data: Bytes,
    ) -> Result<()> {
        let n = data.len() as u64;
        self.call(
            RpcKind::WriteChunk,
            Some(block),
            n,
            pb::WriteChunkRequest {
                block_id: Some(block.into()),
                chunk: Some(chunk.into()),
                data,
                repair: origin == WriteOrigin::Repair,
            },
            |mut c, r| async move { c.write_chunk(r).await },
        )
        .await?;
        self.metrics.record_written(n);
        Ok(())
    }

    /// PutBlock: commits `data` (full chunk list and metadata) as `commit`
    /// says — visible to reads when it returns, and durable too for
    /// [`BlockCommit::Sync`] and [`BlockCommit::Close`] (see `BlockCommit`).
    /// Returns the committed block length in bytes.
    ///
    /// # Errors
    /// Result codes and transport failures.
    pub async fn put_block(&self, data: BlockData, commit: BlockCommit) -> Result<u64> {
        self.put_block_from(WriteOrigin::Client, data, commit).await
    }

    /// [`put_block`](Self::put_block) on behalf of `origin`.
    ///
    /// # Errors
    /// As [`put_block`](Self::put_block).
    pub async fn put_block_from(
        &self,
        origin: WriteOrigin,
        data: BlockData,
        commit: BlockCommit,
    ) -> Result<u64> {
        let block = data.block_id;
        let (eof, sync) = commit.flags();
        let resp = self
            .call(
                RpcKind::PutBlock,
                Some(block),
                0,
                pb::PutBlockRequest {
                    block_data: Some(data.into()),
                    eof,
                    sync,
                    repair: origin == WriteOrigin::Repair,
                },
                |mut c, r| async move { c.put_block(r).await },
            )
            .await?;
        Ok(resp.committed_block_length)
    }

    /// ListBlock: up to `count` committed blocks of `container_id` with local id
    /// at least `start_local_id`, in local-id order.
    ///
    /// # Errors
    /// Result codes (container not found) and transport failures.
    pub async fn list_block(
        &self,
        container_id: u64,
        start_local_id: u64,
        count: u32,
    ) -> Result<Vec<BlockData>> {
        let resp = self
            .call(
                RpcKind::ListBlock,
                None,
                0,
                pb::ListBlockRequest {
                    container_id,
                    start_local_id,
                    count,
                },
                |mut c, r| async move { c.list_block(r).await },
            )
            .await?;
        resp.blocks
            .into_iter()
            .map(|b| BlockData::try_from(b).map_err(|e| self.protocol(e)))
            .collect()
    }

    /// GetCommittedBlockLength: the length recorded at the block's last PutBlock.
    ///
    /// # Errors
    /// Result codes and transport failures.
    pub async fn get_committed_block_length(&self, block: BlockId) -> Result<u64> {
        let resp = self
            .call(
                RpcKind::GetCommittedBlockLength,
                Some(block),
                0,
                pb::GetCommittedBlockLengthRequest {
                    block_id: Some(block.into()),
                },
                |mut c, r| async move { c.get_committed_block_length(r).await },
            )
            .await?;
        Ok(resp.length)
    }

    /// CreateContainer: makes sure the container exists on the datanode
    /// (WriteChunk also creates it on first use, as Ozone does).
    ///
    /// # Errors
    /// Result codes and transport failures.
    pub async fn create_container(&self, container_id: u64) -> Result<()> {
        self.call(
            RpcKind::CreateContainer,
            None,
            0,
            pb::CreateContainerRequest { container_id },
            |mut c, r| async move { c.create_container(r).await },
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_read_probes_when_the_interval_is_over() {
        let mark = AtomicU64::new(0);
        assert!(
            !edges_known_missing_at(&mark, 10, 50),
            "never marked: ask for edges"
        );
        // Marked at 100 ms (stored plus one), a 50 ms interval.
        mark.store(101, Ordering::Relaxed);
        assert!(edges_known_missing_at(&mark, 100, 50));
        assert!(edges_known_missing_at(&mark, 149, 50));
        // At 150 the first caller probes and renews the mark; the callers
        // beside it keep asking for whole windows.
        assert!(!edges_known_missing_at(&mark, 150, 50), "the probe");
        assert_eq!(mark.load(Ordering::Relaxed), 151);
        assert!(edges_known_missing_at(&mark, 150, 50));
        assert!(edges_known_missing_at(&mark, 199, 50));
        assert!(!edges_known_missing_at(&mark, 200, 50), "the next probe");
        // A zero interval probes every time.
        assert!(!edges_known_missing_at(&mark, 200, 0));
        assert!(!edges_known_missing_at(&mark, 200, 0));
    }

    #[tokio::test]
    async fn the_channel_cache_is_bounded_least_recently_used_out() {
        let config = XceiverConfig {
            max_cached_channels: 2,
            ..XceiverConfig::default()
        };
        let m = XceiverClientManager::new(config, Arc::new(ClientMetrics::default()));
        m.client("127.0.0.1:1").expect("client");
        m.client("127.0.0.1:2").expect("client");
        m.client("127.0.0.1:1")
            .expect("touch 1: 2 is now the oldest");
        m.client("127.0.0.1:3").expect("client");
        assert_eq!(m.cached_channels(), 2);
        let cached: Vec<String> = {
            let g = m.clients.lock().expect("lock");
            let mut v: Vec<String> = g.clients.keys().cloned().collect();
            v.sort();
            v
        };
        assert_eq!(cached, ["127.0.0.1:1", "127.0.0.1:3"]);
    }
}
