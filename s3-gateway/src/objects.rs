//! Bucket and object operations of the S3 API over the
//! [`ec_client::Client`]: buckets, listings (v1, v2, versions), PUT, DELETE
//! (one or many) and COPY. GET and HEAD object live in `get`; multipart in
//! `multipart`.

use ec_client::{ClientError, KeyInfo};
use s3s::dto::{self, ETag};
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};

use crate::Gateway;
use crate::error::to_s3;
use crate::integrity::{Algorithm, Claims, b64, receive, set_checksum};
use crate::listing::Encoding;
use crate::object_meta::{
    ETAG, check_user_metadata, etag_of, object_metadata, owner, system_metadata, timestamp,
};
use crate::unsupported::refuse_unsupported;
use crate::write_conditions::{commit_error, delete_condition, write_condition};
use ec_client::listing::Page;

/// A listed object; with its owner when `with_owner` (v1 always, v2 with `fetch-owner=true`).
fn s3_object(k: &KeyInfo, enc: Encoding, with_owner: bool) -> dto::Object {
    dto::Object {
        owner: with_owner.then(owner),
        key: Some(enc.s(k.name.clone())),
        size: i64::try_from(k.length).ok(),
        e_tag: Some(ETag::Strong(etag_of(k))),
        last_modified: Some(timestamp(k.created_unix_ms)),
        storage_class: Some(dto::ObjectStorageClass::from_static(
            dto::ObjectStorageClass::STANDARD,
        )),
        ..Default::default()
    }
}

/// A page of `bucket` (see [`ec_client::Client::list_page`]).
async fn list_page(
    gw: &Gateway,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    after: &str,
    max: usize,
) -> S3Result<Page<KeyInfo>> {
    gw.client()
        .list_page(bucket, prefix, delimiter, after, max)
        .await
        .map_err(to_s3)
}

/// The conditions a deletion carries (DeleteObject's headers, or one DeleteObjects entry).
struct DeleteConditions<'a> {
    if_match: Option<&'a dto::ETagCondition>,
    modified: Option<&'a dto::Timestamp>,
    size: Option<i64>,
}

/// Deletes `bucket/key` provided its conditions hold (checked again in the om's deletion
/// transaction). A missing key is fine, as in S3, unless a condition named it; a version
/// other than `null` does not exist here.
async fn delete_one(
    gw: &Gateway,
    bucket: &str,
    key: &str,
    version: Option<&str>,
    c: DeleteConditions<'_>,
) -> S3Result<()> {
    if version.is_some_and(|v| v != "null") {
        return Err(s3_error!(
            InvalidArgument,
            "Invalid version id specified: this bucket is not versioned"
        ));
    }
    let condition = delete_condition(gw, bucket, key, c.if_match, c.modified, c.size).await?;
    let deleted = match condition {
        Some(c) => gw.client().delete_key_if(bucket, key, c).await,
        None => gw.client().delete_key(bucket, key).await,
    };
    match deleted {
        Ok(()) | Err(ClientError::KeyNotFound { .. }) => Ok(()),
        Err(e) => Err(commit_error(e)),
    }
}

fn common_prefixes(prefixes: Vec<String>, enc: Encoding) -> Vec<dto::CommonPrefix> {
    prefixes
        .into_iter()
        .map(|p| dto::CommonPrefix {
            prefix: Some(enc.s(p)),
        })
        .collect()
}

fn max_keys(m: Option<i32>) -> usize {
    m.map_or(1000, |v| usize::try_from(v.clamp(0, 1000)).unwrap_or(1000))
}

impl Gateway {
    async fn tracked<T>(
        &self,
        op: &str,
        fut: impl std::future::Future<Output = S3Result<T>>,
    ) -> S3Result<T> {
        let r = fut.await;
        let status = match &r {
            // S3 answers these with 204 No Content.
            Ok(_) if matches!(op, "DeleteObject" | "DeleteBucket" | "AbortMultipartUpload") => 204,
            Ok(_) => 200,
            Err(e) => e.status_code().map_or(500, |s| s.as_u16()),
        };
        self.metrics().request(op, status);
        r
    }
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<dto::ListBucketsInput>,
    ) -> S3Result<S3Response<dto::ListBucketsOutput>> {
        let principal = crate::acl::principal(self, &req);
        self.tracked(
            "ListBuckets",
            crate::buckets::list(self, req.input, &principal),
        )
        .await
    }

    async fn create_bucket(
        &self,
        req: S3Request<dto::CreateBucketInput>,
    ) -> S3Result<S3Response<dto::CreateBucketOutput>> {
        self.tracked("CreateBucket", async {
            refuse_unsupported(&req.headers)?;
            let principal = crate::acl::principal(self, &req);
            crate::buckets::create(self, req.input, &principal).await
        })
        .await
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<dto::GetBucketAclInput>,
    ) -> S3Result<S3Response<dto::GetBucketAclOutput>> {
        self.tracked("GetBucketAcl", crate::acl::get_bucket(self, req.input))
            .await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<dto::PutBucketAclInput>,
    ) -> S3Result<S3Response<dto::PutBucketAclOutput>> {
        self.tracked("PutBucketAcl", crate::acl::put_bucket(self, req))
            .await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<dto::GetObjectAclInput>,
    ) -> S3Result<S3Response<dto::GetObjectAclOutput>> {
        self.tracked("GetObjectAcl", crate::acl::get_object(self, req.input))
            .await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<dto::PutObjectAclInput>,
    ) -> S3Result<S3Response<dto::PutObjectAclOutput>> {
        self.tracked("PutObjectAcl", crate::acl::put_object(self, req))
            .await
    }

    async fn get_object_attributes(
        &self,
        req: S3Request<dto::GetObjectAttributesInput>,
    ) -> S3Result<S3Response<dto::GetObjectAttributesOutput>> {
        self.tracked(
            "GetObjectAttributes",
            crate::attributes::get(self, req.input),
        )
        .await
    }

    async fn put_object_tagging(
        &self,
        req: S3Request<dto::PutObjectTaggingInput>,
    ) -> S3Result<S3Response<dto::PutObjectTaggingOutput>> {
        self.tracked("PutObjectTagging", crate::tagging::put(self, req.input))
            .await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<dto::GetObjectTaggingInput>,
    ) -> S3Result<S3Response<dto::GetObjectTaggingOutput>> {
        self.tracked("GetObjectTagging", crate::tagging::get(self, req.input))
            .await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<dto::DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectTaggingOutput>> {
        self.tracked(
            "DeleteObjectTagging",
            crate::tagging::delete(self, req.input),
        )
        .await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<dto::GetBucketLocationInput>,
    ) -> S3Result<S3Response<dto::GetBucketLocationOutput>> {
        self.tracked(
            "GetBucketLocation",
            crate::buckets::location(self, req.input),
        )
        .await
    }

    async fn head_bucket(
        &self,
        req: S3Request<dto::HeadBucketInput>,
    ) -> S3Result<S3Response<dto::HeadBucketOutput>> {
        self.tracked("HeadBucket", async {
            self.client()
                .bucket(&req.input.bucket)
                .await
                .map_err(to_s3)?;
            Ok(S3Response::new(dto::HeadBucketOutput::default()))
        })
        .await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<dto::DeleteBucketInput>,
    ) -> S3Result<S3Response<dto::DeleteBucketOutput>> {
        self.tracked("DeleteBucket", async {
            self.client()
                .delete_bucket(&req.input.bucket)
                .await
                .map_err(to_s3)?;
            Ok(S3Response::new(dto::DeleteBucketOutput::default()))
        })
        .await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<dto::ListObjectsV2Input>,
    ) -> S3Result<S3Response<dto::ListObjectsV2Output>> {
        self.tracked("ListObjectsV2", async {
            let i = req.input;
            let enc = Encoding::of(i.encoding_type.as_ref());
            let prefix = i.prefix.clone().unwrap_or_default();
            let after = match (&i.continuation_token, &i.start_after) {
                (Some(t), _) => t.clone(),
                (None, Some(s)) => s.clone(),
                (None, None) => String::new(),
            };
            let max = max_keys(i.max_keys);
            // An empty `delimiter=` is no delimiter, and is not echoed.
            let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
            let page =
                list_page(self, &i.bucket, &prefix, delimiter.as_deref(), &after, max).await?;
            let count = page.objects.len() + page.prefixes.len();
            let with_owner = i.fetch_owner.unwrap_or(false);
            Ok(S3Response::new(dto::ListObjectsV2Output {
                name: Some(i.bucket),
                prefix: enc.o(i.prefix),
                delimiter: enc.o(delimiter),
                max_keys: i32::try_from(max).ok(),
                key_count: i32::try_from(count).ok(),
                continuation_token: i.continuation_token,
                start_after: enc.o(i.start_after),
                is_truncated: Some(page.next.is_some()),
                next_continuation_token: page.next,
                contents: Some(
                    page.objects
                        .iter()
                        .map(|k| s3_object(k, enc, with_owner))
                        .collect(),
                ),
                common_prefixes: Some(common_prefixes(page.prefixes, enc)),
                encoding_type: i.encoding_type,
                ..Default::default()
            }))
        })
        .await
    }

    async fn list_objects(
        &self,
        req: S3Request<dto::ListObjectsInput>,
    ) -> S3Result<S3Response<dto::ListObjectsOutput>> {
        self.tracked("ListObjects", async {
            let i = req.input;
            let enc = Encoding::of(i.encoding_type.as_ref());
            let prefix = i.prefix.clone().unwrap_or_default();
            let after = i.marker.clone().unwrap_or_default();
            let max = max_keys(i.max_keys);
            let delimiter = i.delimiter.clone().filter(|d| !d.is_empty());
            let page =
                list_page(self, &i.bucket, &prefix, delimiter.as_deref(), &after, max).await?;
            let truncated = page.next.is_some();
            Ok(S3Response::new(dto::ListObjectsOutput {
                name: Some(i.bucket),
                prefix: enc.o(i.prefix),
                delimiter: enc.o(delimiter.clone()),
                // Always present in v1, empty when the request sent none.
                marker: enc.o(Some(i.marker.unwrap_or_default())),
                max_keys: i32::try_from(max).ok(),
                is_truncated: Some(truncated),
                // S3 sends NextMarker only with a delimiter; clients use the last key otherwise.
                next_marker: if delimiter.is_some() { page.next } else { None },
                contents: Some(
                    page.objects
                        .iter()
                        .map(|k| s3_object(k, enc, true))
                        .collect(),
                ),
                common_prefixes: Some(common_prefixes(page.prefixes, enc)),
                encoding_type: i.encoding_type,
                ..Default::default()
            }))
        })
        .await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<dto::ListObjectVersionsInput>,
    ) -> S3Result<S3Response<dto::ListObjectVersionsOutput>> {
        self.tracked("ListObjectVersions", async {
            let i = req.input;
            let enc = Encoding::of(i.encoding_type.as_ref());
            let prefix = i.prefix.clone().unwrap_or_default();
            let after = i.key_marker.clone().unwrap_or_default();
            let max = max_keys(i.max_keys);
            let page = list_page(
                self,
                &i.bucket,
                &prefix,
                i.delimiter.as_deref(),
                &after,
                max,
            )
            .await?;
            // Unversioned buckets: every object is version "null" and the latest.
            let versions = page
                .objects
                .iter()
                .map(|k| dto::ObjectVersion {
                    key: Some(enc.s(k.name.clone())),
                    version_id: Some("null".into()),
                    is_latest: Some(true),
                    size: i64::try_from(k.length).ok(),
                    e_tag: Some(ETag::Strong(etag_of(k))),
                    last_modified: Some(timestamp(k.created_unix_ms)),
                    storage_class: Some(dto::ObjectVersionStorageClass::from_static(
                        dto::ObjectVersionStorageClass::STANDARD,
                    )),
                    ..Default::default()
                })
                .collect();
            Ok(S3Response::new(dto::ListObjectVersionsOutput {
                name: Some(i.bucket),
                prefix: enc.o(i.prefix),
                delimiter: enc.o(i.delimiter),
                key_marker: enc.o(i.key_marker),
                max_keys: i32::try_from(max).ok(),
                is_truncated: Some(page.next.is_some()),
                next_key_marker: enc.o(page.next.clone()),
                next_version_id_marker: page.next.map(|_| "null".to_string()),
                encoding_type: i.encoding_type,
                versions: Some(versions),
                common_prefixes: Some(common_prefixes(page.prefixes, enc)),
                ..Default::default()
            }))
        })
        .await
    }

    async fn put_object(
        &self,
        req: S3Request<dto::PutObjectInput>,
    ) -> S3Result<S3Response<dto::PutObjectOutput>> {
        self.tracked("PutObject", async {
            refuse_unsupported(&req.headers)?;
            let claims = Claims::from_headers(&req.headers, Algorithm::Crc64Nvme, None)?;
            claims.check_size()?;
            let tags = crate::tagging::from_headers(&req.headers)?;
            let trailers = req.trailing_headers;
            let i = req.input;
            check_user_metadata(i.metadata.as_ref())?;
            let condition = write_condition(
                self,
                &i.bucket,
                &i.key,
                i.if_match.as_ref(),
                i.if_none_match.as_ref(),
            )
            .await?;
            let mut meta = object_metadata(system_metadata!(i), i.metadata.as_ref());
            meta.extend(tags);
            crate::acl::apply_requested(&mut meta, i.acl.as_ref())?;
            let mut w = self
                .client()
                .create_key(&i.bucket, &i.key, None)
                .await
                .map_err(to_s3)?;
            // A failed claim drops the writer: nothing is committed.
            let got = receive(self, i.body, &mut w, &claims, trailers.as_ref()).await?;
            let etag = got.md5_hex.clone();
            meta.insert(ETAG.to_string(), etag.clone());
            meta.extend(got.metadata());
            match condition {
                Some(c) => w.close_if(meta, c).await.map_err(commit_error)?,
                None => w.close_with(meta).await.map_err(commit_error)?,
            };
            let mut out = dto::PutObjectOutput {
                e_tag: Some(ETag::Strong(etag)),
                checksum_type: Some(dto::ChecksumType::from_static(
                    dto::ChecksumType::FULL_OBJECT,
                )),
                ..Default::default()
            };
            set_checksum!(out, got.algorithm, b64(&got.digest));
            Ok(S3Response::new(out))
        })
        .await
    }

    async fn delete_object(
        &self,
        req: S3Request<dto::DeleteObjectInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectOutput>> {
        self.tracked("DeleteObject", async {
            refuse_unsupported(&req.headers)?;
            let i = req.input;
            delete_one(
                self,
                &i.bucket,
                &i.key,
                i.version_id.as_deref(),
                DeleteConditions {
                    if_match: i.if_match.as_ref(),
                    modified: i.if_match_last_modified_time.as_ref(),
                    size: i.if_match_size,
                },
            )
            .await?;
            Ok(S3Response::new(dto::DeleteObjectOutput::default()))
        })
        .await
    }

    async fn delete_objects(
        &self,
        req: S3Request<dto::DeleteObjectsInput>,
    ) -> S3Result<S3Response<dto::DeleteObjectsOutput>> {
        self.tracked("DeleteObjects", async {
            let i = req.input;
            self.client().bucket(&i.bucket).await.map_err(to_s3)?;
            // Amazon's limit: at most 1,000 keys per request.
            if i.delete.objects.len() > 1000 {
                return Err(s3_error!(
                    MalformedXML,
                    "a DeleteObjects request names {} keys; at most 1000",
                    i.delete.objects.len()
                ));
            }
            let quiet = i.delete.quiet.unwrap_or(false);
            let mut deleted = Vec::new();
            let mut errors = Vec::new();
            for obj in i.delete.objects {
                // Each object's own conditions (`<ETag>`, `<LastModifiedTime>`, `<Size>`)
                // hold for it as they would for a DeleteObject.
                let if_match = obj.e_tag.clone().map(dto::ETagCondition::ETag);
                let outcome = delete_one(
                    self,
                    &i.bucket,
                    &obj.key,
                    obj.version_id.as_deref(),
                    DeleteConditions {
                        if_match: if_match.as_ref(),
                        modified: obj.last_modified_time.as_ref(),
                        size: obj.size,
                    },
                )
                .await;
                match outcome {
                    Ok(()) => {
                        if !quiet {
                            deleted.push(dto::DeletedObject {
                                key: Some(obj.key),
                                ..Default::default()
                            });
                        }
                    }
                    Err(e) => {
                        errors.push(dto::Error {
                            key: Some(obj.key),
                            code: Some(e.code().as_str().to_string()),
                            message: e.message().map(str::to_string),
                            ..Default::default()
                        });
                    }
                }
            }
            Ok(S3Response::new(dto::DeleteObjectsOutput {
                deleted: Some(deleted),
                errors: Some(errors),
                ..Default::default()
            }))
        })
        .await
    }

    async fn copy_object(
        &self,
        req: S3Request<dto::CopyObjectInput>,
    ) -> S3Result<S3Response<dto::CopyObjectOutput>> {
        self.tracked("CopyObject", crate::copy::copy_object(self, req))
            .await
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<dto::CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CreateMultipartUploadOutput>> {
        self.tracked("CreateMultipartUpload", async {
            refuse_unsupported(&req.headers)?;
            let tags = crate::tagging::from_headers(&req.headers)?;
            crate::multipart::create(self, req.input, tags).await
        })
        .await
    }

    async fn upload_part(
        &self,
        req: S3Request<dto::UploadPartInput>,
    ) -> S3Result<S3Response<dto::UploadPartOutput>> {
        self.tracked("UploadPart", crate::multipart::upload_part(self, req))
            .await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<dto::UploadPartCopyInput>,
    ) -> S3Result<S3Response<dto::UploadPartCopyOutput>> {
        self.tracked("UploadPartCopy", crate::copy::upload_part_copy(self, req))
            .await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<dto::CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::CompleteMultipartUploadOutput>> {
        self.tracked("CompleteMultipartUpload", async {
            refuse_unsupported(&req.headers)?;
            crate::multipart::complete(self, req.input).await
        })
        .await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<dto::AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<dto::AbortMultipartUploadOutput>> {
        self.tracked(
            "AbortMultipartUpload",
            crate::multipart::abort(self, req.input),
        )
        .await
    }

    async fn list_parts(
        &self,
        req: S3Request<dto::ListPartsInput>,
    ) -> S3Result<S3Response<dto::ListPartsOutput>> {
        self.tracked("ListParts", crate::multipart::list_parts(self, req.input))
            .await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<dto::ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<dto::ListMultipartUploadsOutput>> {
        self.tracked(
            "ListMultipartUploads",
            crate::multipart::list_uploads(self, req.input),
        )
        .await
    }
}
