//! A cluster run with TLS (`MiniClusterConfig::with_tls`): its S3 gateway
//! serves HTTPS with the cluster's certificate, and object_store's own S3
//! client — trusting the cluster CA as `aws --ca-bundle` would — passes the
//! basic function of object_store's suite through it; the adapter passes it
//! over ec-client's TLS channels. A client that does not trust the CA, or
//! speaks plain HTTP to the HTTPS port, gets no answer.

use std::time::Duration;

use ec_client::BucketOptions;
use minicluster::{MiniCluster, MiniClusterConfig, S3_ACCESS_KEY, S3_SECRET_KEY};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::integration::put_get_delete_list;
use object_store::path::Path;
use object_store::{BackoffConfig, Certificate, ClientOptions, ObjectStoreExt, RetryConfig};
use ozone_object_store::OzoneStore;

/// object_store's S3 client at `endpoint`, trusting `ca` (PEM) if given,
/// without retries (a refused handshake fails at once).
fn amazon_s3(endpoint: &str, bucket: &str, ca: Option<&[u8]>) -> AmazonS3 {
    let mut options = ClientOptions::new().with_allow_http(endpoint.starts_with("http://"));
    if let Some(ca) = ca {
        options = options.with_root_certificate(Certificate::from_pem(ca).expect("CA PEM"));
    }
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_client_options(options)
        .with_retry(RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 0,
            retry_timeout: Duration::from_secs(5),
        })
        .with_virtual_hosted_style_request(false)
        .with_region("us-east-1")
        .with_access_key_id(S3_ACCESS_KEY)
        .with_secret_access_key(S3_SECRET_KEY)
        .with_bucket_name(bucket)
        .build()
        .expect("AmazonS3 store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_over_https_and_the_adapter_over_tls() {
    let mut cluster = MiniCluster::start(MiniClusterConfig::default().with_tls(true))
        .await
        .expect("minicluster with TLS");
    let address = cluster.start_s3_gateway(0, true).await.expect("gateway");
    let info = cluster.info();
    let endpoint = info.s3.expect("gateway in cluster.json").endpoint;
    assert_eq!(endpoint, format!("https://{address}"));
    let ca = std::fs::read(info.tls.expect("TLS in cluster.json").ca).expect("CA file");
    let client = cluster.client().await.expect("client over TLS");
    for bucket in ["adapter", "gateway", "untrusted"] {
        client
            .create_bucket(bucket, BucketOptions::default())
            .await
            .expect("bucket");
    }

    put_get_delete_list(&OzoneStore::new(client.clone(), "adapter")).await;
    put_get_delete_list(&amazon_s3(&endpoint, "gateway", Some(&ca))).await;

    // Without the CA, and in plain HTTP: no request reaches the gateway.
    let before = cluster.s3_metrics().expect("gateway metrics");
    let untrusting = amazon_s3(&endpoint, "untrusted", None);
    let r = untrusting.put(&Path::from("x"), "x".into()).await;
    assert!(r.is_err(), "an untrusting client wrote: {r:?}");
    let plain = amazon_s3(&format!("http://{address}"), "untrusted", None);
    let r = plain.put(&Path::from("x"), "x".into()).await;
    assert!(r.is_err(), "plain HTTP to the HTTPS port wrote: {r:?}");
    // Everything but the open-connection gauge: the two refused connections
    // may still be closing on the gateway's side.
    let mut after = cluster.s3_metrics().expect("gateway metrics");
    after.connections_open = before.connections_open;
    assert_eq!(after, before, "neither request was answered");
    let listed = client
        .list_keys("untrusted", "", "", 10)
        .await
        .expect("list");
    assert!(listed.is_empty(), "{listed:?}");
}
