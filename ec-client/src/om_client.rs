//! Typed calls to the om over gRPC, each bounded by the om deadline.

use proto_crate::block_token::BlockToken;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proto_crate::request_id;
use proto_crate::wire::om as pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use proto_crate::{
    BlockGroup, BucketInfo, DatanodeDetails, DatanodeId, KeyInfo, MultipartUpload, OmErrorCode,
    PartInfo, ProtocolError, ReplicationConfig, WriteCondition,
};
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::session::{OpenedKey, SessionGrant, Undo, guarded, open_guarded};
use crate::{ClientError, Result};

/// The om's gRPC client stub, with the request id attached to every call.
type Stub = OzoneManagerServiceClient<InterceptedService<Channel, request_id::Attach>>;

/// A connected om client (Ozone's `OzoneManagerProtocolClientSideTranslatorPB`,
/// reduced) over one or more om addresses, with failover between them as
/// Ozone's `OMFailoverProxyProvider` does: calls go to the om that last
/// answered, and move on to the next address in the list when a call could
/// not reach it (see [`Resend`]).
#[derive(Debug, Clone)]
pub(crate) struct OmClient {
    /// One stub per om address, in the order given. Every call carries the
    /// current request id ([`request_id::attach`]).
    oms: Arc<[(String, Stub)]>,
    /// Index into `oms` of the om calls go to first: the last one that
    /// answered. Shared by clones.
    current: Arc<AtomicUsize>,
    timeout: Duration,
    /// Random per connected client: the om bounds the sessions one client
    /// holds open by this id.
    client_id: String,
}

/// When a failed call is sent again to the next om address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// A read (or a token mint): after any failure that is not an om's
    /// answer (see [`OmErrorCode::Unavailable`]), since sending it twice
    /// changes nothing.
    Read,
    /// A change: only when no connection could be made, so the call never
    /// left; after a failure mid-call the om may have applied it, and the
    /// caller sees the error.
    IfNotSent,
}

/// Whether `status` says the call never reached the om: no connection
/// could be made ([`proto_crate::transport::never_sent`]).
fn not_sent(status: &Status) -> bool {
    proto_crate::transport::never_sent(status)
}

/// Whether a call that failed with `status` goes to the next om: one that
/// never left, or a read that got no answer (a transport failure without an
/// om error code: `UNAVAILABLE`, or a connection lost mid-call, which tonic
/// reports as `UNKNOWN` or `CANCELLED`).
fn resend(status: &Status, how: Resend) -> bool {
    not_sent(status) || (how == Resend::Read && OmErrorCode::of(status) == OmErrorCode::Unavailable)
}

/// How a writer's om session ends.
#[derive(Debug, Clone)]
pub(crate) enum Commit {
    /// As a key, with object metadata, provided the condition (if any) holds.
    Key(BTreeMap<String, String>, Option<WriteCondition>),
    /// As a part of a multipart upload, with the part's ETag and metadata.
    Part {
        /// Hex MD5 of the part's bytes.
        etag: String,
        /// Part metadata.
        metadata: BTreeMap<String, String>,
    },
}

/// What a writer committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// A key, now visible.
    Key(KeyInfo),
    /// A part of a multipart upload.
    Part(PartInfo),
}

impl Committed {
    /// The key, or an error if a part was committed.
    pub(crate) fn into_key(self) -> Result<KeyInfo> {
        match self {
            Self::Key(k) => Ok(k),
            Self::Part(_) => Err(ClientError::InvalidArgument(
                "a key commit returned a part".into(),
            )),
        }
    }

    /// The part, or an error if a key was committed.
    pub(crate) fn into_part(self) -> Result<PartInfo> {
        match self {
            Self::Part(p) => Ok(p),
            Self::Key(_) => Err(ClientError::InvalidArgument(
                "a part commit returned a key".into(),
            )),
        }
    }
}

fn bucket_not_found(e: ClientError, bucket: &str) -> ClientError {
    match e {
        ClientError::Om {
            code: OmErrorCode::BucketNotFound,
            ..
        } => ClientError::BucketNotFound(bucket.to_string()),
        e => e,
    }
}

fn key_not_found(e: ClientError, bucket: &str, key: &str) -> ClientError {
    match e {
        ClientError::Om {
            code: OmErrorCode::KeyNotFound,
            ..
        } => ClientError::KeyNotFound {
            bucket: bucket.to_string(),
            key: key.to_string(),
        },
        e => e,
    }
}

fn om_error(op: &'static str, s: &Status) -> ClientError {
    let code = OmErrorCode::of(s);
    let message = if code == OmErrorCode::Unspecified || code == OmErrorCode::Unavailable {
        // No om code, or a transport failure: keep the gRPC code in view.
        format!("{:?}: {}", s.code(), s.message())
    } else {
        s.message().to_string()
    };
    ClientError::Om { op, code, message }
}

/// An error and its sources as one line (`a: b: c`), each message once.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

impl OmClient {
    /// Connects to the oms at `addresses` (comma-separated `HOST:PORT`s):
    /// to the first that accepts a connection, in order; the others are
    /// connected when a call first fails over to them.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a malformed or repeated address;
    /// [`ClientError::Connect`] naming every address and why it failed if
    /// none accepts a connection.
    pub(crate) async fn connect(
        addresses: &str,
        timeout: Duration,
        tls: Option<&proto_crate::tls::TlsConfig>,
    ) -> Result<Self> {
        let addresses = proto_crate::address::parse_list(addresses)
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let stub = |channel| {
            OzoneManagerServiceClient::with_interceptor(
                channel,
                request_id::attach as request_id::Attach,
            )
            .max_decoding_message_size(64 * 1024 * 1024)
        };
        let mut oms = Vec::with_capacity(addresses.len());
        let mut failures = Vec::new();
        let mut current = None;
        for address in addresses {
            let endpoint = proto_crate::tls::endpoint(&address, tls)
                .map_err(|e| ClientError::Connect {
                    address: address.clone(),
                    message: e.to_string(),
                })?
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true);
            let channel = if current.is_some() {
                endpoint.connect_lazy()
            } else {
                match endpoint.connect().await {
                    Ok(channel) => {
                        current = Some(oms.len());
                        channel
                    }
                    Err(e) => {
                        failures.push((address.clone(), error_chain(&e)));
                        endpoint.connect_lazy()
                    }
                }
            };
            oms.push((address, stub(channel)));
        }
        let Some(current) = current else {
            return Err(ClientError::Connect {
                address: oms
                    .iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                message: match failures.as_slice() {
                    [(_, why)] => why.clone(),
                    all => all
                        .iter()
                        .map(|(a, why)| format!("{a}: {why}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                },
            });
        };
        let id: u128 = rand::random();
        Ok(Self {
            oms: oms.into(),
            current: Arc::new(AtomicUsize::new(current)),
            timeout,
            client_id: format!("{id:032x}"),
        })
    }

    /// A client of om `i` alone (no failover), for the calls of a session
    /// that om granted: open-key sessions live in the memory of the om that
    /// opened them.
    fn pinned(&self, i: usize) -> OmClient {
        let one: Vec<(String, Stub)> = self.oms.get(i).cloned().into_iter().collect();
        let oms: Arc<[(String, Stub)]> = if one.is_empty() {
            Arc::clone(&self.oms)
        } else {
            one.into()
        };
        Self {
            oms,
            current: Arc::new(AtomicUsize::new(0)),
            timeout: self.timeout,
            client_id: self.client_id.clone(),
        }
    }

    /// Whether this client has more than one om address.
    pub(crate) fn fails_over(&self) -> bool {
        self.oms.len() > 1
    }

    /// Sends `req` with `send` to the current om, and on to the next
    /// addresses in turn while it fails as `how` allows, all within the om
    /// deadline. The om that answered (even with an error) becomes the
    /// current one.
    ///
    /// A read also moves on from an om that does not answer: with `n`
    /// addresses, once an om has had `deadline / n` without answering the
    /// read is sent to the next one as well, and the first answer from any
    /// of them wins (a read sent twice changes nothing). A hung om (a stopped
    /// process, a host gone without a reset) then costs a share of the
    /// deadline, and a slow one still answers if it is first. A change
    /// waits for its om until the deadline: it may have been applied there.
    async fn call<Q, T, F, Fut>(&self, op: &'static str, how: Resend, req: Q, send: F) -> Result<T>
    where
        Q: Clone,
        F: Fn(Stub, Q) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        Ok(self.call_at(op, how, req, send).await?.0)
    }

    /// [`call`](Self::call), also returning the index of the om that answered.
    async fn call_at<Q, T, F, Fut>(
        &self,
        op: &'static str,
        how: Resend,
        req: Q,
        send: F,
    ) -> Result<(T, usize)>
    where
        Q: Clone,
        F: Fn(Stub, Q) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        use futures::stream::{FuturesUnordered, StreamExt};
        let deadline = tokio::time::Instant::now() + self.timeout;
        let n = self.oms.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let share = self.timeout / u32::try_from(n).unwrap_or(u32::MAX);
        let hedges = how == Resend::Read && n > 1;
        let address = |i: usize| self.oms.get(i).map_or("?", |(a, _)| a.as_str());
        let launch = |i: usize| {
            let answer = self
                .oms
                .get(i)
                .map(|(_, stub)| send(stub.clone(), req.clone()));
            async move {
                match answer {
                    Some(a) => (i, a.await),
                    None => (i, Err(Status::internal("no such om index"))),
                }
            }
        };
        let mut inflight = FuturesUnordered::new();
        inflight.push(launch(first));
        // How many oms the call has been sent to (in list order from `first`).
        let mut sent = 1;
        let mut hedge_at = tokio::time::Instant::now() + share;
        let mut failed: Vec<String> = Vec::new();
        let last = loop {
            let wake = if hedges && sent < n {
                hedge_at.min(deadline)
            } else {
                deadline
            };
            tokio::select! {
                Some((i, answer)) = inflight.next() => match answer {
                    Ok(r) => return Ok((self.answered(op, i, first, r.into_inner()), i)),
                    Err(s) if n > 1 && resend(&s, how) => {
                        tracing::debug!(op, om = %address(i), "om unreachable: {}", s.message());
                        failed.push(format!("{}: {}", address(i), s.message()));
                        if sent < n {
                            inflight.push(launch((first + sent) % n));
                            sent += 1;
                            hedge_at = tokio::time::Instant::now() + share;
                        } else if inflight.is_empty() {
                            break s;
                        }
                    }
                    Err(s) => return Err(om_error(op, &self.answered(op, i, first, s))),
                },
                () = tokio::time::sleep_until(wake) => {
                    if wake >= deadline {
                        return Err(ClientError::OmTimeout {
                            op,
                            after: self.timeout,
                        });
                    }
                    // The om asked last is slow: ask the next one as well,
                    // still listening for the first.
                    let slow = (first + sent - 1) % n;
                    tracing::debug!(op, om = %address(slow), "om gave no answer within {share:?}");
                    failed.push(format!("{}: no answer within {share:?}", address(slow)));
                    inflight.push(launch((first + sent) % n));
                    sent += 1;
                    hedge_at = tokio::time::Instant::now() + share;
                }
            }
        };
        // Every om failed: name each and why.
        let mut e = om_error(op, &last);
        if let ClientError::Om { message, .. } = &mut e {
            *message = format!("no om answered ({})", failed.join("; "));
        }
        Err(e)
    }

    /// Makes om `i`, which answered (even with an error), the current one
    /// when it is not already; passes `answer` through.
    fn answered<A>(&self, op: &'static str, i: usize, first: usize, answer: A) -> A {
        if i != first {
            self.current.store(i, Ordering::Relaxed);
            let om = self.oms.get(i).map_or("?", |(a, _)| a.as_str());
            tracing::info!(op, om = %om, "failed over to om");
        }
        answer
    }

    pub(crate) async fn list_datanodes(&self) -> Result<Vec<DatanodeDetails>> {
        let r = self
            .call(
                "ListDatanodes",
                Resend::Read,
                pb::ListDatanodesRequest {},
                |mut c, r| async move { c.list_datanodes(r).await },
            )
            .await?;
        Ok(r.datanodes
            .into_iter()
            .map(DatanodeDetails::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn create_bucket(
        &self,
        name: &str,
        options: &crate::BucketOptions,
    ) -> Result<BucketInfo> {
        let r = self
            .call(
                "CreateBucket",
                Resend::IfNotSent,
                pb::CreateBucketRequest {
                    name: name.to_string(),
                    default_replication: options
                        .replication
                        .map(|r| r.to_string())
                        .unwrap_or_default(),
                    block_size: options.block_size.unwrap_or(0),
                    owner: options.owner.clone(),
                    acl: options.acl.name().to_string(),
                },
                |mut c, r| async move { c.create_bucket(r).await },
            )
            .await?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn set_bucket_acl(
        &self,
        name: &str,
        acl: proto_crate::CannedAcl,
    ) -> Result<BucketInfo> {
        let r = self
            .call(
                "SetBucketAcl",
                Resend::IfNotSent,
                pb::SetBucketAclRequest {
                    name: name.to_string(),
                    acl: acl.name().to_string(),
                },
                |mut c, r| async move { c.set_bucket_acl(r).await },
            )
            .await
            .map_err(|e| bucket_not_found(e, name))?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn s3_secret(&self, access_key: &str) -> Result<(String, String)> {
        let r = self
            .call(
                "GetS3Secret",
                Resend::Read,
                pb::GetS3SecretRequest {
                    access_key: access_key.to_string(),
                },
                |mut c, r| async move { c.get_s3_secret(r).await },
            )
            .await?;
        Ok((r.user, r.secret_key))
    }

    pub(crate) async fn get_bucket(&self, name: &str) -> Result<BucketInfo> {
        let r = self
            .call(
                "GetBucket",
                Resend::Read,
                pb::GetBucketRequest {
                    name: name.to_string(),
                },
                |mut c, r| async move { c.get_bucket(r).await },
            )
            .await
            .map_err(|e| bucket_not_found(e, name))?;
        Ok(r.bucket
            .ok_or(ProtocolError::MissingField("bucket"))?
            .try_into()?)
    }

    pub(crate) async fn list_buckets(&self) -> Result<Vec<BucketInfo>> {
        let r = self
            .call(
                "ListBuckets",
                Resend::Read,
                pb::ListBucketsRequest {},
                |mut c, r| async move { c.list_buckets(r).await },
            )
            .await?;
        Ok(r.buckets
            .into_iter()
            .map(BucketInfo::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn delete_bucket(&self, name: &str) -> Result<()> {
        self.call(
            "DeleteBucket",
            Resend::IfNotSent,
            pb::DeleteBucketRequest {
                name: name.to_string(),
            },
            |mut c, r| async move { c.delete_bucket(r).await },
        )
        .await?;
        Ok(())
    }

    /// Opens a session writing `bucket/key` (see [`open_guarded`]: a
    /// caller cancelled mid-call aborts the session instead of leaking it).
    pub(crate) async fn open_key(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
    ) -> Result<OpenedKey> {
        let this = self.clone();
        let req = pb::OpenKeyRequest {
            bucket: bucket.to_string(),
            key: key.to_string(),
            replication: replication.map(|r| r.to_string()).unwrap_or_default(),
            client_id: self.client_id.clone(),
        };
        let bucket = bucket.to_string();
        open_guarded(self, async move {
            let (r, om) = this
                .call_at("OpenKey", Resend::IfNotSent, req, |mut c, r| async move {
                    c.open_key(r).await
                })
                .await
                .map_err(|e| bucket_not_found(e, &bucket))?;
            Ok(SessionGrant {
                session_id: r.session_id,
                replication: r.replication,
                block_size: r.block_size,
                lease_ms: r.lease_ms,
                om: this.pinned(om),
            })
        })
        .await
    }

    pub(crate) async fn allocate_block_group(
        &self,
        session_id: u64,
        exclude: Vec<DatanodeId>,
    ) -> Result<BlockGroup> {
        let r = self
            .call(
                "AllocateBlockGroup",
                Resend::IfNotSent,
                pb::AllocateBlockGroupRequest {
                    session_id,
                    exclude_datanodes: exclude.into_iter().map(String::from).collect(),
                },
                |mut c, r| async move { c.allocate_block_group(r).await },
            )
            .await?;
        Ok(r.block_group
            .ok_or(ProtocolError::MissingField("block_group"))?
            .try_into()?)
    }

    /// Ends a writer's session: commits the key (with metadata) or the part
    /// (with its ETag).
    pub(crate) async fn commit(
        &self,
        session_id: u64,
        groups: Vec<BlockGroup>,
        length: u64,
        commit: Commit,
    ) -> Result<Committed> {
        let block_groups = groups.into_iter().map(Into::into).collect();
        match commit {
            Commit::Key(metadata, condition) => {
                let r = self
                    .call(
                        "CommitKey",
                        Resend::IfNotSent,
                        pb::CommitKeyRequest {
                            session_id,
                            block_groups,
                            length,
                            metadata: metadata.into_iter().collect(),
                            condition: condition.map(Into::into),
                        },
                        |mut c, r| async move { c.commit_key(r).await },
                    )
                    .await?;
                Ok(Committed::Key(
                    r.key
                        .ok_or(ProtocolError::MissingField("key"))?
                        .try_into()?,
                ))
            }
            Commit::Part { etag, metadata } => {
                let r = self
                    .call(
                        "CommitPart",
                        Resend::IfNotSent,
                        pb::CommitPartRequest {
                            session_id,
                            block_groups,
                            length,
                            etag,
                            metadata: metadata.into_iter().collect(),
                        },
                        |mut c, r| async move { c.commit_part(r).await },
                    )
                    .await?;
                Ok(Committed::Part(
                    r.part
                        .ok_or(ProtocolError::MissingField("part"))?
                        .try_into()?,
                ))
            }
        }
    }

    /// Starts a multipart upload, guarded like [`open_key`](Self::open_key):
    /// a caller cancelled mid-call aborts the upload instead of leaving one
    /// whose id it never learnt (and that keeps its bucket from deletion).
    pub(crate) async fn initiate_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        replication: Option<ReplicationConfig>,
        metadata: BTreeMap<String, String>,
    ) -> Result<String> {
        let this = self.clone();
        let req = pb::InitiateMultipartUploadRequest {
            bucket: bucket.to_string(),
            key: key.to_string(),
            replication: replication.map(|r| r.to_string()).unwrap_or_default(),
            metadata: metadata.into_iter().collect(),
        };
        let bucket = bucket.to_string();
        let (id, guard) = guarded(self, async move {
            let r = this
                .call(
                    "InitiateMultipartUpload",
                    Resend::IfNotSent,
                    req,
                    |mut c, r| async move { c.initiate_multipart_upload(r).await },
                )
                .await
                .map_err(|e| bucket_not_found(e, &bucket))?;
            let undo = Undo::Upload(r.upload_id.clone());
            Ok((r.upload_id, undo))
        })
        .await?;
        guard.disarm();
        Ok(id)
    }

    /// Opens a session writing part `part_number` of `upload_id` (guarded
    /// as [`open_key`](Self::open_key)).
    pub(crate) async fn open_part(&self, upload_id: &str, part_number: u32) -> Result<OpenedKey> {
        let this = self.clone();
        let req = pb::OpenPartRequest {
            upload_id: upload_id.to_string(),
            part_number,
            client_id: self.client_id.clone(),
        };
        open_guarded(self, async move {
            let (r, om) = this
                .call_at("OpenPart", Resend::IfNotSent, req, |mut c, r| async move {
                    c.open_part(r).await
                })
                .await?;
            Ok(SessionGrant {
                session_id: r.session_id,
                replication: r.replication,
                block_size: r.block_size,
                lease_ms: r.lease_ms,
                om: this.pinned(om),
            })
        })
        .await
    }

    pub(crate) async fn list_parts(&self, upload_id: &str) -> Result<MultipartUpload> {
        let r = self
            .call(
                "ListParts",
                Resend::Read,
                pb::ListPartsRequest {
                    upload_id: upload_id.to_string(),
                },
                |mut c, r| async move { c.list_parts(r).await },
            )
            .await?;
        Ok(r.upload
            .ok_or(ProtocolError::MissingField("upload"))?
            .try_into()?)
    }

    pub(crate) async fn list_multipart_uploads(
        &self,
        bucket: &str,
        prefix: &str,
    ) -> Result<Vec<MultipartUpload>> {
        let r = self
            .call(
                "ListMultipartUploads",
                Resend::Read,
                pb::ListMultipartUploadsRequest {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                },
                |mut c, r| async move { c.list_multipart_uploads(r).await },
            )
            .await
            .map_err(|e| bucket_not_found(e, bucket))?;
        Ok(r.uploads
            .into_iter()
            .map(MultipartUpload::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn complete_multipart_upload(
        &self,
        upload_id: &str,
        parts: &[(u32, String)],
        min_part_size: u64,
        metadata: BTreeMap<String, String>,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        let r = self
            .call(
                "CompleteMultipartUpload",
                Resend::IfNotSent,
                pb::CompleteMultipartUploadRequest {
                    upload_id: upload_id.to_string(),
                    parts: parts
                        .iter()
                        .map(|(n, e)| pb::CompletedPart {
                            part_number: *n,
                            etag: e.clone(),
                        })
                        .collect(),
                    min_part_size,
                    metadata: metadata.into_iter().collect(),
                    condition: condition.map(Into::into),
                },
                |mut c, r| async move { c.complete_multipart_upload(r).await },
            )
            .await?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn abort_multipart_upload(&self, upload_id: &str) -> Result<()> {
        self.call(
            "AbortMultipartUpload",
            Resend::IfNotSent,
            pb::AbortMultipartUploadRequest {
                upload_id: upload_id.to_string(),
            },
            |mut c, r| async move { c.abort_multipart_upload(r).await },
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn abort_key(&self, session_id: u64) -> Result<()> {
        self.call(
            "AbortKey",
            Resend::IfNotSent,
            pb::AbortKeyRequest { session_id },
            |mut c, r| async move { c.abort_key(r).await },
        )
        .await?;
        Ok(())
    }

    pub(crate) async fn renew_key(&self, session_id: u64) -> Result<()> {
        self.call(
            "RenewKey",
            Resend::IfNotSent,
            pb::RenewKeyRequest { session_id },
            |mut c, r| async move { c.renew_key(r).await },
        )
        .await?;
        Ok(())
    }

    /// A fresh block token of group `container_id:local_id` for `owner`
    /// (the om's `GetBlockToken`); `None` when the om runs without security.
    pub(crate) async fn get_block_token(
        &self,
        owner: pb::get_block_token_request::Owner,
        container_id: u64,
        local_id: u64,
    ) -> Result<Option<BlockToken>> {
        let r = self
            .call(
                "GetBlockToken",
                Resend::Read,
                pb::GetBlockTokenRequest {
                    owner: Some(owner),
                    container_id,
                    local_id,
                },
                |mut c, r| async move { c.get_block_token(r).await },
            )
            .await?;
        Ok((!r.token.is_empty()).then(|| BlockToken::from_bytes(r.token)))
    }

    pub(crate) async fn lookup_key(&self, bucket: &str, key: &str) -> Result<KeyInfo> {
        let r = self
            .call(
                "LookupKey",
                Resend::Read,
                pb::LookupKeyRequest {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                },
                |mut c, r| async move { c.lookup_key(r).await },
            )
            .await
            .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn list_keys(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: &str,
        max_keys: u32,
    ) -> Result<Vec<KeyInfo>> {
        let r = self
            .call(
                "ListKeys",
                Resend::Read,
                pb::ListKeysRequest {
                    bucket: bucket.to_string(),
                    prefix: prefix.to_string(),
                    start_after: start_after.to_string(),
                    max_keys,
                },
                |mut c, r| async move { c.list_keys(r).await },
            )
            .await?;
        Ok(r.keys
            .into_iter()
            .map(KeyInfo::try_from)
            .collect::<std::result::Result<_, _>>()?)
    }

    pub(crate) async fn rename_key(
        &self,
        bucket: &str,
        from: &str,
        to: &str,
        condition: Option<WriteCondition>,
    ) -> Result<KeyInfo> {
        let r = self
            .call(
                "RenameKey",
                Resend::IfNotSent,
                pb::RenameKeyRequest {
                    bucket: bucket.to_string(),
                    from_key: from.to_string(),
                    to_key: to.to_string(),
                    condition: condition.map(Into::into),
                },
                |mut c, r| async move { c.rename_key(r).await },
            )
            .await
            .map_err(|e| key_not_found(e, bucket, from))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn set_key_metadata(
        &self,
        bucket: &str,
        key: &str,
        prefix: &str,
        entries: BTreeMap<String, String>,
    ) -> Result<KeyInfo> {
        let r = self
            .call(
                "SetKeyMetadata",
                Resend::IfNotSent,
                pb::SetKeyMetadataRequest {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                    prefix: prefix.to_string(),
                    entries: entries.into_iter().collect(),
                },
                |mut c, r| async move { c.set_key_metadata(r).await },
            )
            .await
            .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(r.key
            .ok_or(ProtocolError::MissingField("key"))?
            .try_into()?)
    }

    pub(crate) async fn delete_key(
        &self,
        bucket: &str,
        key: &str,
        condition: Option<WriteCondition>,
    ) -> Result<()> {
        self.call(
            "DeleteKey",
            Resend::IfNotSent,
            pb::DeleteKeyRequest {
                bucket: bucket.to_string(),
                key: key.to_string(),
                condition: condition.map(Into::into),
            },
            |mut c, r| async move { c.delete_key(r).await },
        )
        .await
        .map_err(|e| key_not_found(e, bucket, key))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Status {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let mut s = Status::unavailable("tcp connect error");
        s.set_source(Arc::new(tonic::ConnectError(Box::new(io))));
        s
    }

    #[test]
    fn only_reads_go_to_the_next_om_after_a_call_may_have_left() {
        // Never sent: anything may go on.
        assert!(resend(&refused(), Resend::Read));
        assert!(resend(&refused(), Resend::IfNotSent));
        // Lost mid-call (no connect error): a read goes on, a change does not.
        for lost in [
            Status::unavailable("connection reset"),
            Status::unknown("h2 protocol error"),
            Status::cancelled("operation was canceled"),
        ] {
            assert!(resend(&lost, Resend::Read), "{lost:?}");
            assert!(!resend(&lost, Resend::IfNotSent), "{lost:?}");
        }
        // An om's own answer (with its code) is final either way.
        let answered = OmErrorCode::KeyNotFound.status("no such key");
        assert!(!resend(&answered, Resend::Read));
        assert!(!resend(&answered, Resend::IfNotSent));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_stays_on_the_om_that_granted_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut servers = Vec::new();
        for name in ["a", "b"] {
            let om = om::OzoneManager::open(om::OmConfig::new(dir.path().join(name))).expect("om");
            let listen = "127.0.0.1:0".parse().expect("addr");
            let server = om::OmServer::start(listen, Arc::new(om))
                .await
                .expect("serve");
            servers.push(server);
        }
        let list = format!("{},{}", servers[0].address(), servers[1].address());
        let client = OmClient::connect(&list, Duration::from_secs(5), None)
            .await
            .expect("connect");
        for server in &servers {
            server.om().create_bucket("b", None, None).expect("bucket");
        }
        let opened = client.open_key("b", "k", None).await.expect("open on a");
        assert_eq!(opened.om.oms.len(), 1);
        assert_eq!(opened.om.oms[0].0, servers[0].address().to_string());
        // Calls of the client now go to b first; the session's still go to a,
        // which alone knows it (b has no such session).
        client.current.store(1, Ordering::Relaxed);
        assert!(client.renew_key(opened.session_id).await.is_err());
        opened
            .om
            .renew_key(opened.session_id)
            .await
            .expect("renew on a");
        opened.guard.undo().await;
        assert_eq!(servers[0].om().open_sessions(), 0);
    }
}
