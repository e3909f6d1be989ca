//! [`Client`]: the facade a user starts from (Ozone's `OzoneClient` /
//! `ObjectStore`, reduced): connect to the om, manage buckets, create, open,
//! list and delete keys, read counters. Each public operation runs in a
//! `debug` tracing span (`client.create_key`, …) naming its arguments and the
//! request id, and records its error.

use std::sync::Arc;

use block_stream::{ClientMetrics, MetricsSnapshot, XceiverClientManager};
use std::collections::BTreeMap;

use proto_crate::{
    BucketInfo, CannedAcl, DatanodeDetails, KeyInfo, MultipartUpload, ReplicationConfig,
    WriteCondition,
};

#[cfg(doc)]
use crate::ClientError;
use crate::ec_output::EcKeyOutputStream;
use crate::key_input::KeyInputStream;
use crate::key_output::KeyOutputStream;
use crate::lease::LeaseKeeper;
use crate::metrics::{EcReadMetrics, EcReadSnapshot};
use crate::om_client::OmClient;
use crate::read_context::ReadContext;
use crate::replicated_output::ReplicatedKeyOutputStream;
use crate::write_state::WriteState;
use crate::{ClientConfig, Result};

/// Most uploads or parts the om returns for one listing call (S3's own page maximum,
/// the om's `MAX_LIST_PAGE`).
pub const LIST_PAGE: u32 = 1000;

/// The request id the caller's task carries (minted by the S3 gateway per
/// request, or set with `proto_crate::request_id::scope`), for spans.
fn request_id() -> String {
    proto_crate::request_id::current().map_or_else(String::new, |id| id.to_string())
}

/// What every stream of a client shares.
#[derive(Debug)]
pub(crate) struct ClientShared {
    pub(crate) om: OmClient,
    pub(crate) read: Arc<ReadContext>,
}

/// A connection to a cluster: the om plus a cache of datanode channels.
/// Cheap to clone; clones share channels and counters.
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<ClientShared>,
}

/// Options of a new bucket; `None` takes the om's defaults
/// (rs-3-2-1024k, 256 MiB blocks).
#[derive(Debug, Clone, Default)]
pub struct BucketOptions {
    /// Replication of keys created without one.
    pub replication: Option<ReplicationConfig>,
    /// Internal block size, bytes; for EC a multiple of the cell size.
    pub block_size: Option<u64>,
    /// The S3 user who owns the bucket (empty: none; only S3 administrators
    /// reach it through the gateway).
    pub owner: String,
    /// Who besides the owner may list the bucket (S3 canned ACL).
    pub acl: CannedAcl,
}

impl Client {
    /// Connects to the om at `om_address` (`HOST:PORT`), or to the first
    /// reachable of several (`HOST:PORT,HOST:PORT,...`, for oms that share
    /// their metadata). Calls then fail over along the list as Ozone's
    /// `OMFailoverProxyProvider` does: a read moves to the next om after
    /// any transport failure (`UNAVAILABLE`), a change only when its
    /// connection was refused (it never left, so it was not applied).
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a malformed or repeated address;
    /// [`ClientError::Connect`] if no om can be reached (naming each
    /// address and why).
    #[tracing::instrument(level = "debug", name = "client.connect", skip(config), err(Display))]
    pub async fn connect(om_address: &str, config: ClientConfig) -> Result<Self> {
        let om =
            OmClient::connect(om_address, config.om_timeout, config.xceiver.tls.as_ref()).await?;
        let metrics = Arc::new(ClientMetrics::default());
        let xceivers = Arc::new(XceiverClientManager::new(config.xceiver.clone(), metrics));
        Ok(Self {
            shared: Arc::new(ClientShared {
                om: om.clone(),
                read: Arc::new(ReadContext {
                    xceivers,
                    config,
                    ec_metrics: Arc::new(EcReadMetrics::default()),
                    om,
                }),
            }),
        })
    }

    /// The client's settings.
    #[must_use]
    pub fn config(&self) -> &ClientConfig {
        &self.shared.read.config
    }

    /// Datanode RPC counters (by kind, by datanode, bytes).
    #[must_use]
    pub fn metrics(&self) -> MetricsSnapshot {
        self.shared.read.xceivers.metrics().snapshot()
    }

    /// EC read-path counters (readers created, failovers, reconstructions).
    #[must_use]
    pub fn ec_metrics(&self) -> EcReadSnapshot {
        self.shared.read.ec_metrics.snapshot()
    }

    /// Datanodes registered with the om.
    ///
    /// # Errors
    /// Om failures.
    pub async fn datanodes(&self) -> Result<Vec<DatanodeDetails>> {
        self.shared.om.list_datanodes().await
    }

    /// Creates a bucket.
    ///
    /// # Errors
    /// [`ClientError::Om`] (`BUCKET_ALREADY_EXISTS`, `INVALID_ARGUMENT`, ...).
    #[tracing::instrument(level = "debug", name = "client.create_bucket", skip(self, options), fields(request_id = %request_id()), err(Display))]
    pub async fn create_bucket(&self, name: &str, options: BucketOptions) -> Result<BucketInfo> {
        self.shared.om.create_bucket(name, &options).await
    }

    /// The bucket `name`.
    ///
    /// # Errors
    /// [`ClientError::BucketNotFound`], om failures.
    pub async fn bucket(&self, name: &str) -> Result<BucketInfo> {
        self.shared.om.get_bucket(name).await
    }

    /// Every bucket, by name, fetched a page of [`LIST_PAGE`] at a time.
    ///
    /// # Errors
    /// Om failures.
    pub async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let mut all: Vec<BucketInfo> = Vec::new();
        loop {
            let after = all.last().map_or("", |b| b.name.as_str());
            let (page, more) = self.list_buckets_page(None, "", after, LIST_PAGE).await?;
            let empty = page.is_empty();
            all.extend(page);
            if !more || empty {
                return Ok(all);
            }
        }
    }

    /// A page of buckets by name: `owner`'s only (S3 user name; `None`: every bucket),
    /// names starting with `prefix` and after `after` (empty: from the start), at most
    /// `max` (the om answers at most [`LIST_PAGE`]; 0: that many). Also whether more
    /// follow. An owner's page costs the om one index range, whatever the number of
    /// buckets (S3's ListBuckets with prefix, continuation-token and max-buckets).
    ///
    /// # Errors
    /// Om failures.
    pub async fn list_buckets_page(
        &self,
        owner: Option<&str>,
        prefix: &str,
        after: &str,
        max: u32,
    ) -> Result<(Vec<BucketInfo>, bool)> {
        self.shared.om.list_buckets(owner, prefix, after, max).await
    }

    /// Replaces bucket `name`'s canned ACL (S3 PutBucketAcl).
    ///
    /// # Errors
    /// [`ClientError::BucketNotFound`], om failures.
    pub async fn set_bucket_acl(&self, name: &str, acl: CannedAcl) -> Result<BucketInfo> {
        self.shared.om.set_bucket_acl(name, acl).await
    }

    /// The user and secret key of S3 access key `access_key`, for the S3
    /// gateway's SigV4 check (the om answers it only to a peer whose client
    /// certificate the cluster CA signed, when it runs with TLS).
    ///
    /// # Errors
    /// [`ClientError::Om`] with `ACCESS_KEY_NOT_FOUND` for an unknown or
    /// revoked key, `PERMISSION_DENIED` without a client certificate under
    /// TLS; om failures.
    pub async fn s3_secret(&self, access_key: &str) -> Result<(String, String)> {
        self.shared.om.s3_secret(access_key).await
    }

    /// Deletes an empty bucket.
    ///
    /// # Errors
    /// [`ClientError::Om`] (`BUCKET_NOT_FOUND`, `BUCKET_NOT_EMPTY`).
    #[tracing::instrument(level = "debug", name = "client.delete_bucket", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn delete_bucket(&self, name: &str) -> Result<()> {
        self.shared.om.delete_bucket(name).await
    }

    /// Opens `bucket/key` for writing with `replication` (or the bucket's
    /// default). Nothing is visible until the stream is closed.
    ///
    /// # Errors
    /// [`ClientError::BucketNotFound`]; [`ClientError::InvalidArgument`] for
    /// an EC block size that is not a multiple of the cell size.
    #[tracing::instrument(level = "debug", name = "client.create_key", skip(self, replication), fields(request_id = %request_id()), err(Display))]
    pub async fn create_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<KeyOutputStream> {
        let opened = self.shared.om.open_key(bucket, key, replication).await?;
        self.writer(bucket, key, opened).await
    }

    /// Starts a multipart upload of `bucket/key` (replication as for
    /// [`create_key`](Self::create_key)); `metadata` goes to the key at completion.
    ///
    /// # Errors
    /// [`ClientError::BucketNotFound`], om failures.
    #[tracing::instrument(level = "debug", name = "client.initiate_multipart_upload", skip(self, replication, metadata), fields(request_id = %request_id()), err(Display))]
    pub async fn initiate_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        metadata: BTreeMap<String, String>,
    ) -> Result<String> {
        self.shared
            .om
            .initiate_multipart_upload(bucket, key, replication, metadata)
            .await
    }

    /// A writer for part `part_number` (1..=10000) of an upload; finish it
    /// with [`KeyOutputStream::close_part`]. Re-uploading a part number
    /// replaces it.
    ///
    /// # Errors
    /// [`ClientError::Om`] (`NO_SUCH_UPLOAD`, `INVALID_ARGUMENT`).
    #[tracing::instrument(level = "debug", name = "client.upload_part", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn upload_part(&self, upload_id: &str, part_number: u32) -> Result<KeyOutputStream> {
        let (upload, _) = self.shared.om.list_parts(upload_id, 0, 0).await?;
        let opened = self.shared.om.open_part(upload_id, part_number).await?;
        self.writer(&upload.bucket, &upload.key, opened).await
    }

    /// The upload `upload_id` without its parts (`parts` empty): its bucket, key,
    /// replication, initiation time and metadata. One call, whatever the number of parts.
    ///
    /// # Errors
    /// [`ClientError::Om`] (`NO_SUCH_UPLOAD`).
    pub async fn multipart_upload(&self, upload_id: &str) -> Result<MultipartUpload> {
        Ok(self.shared.om.list_parts(upload_id, 0, 0).await?.0)
    }

    /// The upload `upload_id` with all its parts in part-number order (at most
    /// 10,000), fetched a page of [`LIST_PAGE`] parts at a time.
    ///
    /// # Errors
    /// [`ClientError::Om`] (`NO_SUCH_UPLOAD`).
    pub async fn list_parts(&self, upload_id: &str) -> Result<MultipartUpload> {
        let (mut upload, mut more) = self.list_parts_page(upload_id, 0, LIST_PAGE).await?;
        while more {
            let after = upload.parts.last().map_or(0, |p| p.part_number);
            let (page, next) = self.list_parts_page(upload_id, after, LIST_PAGE).await?;
            if page.parts.is_empty() {
                break;
            }
            upload.parts.extend(page.parts);
            more = next;
        }
        Ok(upload)
    }

    /// The upload `upload_id` with its parts numbered above `after`, at most `max` of them
    /// (the om answers at most [`LIST_PAGE`]; 0: none), and whether more follow (S3's
    /// ListParts with part-number-marker and max-parts).
    ///
    /// # Errors
    /// [`ClientError::Om`] (`NO_SUCH_UPLOAD`).
    pub async fn list_parts_page(
        &self,
        upload_id: &str,
        after: u32,
        max: u32,
    ) -> Result<(MultipartUpload, bool)> {
        self.shared.om.list_parts(upload_id, after, max).await
    }

    /// Every upload in progress in `bucket` for keys starting with `prefix` (parts left
    /// out), by key then initiation time, fetched a page of [`LIST_PAGE`] at a time.
    ///
    /// # Errors
    /// [`ClientError::BucketNotFound`], om failures.
    pub async fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<MultipartUpload>> {
        let mut all: Vec<MultipartUpload> = Vec::new();
        loop {
            // After the last upload got, by its time too: it may complete meanwhile.
            let (key, id, ms) = all.last().map_or(("", "", 0), |u| {
                (u.key.as_str(), u.upload_id.as_str(), u.initiated_unix_ms)
            });
            let (page, more) = self
                .list_multipart_uploads_page(bucket, prefix, (key, id, ms), LIST_PAGE)
                .await?;
            let empty = page.is_empty();
            all.extend(page);
            if !more || empty {
                return Ok(all);
            }
        }
    }

    /// A page of uploads in progress in `bucket` for keys starting with `prefix`, by key
    /// then initiation time (S3's ListMultipartUploads), after `marker` = (key marker,
    /// upload id marker, that upload's initiation time in ms since the Unix epoch): after
    /// every upload of the key marker (empty: from the start), or, with an upload id, right
    /// after that upload of the key marker. Give the time when known (the last upload of
    /// the previous page): without it (0) the om looks the upload up, and resumes after
    /// every upload of its key if it has completed or been aborted since (S3's markers
    /// carry no time). At most `max` (the om answers at most [`LIST_PAGE`]; 0: that many).
    /// Also whether more follow.
    ///
    /// # Errors
    /// [`ClientError::BucketNotFound`], om failures.
    pub async fn list_multipart_uploads_page(
        &self,
        bucket: &str,
        prefix: &str,
        marker: (&str, &str, u64),
        max: u32,
    ) -> Result<(Vec<MultipartUpload>, bool)> {
        self.shared
            .om
            .list_multipart_uploads(bucket, prefix, marker, max)
            .await
    }

    /// Completes an upload from `parts` ((part number, ETag), ascending): the
    /// key appears with the parts' block groups, no data copied.
    ///
    /// # Errors
    /// [`ClientError::Om`] with `INVALID_PART`, `INVALID_PART_ORDER`,
    /// `ENTITY_TOO_SMALL` (a non-last part under `min_part_size` bytes) or
    /// `NO_SUCH_UPLOAD`.
    pub async fn complete_multipart_upload(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        self.complete_multipart_upload_if(upload_id, parts, min_part_size, metadata, None)
            .await
    }

    /// [`complete_multipart_upload`](Self::complete_multipart_upload), provided `condition`
    /// (if any) holds for the key when the om commits (checked in the same transaction; the
    /// upload stays when it does not).
    ///
    /// # Errors
    /// As `complete_multipart_upload`; [`ClientError::Om`] with `CONDITION_FAILED`
    /// ([`ClientError::is_condition_failed`]).
    #[tracing::instrument(level = "debug", name = "client.complete_multipart_upload", skip(self, parts, metadata), fields(request_id = %request_id(), parts = parts.len()), err(Display))]
    pub async fn complete_multipart_upload_if(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        self.shared
            .om
            .complete_multipart_upload(upload_id, parts, min_part_size, metadata, condition)
            .await
    }

    /// Abandons an upload and its parts.
    ///
    /// # Errors
    /// [`ClientError::Om`] (`NO_SUCH_UPLOAD`).
    #[tracing::instrument(level = "debug", name = "client.abort_multipart_upload", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn abort_multipart_upload(&self, upload_id: &str) -> Result<()> {
        self.shared.om.abort_multipart_upload(upload_id).await
    }

    async fn writer(
        &self,
        bucket: &str,
        key: &str,
        opened: crate::session::OpenedKey,
    ) -> Result<KeyOutputStream> {
        // A session is a row of the om's metadata store: its calls go to
        // whichever om serves, failing over as any call does.
        let lease = LeaseKeeper::start(self.shared.om.clone(), opened.session_id, opened.lease);
        let shared = Arc::clone(&self.shared);
        // From here the writer's state owns the session: dropping the
        // writer, or a failed close, aborts it.
        let state = WriteState::new(bucket, key, opened.session_id, opened.guard);
        let name = format!("{bucket}/{key}");
        match opened.replication {
            ReplicationConfig::Ec(ec) => {
                EcKeyOutputStream::new(Arc::clone(&shared), state, ec, opened.block_size, lease)
                    .map(|w| KeyOutputStream::ec(name, w))
            }
            ReplicationConfig::Replicated { .. } => {
                ReplicatedKeyOutputStream::new(shared, state, opened.block_size, lease)
                    .map(|w| KeyOutputStream::replicated(name, w))
            }
        }
    }

    /// Writes `data` as `bucket/key` in one call and commits it.
    ///
    /// # Errors
    /// As [`create_key`](Self::create_key) and the stream's write and close.
    #[tracing::instrument(level = "debug", name = "client.put_key", skip(self, replication, data), fields(request_id = %request_id(), len = data.len()), err(Display))]
    pub async fn put_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        data: &[u8],
    ) -> Result<KeyInfo> {
        let mut w = self.create_key(bucket, key, replication).await?;
        w.write(data).await?;
        w.close().await
    }

    /// Opens `bucket/key` for reading: one om lookup, no datanode RPC.
    ///
    /// # Errors
    /// [`ClientError::KeyNotFound`], om failures.
    #[tracing::instrument(level = "debug", name = "client.open_key", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn open_key(&self, bucket: &str, key: &str) -> Result<KeyInputStream> {
        let info = self.shared.om.lookup_key(bucket, key).await?;
        KeyInputStream::open(&self.shared.read, info)
    }

    /// The committed metadata of `bucket/key`.
    ///
    /// # Errors
    /// [`ClientError::KeyNotFound`], om failures.
    #[tracing::instrument(level = "debug", name = "client.key_info", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn key_info(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        self.shared.om.lookup_key(bucket, key).await
    }

    /// Keys of `bucket` whose names start with `prefix`, after `start_after`,
    /// at most `max_keys` (0 = all), in name order.
    ///
    /// # Errors
    /// Om failures (`BUCKET_NOT_FOUND`).
    #[tracing::instrument(level = "debug", name = "client.list_keys", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: u32,
    ) -> Result<Vec<KeyInfo>> {
        self.shared
            .om
            .list_keys(bucket, prefix, start_after, max_keys)
            .await
    }

    /// One page of `bucket`'s keys under `prefix` strictly after `after`, rolled up into
    /// common prefixes at `delimiter` (`None` or empty: no roll-up), at most `max` entries
    /// (objects and prefixes together), as S3's ListObjectsV2 pages (see
    /// [`listing::list_page`](crate::listing::list_page)). Keys are fetched from the om in
    /// batches of `max + 1` clamped to 100..=1000, and a common prefix is stepped over in one
    /// fetch, so a page costs O(`max` + prefixes) keys, not every key under a prefix.
    ///
    /// # Errors
    /// Om failures (`BUCKET_NOT_FOUND`).
    #[tracing::instrument(level = "debug", name = "client.list_page", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn list_page(
        &self,
        bucket: &str,
        prefix: &str,
        delimiter: Option<&str>,
        after: &str,
        max: usize,
    ) -> Result<crate::listing::Page<KeyInfo>> {
        let batch = u32::try_from(max.saturating_add(1).clamp(100, 1000)).unwrap_or(1000);
        crate::listing::list_page(
            |cursor: String, n: u32| async move {
                self.shared.om.list_keys(bucket, prefix, &cursor, n).await
            },
            prefix,
            delimiter,
            after,
            max,
            batch,
        )
        .await
    }

    /// Deletes `bucket/key`.
    ///
    /// # Errors
    /// [`ClientError::KeyNotFound`], om failures.
    #[tracing::instrument(level = "debug", name = "client.delete_key", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn delete_key(&self, bucket: &str, key: &str) -> Result<()> {
        self.shared.om.delete_key(bucket, key, None).await
    }

    /// Replaces the metadata entries of `bucket/key` whose names start with `prefix` by
    /// `entries` (each inside the prefix), atomically in the om; the key's data, length and
    /// generation stay (the S3 gateway keeps object tags this way). Returns the key.
    ///
    /// # Errors
    /// [`ClientError::KeyNotFound`]; [`ClientError::Om`] with `INVALID_ARGUMENT` for an entry
    /// outside the prefix; om failures.
    #[tracing::instrument(level = "debug", name = "client.set_key_metadata", skip(self, entries), fields(request_id = %request_id()), err(Display))]
    pub async fn set_key_metadata(
        &self,
        bucket: &str,
        key: &str,
        prefix: &str,
        entries: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        self.shared
            .om
            .set_key_metadata(bucket, key, prefix, entries)
            .await
    }

    /// Renames `bucket/from` to `bucket/to` in one om transaction (Ozone's `ozone sh key
    /// rename`): no data is copied, the key gets a new generation, and a key already at `to`
    /// is replaced (its blocks are reclaimed). Returns the key under its new name.
    ///
    /// # Errors
    /// [`ClientError::KeyNotFound`] for a missing `from`; [`ClientError::Om`] with
    /// `INVALID_ARGUMENT` for a bad name; om failures.
    #[tracing::instrument(level = "debug", name = "client.rename_key", skip(self), fields(request_id = %request_id()), err(Display))]
    pub async fn rename_key(&self, bucket: &str, from: &str, to: &str) -> Result<KeyInfo> {
        self.shared.om.rename_key(bucket, from, to, None).await
    }

    /// [`rename_key`](Self::rename_key), provided `condition` holds for `bucket/to` in the
    /// rename's transaction (`WriteCondition::NotExists`: rename only if nothing is there).
    ///
    /// # Errors
    /// As `rename_key`; [`ClientError::Om`] with `CONDITION_FAILED`
    /// ([`ClientError::is_condition_failed`]).
    #[tracing::instrument(level = "debug", name = "client.rename_key", skip(self, condition), fields(request_id = %request_id()), err(Display))]
    pub async fn rename_key_if(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        condition: WriteCondition,
    ) -> Result<KeyInfo> {
        self.shared
            .om
            .rename_key(bucket, from, to, Some(condition))
            .await
    }

    /// Deletes `bucket/key` provided `condition` holds for it in the om's deletion
    /// transaction (S3's DeleteObject `If-Match`).
    ///
    /// # Errors
    /// [`ClientError::KeyNotFound`]; [`ClientError::Om`] with `CONDITION_FAILED`
    /// ([`ClientError::is_condition_failed`]); om failures.
    #[tracing::instrument(level = "debug", name = "client.delete_key", skip(self, condition), fields(request_id = %request_id()), err(Display))]
    pub async fn delete_key_if(
        &self,
        bucket: &str,
        key: &str,
        condition: WriteCondition,
    ) -> Result<()> {
        self.shared
            .om
            .delete_key(bucket, key, Some(condition))
            .await
    }
}
