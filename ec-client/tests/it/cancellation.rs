//! Cancellation of writers at every await point (issue 11, part 3).
//!
//! Each test drives a writer through `CancelAtPoll`, which drops the future
//! at its N-th poll, for N = 1, 2, … until the future finishes on its own.
//! After each cancellation the stream must be exact or failed: `close()`
//! either errs (and no key or part appears) or commits exactly the bytes of
//! the writes that completed. A cancelled `close()` leaves the key absent or
//! exact. Before the fix, a replicated writer whose `write()` was dropped
//! during a WriteChunk lost the chunk it had taken out of its buffer, and a
//! later `close()` committed the key without it and returned Ok.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{data, ec_bucket, replicated_bucket, test_config};
use ec_client::{Client, ClientError, EcWriteMode};
use minicluster::MiniCluster;
use minicluster::cancel::{CancelAtPoll, Cancelled};

/// Upper bound on polls tried per operation: far more than any of these
/// writes suspends (the loop ends at the first N the write finishes in).
const MAX_POLLS: u32 = 400;

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

/// The key's bytes, or `None` when it does not exist.
async fn stored(client: &Client, bucket: &str, key: &str) -> Option<Vec<u8>> {
    match client.key_info(bucket, key).await {
        Ok(_) => Some(common::read_all(client, bucket, key).await),
        Err(ClientError::KeyNotFound { .. }) => None,
        Err(e) => panic!("lookup of {bucket}/{key}: {e}"),
    }
}

/// Writes `a` (completes), then `b` cancelled at poll `n`, then closes.
/// Checks the outcome; returns whether `b`'s write was cancelled while it
/// had started (n > 1) and not finished.
async fn cancel_write_then_close(
    cluster: &MiniCluster,
    client: &Client,
    bucket: &str,
    key: &str,
    a: &[u8],
    b: &[u8],
    n: u32,
) -> Option<bool> {
    let mut w = client.create_key(bucket, key, None).await.expect("create");
    w.write(a).await.expect("first write");
    let finished = match CancelAtPoll::new(w.write(b), n).await {
        Cancelled::Finished(r) => {
            r.expect("uncancelled write succeeds");
            true
        }
        Cancelled::Dropped => false,
    };
    let expect: Vec<u8> = if finished {
        [a, b].concat()
    } else {
        a.to_vec()
    };
    let closed = w.close().await;
    sessions_settled(cluster).await;
    let got = stored(client, bucket, key).await;
    match closed {
        Ok(info) => {
            assert_eq!(info.length, expect.len() as u64, "{key}: committed length");
            assert!(
                got.as_deref() == Some(&expect[..]),
                "{key}: close returned Ok, so the key holds exactly the completed writes"
            );
        }
        Err(e) => {
            assert!(
                !finished,
                "{key}: nothing was cancelled, yet close failed: {e}"
            );
            assert!(
                matches!(e, ClientError::WriteCancelled { .. }),
                "{key}: close after a cancelled write reports the cancellation: {e}"
            );
            assert!(got.is_none(), "{key}: a failed close commits nothing");
        }
    }
    if finished { None } else { Some(n > 1) }
}

/// Runs [`cancel_write_then_close`] for N = 1, 2, … until `b`'s write
/// finishes; returns how many started writes were cancelled.
async fn every_write_cancellation(
    cluster: &MiniCluster,
    client: &Client,
    bucket: &str,
    a: &[u8],
    b: &[u8],
) -> u32 {
    let mut cancelled_midway = 0;
    for n in 1..=MAX_POLLS {
        let key = format!("w{n}");
        match cancel_write_then_close(cluster, client, bucket, &key, a, b, n).await {
            None => return cancelled_midway,
            Some(midway) => cancelled_midway += u32::from(midway),
        }
    }
    panic!("the write did not finish within {MAX_POLLS} polls");
}

/// Writes `a` and `b`, then closes with the close cancelled at poll `n`:
/// the key is then absent or exactly `a ++ b`. Returns whether the close
/// finished.
async fn cancel_close(
    cluster: &MiniCluster,
    client: &Client,
    bucket: &str,
    key: &str,
    content: &[u8],
    n: u32,
) -> bool {
    let mut w = client.create_key(bucket, key, None).await.expect("create");
    w.write(content).await.expect("write");
    let finished = match CancelAtPoll::new(w.close(), n).await {
        Cancelled::Finished(r) => {
            r.expect("uncancelled close succeeds");
            true
        }
        Cancelled::Dropped => false,
    };
    sessions_settled(cluster).await;
    let got = stored(client, bucket, key).await;
    if finished {
        assert!(got.as_deref() == Some(content), "{key}: closed key exact");
    } else {
        assert!(
            got.is_none() || got.as_deref() == Some(content),
            "{key}: a cancelled close leaves the key absent or exact, found {:?} bytes",
            got.map(|g| g.len())
        );
    }
    finished
}

async fn every_close_cancellation(
    cluster: &MiniCluster,
    client: &Client,
    bucket: &str,
    content: &[u8],
) -> u32 {
    for n in 1..=MAX_POLLS {
        if cancel_close(cluster, client, bucket, &format!("c{n}"), content, n).await {
            return n - 1;
        }
    }
    panic!("close did not finish within {MAX_POLLS} polls");
}

/// A cluster and a client writing 64 KiB replicated chunks into `bucket`
/// (256 KiB blocks), so that small writes cross chunks and blocks.
async fn replicated_cluster(bucket: &str) -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(minicluster::MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster
        .client_with(test_config().with_replicated_chunk_size(64 * 1024))
        .await
        .expect("client");
    replicated_bucket(&client, bucket, 256 * 1024).await;
    (cluster, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_writer_cancelled_at_every_await_point() {
    let (cluster, client) = replicated_cluster("r").await;
    // a: one full chunk and a buffered tail; b: crosses into a second block.
    let a = data(100 * 1024, 1);
    let b = data(300 * 1024, 2);
    let midway = every_write_cancellation(&cluster, &client, "r", &a, &b).await;
    assert!(midway >= 4, "the write suspended only {midway} times");
    let closes = every_close_cancellation(&cluster, &client, "r", &[a.clone(), b].concat()).await;
    assert!(closes >= 2, "close suspended only {closes} times");
    // hsync (the buffered tail written as one chunk) cancelled likewise.
    for n in 1..=MAX_POLLS {
        let key = format!("h{n}");
        let mut w = client.create_key("r", &key, None).await.expect("create");
        w.write(&a).await.expect("write");
        let finished = CancelAtPoll::new(w.hsync(), n).await.finished();
        let closed = w.close().await;
        sessions_settled(&cluster).await;
        let got = stored(&client, "r", &key).await;
        match (finished, closed) {
            (Some(r), Ok(_)) => {
                r.expect("an uncancelled hsync succeeds");
                assert!(got.as_deref() == Some(&a[..]), "{key}: exact after hsync");
                assert!(n > 2, "hsync suspended only {} times", n - 1);
                cluster.shutdown().await;
                return;
            }
            (None, Ok(_)) => {
                assert_eq!(
                    n, 1,
                    "{key}: only an hsync that never ran leaves the writer usable"
                );
                assert!(got.as_deref() == Some(&a[..]), "{key}: exact");
            }
            (None, Err(e)) => {
                assert!(
                    matches!(e, ClientError::WriteCancelled { .. }),
                    "{key}: {e}"
                );
                assert!(got.is_none(), "{key}: a failed close commits nothing");
            }
            (Some(r), Err(e)) => panic!("{key}: hsync {r:?} finished, then close failed: {e}"),
        }
    }
    panic!("hsync did not finish within {MAX_POLLS} polls");
}

async fn ec_writer_cancelled_at_every_await_point(mode: EcWriteMode) {
    let cluster = MiniCluster::start(minicluster::MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster
        .client_with(test_config().with_ec_write_mode(mode))
        .await
        .expect("client");
    // rs-3-2-4k, 16 KiB blocks: 48 KiB block groups of 12 KiB stripes.
    ec_bucket(&client, "e", 16 * 1024).await;
    let a = data(20 * 1024, 3);
    let b = data(50 * 1024, 4);
    let midway = every_write_cancellation(&cluster, &client, "e", &a, &b).await;
    assert!(midway >= 2, "the write suspended only {midway} times");
    let closes = every_close_cancellation(&cluster, &client, "e", &[a, b].concat()).await;
    assert!(closes >= 2, "close suspended only {closes} times");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_pipelined_writer_cancelled_at_every_await_point() {
    ec_writer_cancelled_at_every_await_point(EcWriteMode::Pipelined).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ec_serial_writer_cancelled_at_every_await_point() {
    ec_writer_cancelled_at_every_await_point(EcWriteMode::Serial).await;
}

/// A multipart part whose write is cancelled: `close_part` fails and the
/// part is not listed, or it succeeds with exactly the completed writes;
/// completing the upload with the part then yields exactly those bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_part_writer_cancelled_at_every_await_point() {
    let (cluster, client) = replicated_cluster("m").await;
    let a = data(70 * 1024, 5);
    let b = data(200 * 1024, 6);
    let mut midway = 0;
    for n in 1..=MAX_POLLS {
        let key = format!("p{n}");
        let up = client
            .initiate_multipart_upload("m", &key, None, BTreeMap::new())
            .await
            .expect("initiate");
        let mut w = client.upload_part(&up, 1).await.expect("part writer");
        w.write(&a).await.expect("first write");
        let finished = match CancelAtPoll::new(w.write(&b), n).await {
            Cancelled::Finished(r) => {
                r.expect("uncancelled write succeeds");
                true
            }
            Cancelled::Dropped => false,
        };
        let expect = if finished {
            [&a[..], &b[..]].concat()
        } else {
            a.clone()
        };
        let closed = w.close_part("etag-1").await;
        sessions_settled(&cluster).await;
        let listed = client.list_parts(&up).await.expect("upload exists").parts;
        match closed {
            Ok(part) => {
                assert_eq!(part.size, expect.len() as u64, "{key}: part size");
                assert_eq!(listed.len(), 1, "{key}: the part is listed");
                client
                    .complete_multipart_upload(&up, &[(1, part.etag)], 0, BTreeMap::new())
                    .await
                    .expect("complete");
                assert!(
                    common::read_all(&client, "m", &key).await == expect,
                    "{key}: completed object holds exactly the completed writes"
                );
                if finished {
                    assert!(midway >= 4, "the part write suspended only {midway} times");
                    cluster.shutdown().await;
                    return;
                }
            }
            Err(e) => {
                assert!(
                    !finished,
                    "{key}: close_part failed without a cancellation: {e}"
                );
                assert!(
                    matches!(e, ClientError::WriteCancelled { .. }),
                    "{key}: {e}"
                );
                assert!(listed.is_empty(), "{key}: a failed part is not listed");
                midway += 1;
                client.abort_multipart_upload(&up).await.expect("abort");
            }
        }
    }
    panic!("the part write did not finish within {MAX_POLLS} polls");
}

/// Opening a writer cancelled at each await point — while the OpenKey or
/// OpenPart RPC is in flight, or after it answered — leaves no om session
/// open (before the fix each one stayed open until its lease ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_writer_cancelled_at_every_await_point_leaves_no_session() {
    let cluster = MiniCluster::start(minicluster::MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    replicated_bucket(&client, "o", 1 << 20).await;
    let up = client
        .initiate_multipart_upload("o", "mp", None, BTreeMap::new())
        .await
        .expect("initiate");
    for n in 1..=MAX_POLLS {
        let name = format!("k{n}");
        let key = client.create_key("o", &name, None);
        let part = client.upload_part(&up, 1);
        let (k, p) = tokio::join!(CancelAtPoll::new(key, n), CancelAtPoll::new(part, n));
        let (k, p) = (k.finished(), p.finished());
        let both = k.is_some() && p.is_some();
        // Writers that did open are dropped unclosed: they abort too.
        drop((k, p));
        sessions_settled(&cluster).await;
        if both {
            assert!(n > 2, "opening suspended only {} times", n - 1);
            cluster.shutdown().await;
            return;
        }
    }
    panic!("opening did not finish within {MAX_POLLS} polls");
}

/// Multipart uploads in progress once there are `expect` of them: the aborts of
/// cancelled initiates run on spawned tasks, so this waits (bounded by a minute) on
/// the om's count, which changes with every initiate, abort and completion.
async fn uploads_after_aborts(cluster: &MiniCluster, expect: u64) -> u64 {
    let mut uploads = cluster.om().watch_multipart_uploads();
    let _ = tokio::time::timeout(Duration::from_secs(60), async {
        while *uploads.borrow_and_update() != expect {
            if uploads.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    *uploads.borrow()
}

/// InitiateMultipartUpload cancelled at each await point leaves no upload
/// behind (before the fix, one cancelled after the om created it stayed,
/// unknown to the caller, and kept its bucket from being deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initiate_cancelled_at_every_await_point_leaves_no_upload() {
    let cluster = MiniCluster::start(minicluster::MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    replicated_bucket(&client, "u", 1 << 20).await;
    for n in 1..=MAX_POLLS {
        let init = client.initiate_multipart_upload("u", "k", None, BTreeMap::new());
        match CancelAtPoll::new(init, n).await {
            Cancelled::Dropped => {
                assert_eq!(uploads_after_aborts(&cluster, 0).await, 0, "poll {n}");
                assert!(
                    client
                        .list_multipart_uploads("u", "")
                        .await
                        .expect("list")
                        .is_empty()
                );
            }
            Cancelled::Finished(r) => {
                r.expect("an uncancelled initiate succeeds");
                assert_eq!(uploads_after_aborts(&cluster, 1).await, 1);
                assert!(n > 2, "initiate suspended only {} times", n - 1);
                cluster.shutdown().await;
                return;
            }
        }
    }
    panic!("initiate did not finish within {MAX_POLLS} polls");
}
