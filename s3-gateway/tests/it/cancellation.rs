//! The S3 write paths cancelled at every await point (issue 11, part 3): a
//! PutObject or UploadPart whose handler future is dropped — what hyper
//! does when the client hangs up — at its N-th poll, for N = 1, 2, … until
//! the request completes. The object stays absent, at its previous version,
//! or exactly the new body — never a prefix — and an upload's part is
//! absent or exact.

use std::time::Duration;

use bytes::Bytes;
use ec_client::Client;
use minicluster::cancel::{CancelAtPoll, Cancelled};
use minicluster::{MiniCluster, MiniClusterConfig};
use s3_gateway::Gateway;
use s3s::dto::{PutObjectInput, StreamingBlob, UploadPartInput};
use s3s::{S3, S3Request};

const MAX_POLLS: u32 = 400;
const PIECE: usize = 64 * 1024;

fn body(seed: u8, pieces: usize) -> Vec<u8> {
    minicluster::pattern::bytes(u64::from(seed), 0, pieces * PIECE)
}

/// A request body that arrives in 64 KiB pieces, suspending between them
/// as a socket read would.
fn streaming(content: &[u8]) -> StreamingBlob {
    let pieces: Vec<Bytes> = content.chunks(PIECE).map(Bytes::copy_from_slice).collect();
    let stream = futures::stream::unfold(pieces.into_iter(), |mut it| async move {
        tokio::task::yield_now().await;
        it.next().map(|b| (Ok::<_, std::io::Error>(b), it))
    });
    StreamingBlob::wrap(stream)
}

fn put(bucket: &str, key: &str, content: &[u8]) -> S3Request<PutObjectInput> {
    let input = PutObjectInput::builder()
        .bucket(bucket.to_string())
        .key(key.to_string())
        .body(Some(streaming(content)))
        .build()
        .expect("put input");
    Gateway::request(input)
}

/// Waits until every cancelled writer's background abort (or its commit,
/// when the commit RPC had left) landed.
async fn sessions_settled(cluster: &MiniCluster) {
    assert!(
        cluster
            .wait_for_no_open_sessions(Duration::from_secs(60))
            .await,
        "open sessions drain within a minute"
    );
}

async fn read(client: &Client, bucket: &str, key: &str) -> Vec<u8> {
    let r = client.open_key(bucket, key).await.expect("open");
    let mut out = vec![0u8; usize::try_from(r.len()).expect("fits")];
    r.read_exact_at(0, &mut out).await.expect("read");
    out
}

async fn setup() -> (MiniCluster, Client, Gateway) {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster.client().await.expect("client");
    client
        .create_bucket("b", ec_client::BucketOptions::default())
        .await
        .expect("bucket");
    let gw = Gateway::new(client.clone(), 12 * 1024 * 1024);
    (cluster, client, gw)
}

/// An overwriting PUT cancelled at each await point leaves the previous
/// version or the exact new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_object_cancelled_at_every_await_point() {
    let (cluster, client, gw) = setup().await;
    let old = body(1, 3);
    let new = body(2, 8);
    gw.put_object(put("b", "obj", &old))
        .await
        .expect("first put");
    for n in 1..=MAX_POLLS {
        let finished = match CancelAtPoll::new(gw.put_object(put("b", "obj", &new)), n).await {
            Cancelled::Finished(r) => {
                r.expect("an uncancelled put succeeds");
                true
            }
            Cancelled::Dropped => false,
        };
        sessions_settled(&cluster).await;
        let got = read(&client, "b", "obj").await;
        if finished {
            assert!(got == new, "a completed PUT is exact");
            assert!(n > 8, "the PUT suspended only {} times", n - 1);
            cluster.shutdown().await;
            return;
        }
        assert!(
            got == old || got == new,
            "poll {n}: a cancelled PUT left {} bytes, neither version",
            got.len()
        );
    }
    panic!("the PUT did not finish within {MAX_POLLS} polls");
}

/// An UploadPart cancelled at each await point leaves no part or the exact
/// part; the completed upload holds exactly the parts' bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_part_cancelled_at_every_await_point() {
    let (cluster, client, gw) = setup().await;
    let up = client
        .initiate_multipart_upload("b", "mp", None, Default::default())
        .await
        .expect("initiate");
    let part = body(3, 6);
    for n in 1..=MAX_POLLS {
        let input = UploadPartInput::builder()
            .bucket("b".to_string())
            .key("mp".to_string())
            .upload_id(up.clone())
            .part_number(1)
            .body(Some(streaming(&part)))
            .build()
            .expect("part input");
        let finished = match CancelAtPoll::new(gw.upload_part(Gateway::request(input)), n).await {
            Cancelled::Finished(r) => {
                r.expect("an uncancelled part upload succeeds");
                true
            }
            Cancelled::Dropped => false,
        };
        sessions_settled(&cluster).await;
        let parts = client.list_parts(&up).await.expect("upload").parts;
        if let Some(p) = parts.first() {
            assert_eq!(
                p.size,
                part.len() as u64,
                "poll {n}: a listed part is exact"
            );
        }
        if finished {
            let etag = parts
                .first()
                .expect("the completed part is listed")
                .etag
                .clone();
            client
                .complete_multipart_upload(&up, &[(1, etag)], 0, Default::default())
                .await
                .expect("complete");
            assert!(
                read(&client, "b", "mp").await == part,
                "completed object exact"
            );
            assert!(n > 6, "the part upload suspended only {} times", n - 1);
            cluster.shutdown().await;
            return;
        }
    }
    panic!("the part upload did not finish within {MAX_POLLS} polls");
}
