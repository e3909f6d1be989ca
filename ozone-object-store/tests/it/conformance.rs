//! object_store's own reusable conformance suite (its `integration` module),
//! run twice against a minicluster over real gRPC and HTTP on loopback:
//! - through [`OzoneStore`] (the adapter over `ec-client`);
//! - through object_store's `AmazonS3` pointed at our S3 gateway (path
//!   style, plain http): a second, independent client of the gateway.
//!
//! Every suite function gets a bucket of its own, so that one function's
//! leftovers never meet another's assumptions of an empty store.

use std::sync::Arc;

use ec_client::{BucketOptions, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig, S3_ACCESS_KEY, S3_SECRET_KEY};
use object_store::ObjectStore;
use object_store::aws::{AmazonS3, AmazonS3Builder, S3CopyIfNotExists};
use object_store::integration::{
    copy_if_not_exists, copy_rename_nonexistent_object, get_nonexistent_object, get_opts,
    list_uses_directories_correctly, list_with_delimiter, list_with_offset_exclusivity, multipart,
    multipart_out_of_order, multipart_put_part_out_of_order, multipart_race_condition,
    multipart_with_opts, put_get_attributes, put_get_delete_list, put_opts, rename_and_copy,
    stream_get,
};
use ozone_object_store::OzoneStore;

async fn cluster() -> MiniCluster {
    MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster")
}

/// A fresh bucket named `name`: EC (the cluster's default) unless `replicated`.
async fn bucket(cluster: &MiniCluster, name: &str, replicated: bool) {
    let client = cluster.client().await.expect("client");
    let replication = replicated.then_some(ReplicationConfig::Replicated { factor: 3 });
    client
        .create_bucket(
            name,
            BucketOptions {
                replication,
                ..Default::default()
            },
        )
        .await
        .expect("create bucket");
}

async fn ozone(cluster: &MiniCluster, name: &str, replicated: bool) -> OzoneStore {
    bucket(cluster, name, replicated).await;
    OzoneStore::new(cluster.client().await.expect("client"), name)
}

/// The whole suite through the adapter, on EC buckets (and the basic
/// read/write/list function once more on a replicated one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ozone_store_passes_object_stores_suite() {
    let cluster = cluster().await;

    put_get_delete_list(&ozone(&cluster, "put-get-delete-list", false).await).await;
    put_get_delete_list(&ozone(&cluster, "put-get-delete-list-rep", true).await).await;
    put_get_attributes(&ozone(&cluster, "put-get-attributes", false).await).await;
    get_opts(&ozone(&cluster, "get-opts", false).await).await;
    put_opts(&ozone(&cluster, "put-opts", false).await, true).await;
    list_uses_directories_correctly(&ozone(&cluster, "list-dirs", false).await).await;
    list_with_delimiter(&ozone(&cluster, "list-delimiter", false).await).await;
    list_with_offset_exclusivity(&ozone(&cluster, "list-offset", false).await).await;
    rename_and_copy(&ozone(&cluster, "rename-and-copy", false).await).await;
    copy_if_not_exists(&ozone(&cluster, "copy-if-not-exists", false).await).await;
    copy_rename_nonexistent_object(&ozone(&cluster, "copy-rename-missing", false).await).await;
    stream_get(&ozone(&cluster, "stream-get", false).await).await;
    let store = ozone(&cluster, "multipart", false).await;
    multipart(&store, &store).await;
    let store = ozone(&cluster, "multipart-opts", false).await;
    multipart_with_opts(&store, &store).await;
    let store = ozone(&cluster, "multipart-out-of-order", false).await;
    multipart_put_part_out_of_order(&store, &store).await;
    multipart_out_of_order(&store).await;
    multipart_race_condition(&ozone(&cluster, "multipart-race", false).await, true).await;

    let store = ozone(&cluster, "nonexistent", false).await;
    let err = get_nonexistent_object(&store, None)
        .await
        .expect_err("missing");
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
}

/// object_store's S3 client, path style over plain http, signed with the
/// minicluster's keys, bound to `bucket`.
fn amazon_s3(address: std::net::SocketAddr, bucket: &str) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(format!("http://{address}"))
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region("us-east-1")
        .with_access_key_id(S3_ACCESS_KEY)
        .with_secret_access_key(S3_SECRET_KEY)
        .with_bucket_name(bucket)
        // copy_if_not_exists as on AWS: an UploadPartCopy completed with
        // `If-None-Match: *`.
        .with_copy_if_not_exists(S3CopyIfNotExists::Multipart)
        .build()
        .expect("AmazonS3 store")
}

/// The same suite through object_store's `AmazonS3` and our S3 gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amazon_s3_through_the_gateway_passes_object_stores_suite() {
    let mut cluster = cluster().await;
    let address = cluster.start_s3_gateway(0, true).await.expect("gateway");
    let s3 = |name: &'static str| {
        let cluster = &cluster;
        async move {
            bucket(cluster, name, false).await;
            Arc::new(amazon_s3(address, name))
        }
    };

    put_get_delete_list(&*s3("s3-put-get-delete-list").await).await;
    put_get_attributes(&*s3("s3-put-get-attributes").await).await;
    get_opts(&*s3("s3-get-opts").await).await;
    put_opts(&*s3("s3-put-opts").await, true).await;
    list_uses_directories_correctly(&*s3("s3-list-dirs").await).await;
    list_with_delimiter(&*s3("s3-list-delimiter").await).await;
    list_with_offset_exclusivity(&*s3("s3-list-offset").await).await;
    rename_and_copy(&*s3("s3-rename-and-copy").await).await;
    copy_if_not_exists(&*s3("s3-copy-if-not-exists").await).await;
    copy_rename_nonexistent_object(&*s3("s3-copy-rename-missing").await).await;
    stream_get(&*s3("s3-stream-get").await).await;
    let store = s3("s3-multipart").await;
    multipart(&*store, &*store).await;
    let store = s3("s3-multipart-opts").await;
    multipart_with_opts(&*store, &*store).await;
    let store = s3("s3-multipart-out-of-order").await;
    multipart_put_part_out_of_order(&*store, &*store).await;
    multipart_out_of_order(&*store).await;
    multipart_race_condition(&*s3("s3-multipart-race").await, true).await;

    // The suite went through the gateway: its copy-if-not-exists took the
    // UploadPartCopy path, its conditional puts reached PutObject, and the
    // multipart functions' parts (over 100 MB) were received.
    let m = cluster.s3_metrics().expect("gateway metrics");
    eprintln!("{m:?}");
    assert!(m.requests_of("UploadPartCopy") >= 1, "{m:?}");
    assert!(m.requests_of("CompleteMultipartUpload") >= 8, "{m:?}");
    assert!(m.bytes_in > 100_000_000, "{m:?}");
}

/// The two front ends see one another's objects: what the adapter writes
/// (bytes, content type, user metadata) reads back through S3, and the
/// other way round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adapter_and_the_gateway_share_objects_and_their_attributes() {
    use object_store::{Attribute, Attributes, ObjectStoreExt, PutOptions};

    let mut cluster = cluster().await;
    let address = cluster.start_s3_gateway(0, true).await.expect("gateway");
    let ozone = ozone(&cluster, "shared", false).await;
    let s3 = amazon_s3(address, "shared");

    let attributes = Attributes::from_iter([
        (Attribute::ContentType, "application/x-parquet"),
        (Attribute::Metadata("origin".into()), "adapter"),
    ]);
    let path = object_store::path::Path::from("tables/t1/part-0.parquet");
    let opts = PutOptions {
        attributes: attributes.clone(),
        ..Default::default()
    };
    ozone
        .put_opts(&path, b"from the adapter".to_vec().into(), opts)
        .await
        .expect("adapter put");
    let got = s3.get(&path).await.expect("s3 get");
    assert_eq!(got.attributes, attributes);
    assert_eq!(&*got.bytes().await.expect("bytes"), b"from the adapter");

    let path2 = object_store::path::Path::from("tables/t1/part-1.parquet");
    let opts = PutOptions {
        attributes: attributes.clone(),
        ..Default::default()
    };
    s3.put_opts(&path2, b"from s3".to_vec().into(), opts)
        .await
        .expect("s3 put");
    let got = ozone.get(&path2).await.expect("adapter get");
    assert_eq!(got.attributes, attributes);
    assert_eq!(&*got.bytes().await.expect("bytes"), b"from s3");
}
