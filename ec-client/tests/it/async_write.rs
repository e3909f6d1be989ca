//! `KeyOutputStream` as a `tokio::io::AsyncWrite`: `tokio::io::copy` into EC
//! and replicated keys, `poll_shutdown` committing as `close` does, the
//! async methods mixed with it, and a datanode failure reaching the caller as
//! an `io::Error` that gives its `ClientError` back.

use crate::common;

use common::{cluster, data, ec_bucket, failure_cluster, replicated_bucket, rs32};
use ec_client::{ClientError, KeyOutputStream, ReplicationConfig};
use tokio::io::AsyncWriteExt;

/// Copies `src` into `w` through `tokio::io::copy` (8 KiB writes) and shuts it down.
async fn copy_in(w: &mut KeyOutputStream, src: &[u8]) {
    let mut reader = src;
    let n = tokio::io::copy(&mut reader, w).await.expect("copy");
    assert_eq!(n, src.len() as u64);
    w.shutdown().await.expect("shutdown commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokio_copy_writes_ec_and_replicated_keys_and_shutdown_commits() {
    let (_cluster, client) = cluster().await;
    ec_bucket(&client, "ec", 64 * 4096).await;
    replicated_bucket(&client, "rep", 64 * 1024).await;
    // Several groups of the EC bucket (64-cell blocks), a partial stripe at the end.
    let src = data(3 * 64 * 3 * 4096 + 5000, 7);
    for bucket in ["ec", "rep"] {
        let mut w = client.create_key(bucket, "k", None).await.expect("create");
        copy_in(&mut w, &src).await;
        let info = w.committed().expect("committed by shutdown").clone();
        assert_eq!(info.length, src.len() as u64);
        assert_eq!(w.len(), src.len() as u64);
        // A second shutdown is a no-op; a write after it is refused.
        w.shutdown().await.expect("idempotent");
        let err = w.write_all(b"late").await.expect_err("closed");
        let back = ClientError::from_io(err).expect("a client error");
        assert!(matches!(back, ClientError::InvalidArgument(_)), "{back}");
        assert_eq!(common::read_all(&client, bucket, "k").await, src);
    }
    let info = client.key_info("ec", "k").await.expect("info");
    assert_eq!(info.replication, ReplicationConfig::Ec(rs32()));
    assert_eq!(info.block_groups.len(), 4, "three full groups and a tail");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_methods_and_async_write_mix_in_order() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "ec", 64 * 4096).await;
    let src = data(100_000, 9);
    let mut w = client
        .create_key("ec", "mixed", None)
        .await
        .expect("create");
    w.write_all(&src[..30_000]).await.expect("AsyncWrite");
    // The write-behind piece is in flight or done; the method waits for it.
    w.write(&src[30_000..70_000]).await.expect("method");
    w.write_all(&src[70_000..]).await.expect("AsyncWrite again");
    AsyncWriteExt::flush(&mut w)
        .await
        .expect("poll_flush waits for the piece in flight");
    let info = w.close().await.expect("close");
    assert_eq!(info.length, src.len() as u64);
    assert_eq!(common::read_all(&client, "ec", "mixed").await, src);

    // Given up with abort (what an AsyncWrite user does when the source
    // fails, since shutdown commits): nothing committed, and the session is
    // gone when abort returns.
    let mut w = client
        .create_key("ec", "given-up", None)
        .await
        .expect("create");
    w.write_all(&src).await.expect("AsyncWrite");
    assert_eq!(cluster.om().open_sessions().await.expect("count"), 1);
    w.abort().await.expect("abort");
    assert_eq!(cluster.om().open_sessions().await.expect("count"), 0);
    assert!(client.key_info("ec", "given-up").await.is_err());

    // Abort while poll_shutdown's commit is under way: it may already have
    // reached the om, so abort lets it finish rather than cutting it short,
    // and reports that the key was committed.
    let mut w = client
        .create_key("ec", "committing", None)
        .await
        .expect("create");
    w.write_all(&src).await.expect("AsyncWrite");
    // Flushed first, so the shutdown poll below starts the commit itself
    // rather than waiting on the last piece.
    tokio::io::AsyncWriteExt::flush(&mut w)
        .await
        .expect("AsyncWrite flush");
    let first = std::future::poll_fn(|cx| {
        let polled = tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(&mut w), cx);
        std::task::Poll::Ready(polled.is_pending())
    })
    .await;
    assert!(
        first,
        "the commit needs the datanodes and the om: not done in one poll"
    );
    let err = w.abort().await.expect_err("the commit went through");
    assert!(matches!(err, ClientError::InvalidArgument(_)), "{err}");
    assert_eq!(cluster.om().open_sessions().await.expect("count"), 0);
    let info = client
        .key_info("ec", "committing")
        .await
        .expect("committed");
    assert_eq!(info.length, src.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_reaches_the_caller_and_gives_its_client_error_back() {
    // Exactly d + p datanodes: with two of them gone no new group can be
    // placed, so the write fails for good.
    let (mut cluster, client) = failure_cluster(5).await;
    ec_bucket(&client, "ec", 64 * 4096).await;
    let mut w = client.create_key("ec", "k", None).await.expect("create");
    w.write_all(&data(3 * 4096, 1)).await.expect("first stripe");
    for n in [0, 1] {
        cluster.datanode_mut(n).expect("datanode").stop().await;
    }
    let src = data(64 * 3 * 4096, 2);
    let err = match w.write_all(&src).await {
        Err(e) => e,
        Ok(()) => w.shutdown().await.expect_err("the commit cannot succeed"),
    };
    let back = ClientError::from_io(err).expect("a client error inside");
    // A second shutdown (a caller retrying) is told the write failed, never
    // that the key was committed.
    let again = ClientError::from_io(w.shutdown().await.expect_err("still failed"))
        .expect("a client error inside");
    assert!(matches!(again, ClientError::WriteAborted { .. }), "{again}");
    assert!(
        matches!(
            back.root(),
            ClientError::Om { .. }
                | ClientError::BlockStream(_)
                | ClientError::InsufficientLocations { .. }
        ),
        "{back}"
    );
    assert!(w.committed().is_none());
    assert!(
        client.key_info("ec", "k").await.is_err(),
        "nothing committed"
    );
}
