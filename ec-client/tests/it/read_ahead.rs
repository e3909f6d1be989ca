//! Sequential reads through `AsyncRead` fetch the next read-ahead window while the caller
//! consumes the current one. Exact counts: a whole sequential read moves every byte from the
//! datanodes once (no window fetched twice, none wasted), for a replicated and an EC key; a
//! reader that seeks gets the right bytes and no stale window.

use crate::common;

use common::{data, ec_bucket, replicated_bucket, test_config};
use minicluster::{MiniCluster, MiniClusterConfig};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

fn datanode_read_bytes(cluster: &MiniCluster) -> u64 {
    cluster
        .datanodes()
        .iter()
        .map(|d| d.metrics().read_bytes())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_reads_fetch_each_byte_once() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster
        .client_with(test_config().with_sequential_read_ahead(1 << 20))
        .await
        .expect("client");
    replicated_bucket(&client, "r", 8 << 20).await;
    ec_bucket(&client, "e", 8 << 20).await;
    let src = data((7 << 20) / 2 + 123, 5);
    for bucket in ["r", "e"] {
        client.put_key(bucket, "k", None, &src).await.expect("put");
        let before = datanode_read_bytes(&cluster);
        let mut s = client.open_key(bucket, "k").await.expect("open");
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("read");
        assert!(got == src, "{bucket}: bytes");
        assert_eq!(
            datanode_read_bytes(&cluster) - before,
            src.len() as u64,
            "{bucket}: every byte fetched once"
        );

        // Seeks: back to the start mid-read, and far ahead.
        let mut s = client.open_key(bucket, "k").await.expect("open");
        let mut head = vec![0u8; 1000];
        s.read_exact(&mut head).await.expect("read");
        s.seek(std::io::SeekFrom::Start(3 << 20))
            .await
            .expect("seek");
        let mut tail = Vec::new();
        s.read_to_end(&mut tail).await.expect("read");
        assert!(tail == src[3 << 20..], "{bucket}: after a seek ahead");
        s.seek(std::io::SeekFrom::Start(10)).await.expect("seek");
        let mut again = vec![0u8; 2 << 20];
        s.read_exact(&mut again).await.expect("read");
        assert!(
            again == src[10..10 + (2 << 20)],
            "{bucket}: after a seek back"
        );
        assert!(head == src[..1000]);
    }
    cluster.shutdown().await;
}

/// A replicated key's read-ahead window (4 MiB, one chunk) is fetched as
/// concurrent reads of 1 MiB, so the datanode reads the next piece while the
/// client takes in the last: a whole sequential read of 9 MiB + 5 bytes is 10
/// ReadChunks and moves each byte once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_windows_come_in_one_mib_pieces() {
    use ec_client::RpcKind;
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    replicated_bucket(&client, "r", 64 << 20).await;
    let src = data((9 << 20) + 5, 8);
    client.put_key("r", "k", None, &src).await.expect("put");
    let before = (client.metrics(), datanode_read_bytes(&cluster));
    let mut s = client.open_key("r", "k").await.expect("open");
    let mut got = Vec::new();
    s.read_to_end(&mut got).await.expect("read");
    assert!(got == src, "bytes");
    let delta = client.metrics().since(&before.0);
    assert_eq!(delta.rpcs(RpcKind::ReadChunk), 10, "1 MiB pieces");
    assert_eq!(delta.read_bytes, src.len() as u64);
    assert_eq!(datanode_read_bytes(&cluster) - before.1, src.len() as u64);

    // After a seek off the piece boundaries: pieces [10, 1 MiB), then whole MiBs.
    s.seek(std::io::SeekFrom::Start(10)).await.expect("seek");
    let mut again = vec![0u8; 5 << 20];
    s.read_exact(&mut again).await.expect("read");
    assert!(again == src[10..10 + (5 << 20)], "after a seek");
    cluster.shutdown().await;
}
