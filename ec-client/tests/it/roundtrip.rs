//! Round trips of EC keys through a five-datanode minicluster over gRPC, at
//! every layout boundary: sequential reads, seek + read, positioned reads,
//! EOF behaviour, and the cursor's independence from preads.

use crate::common;

use common::{CELL, STRIPE, cluster, data, ec_bucket};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Writes a key of `len` bytes and checks every read path against the source.
async fn check_round_trip(client: &ec_client::Client, bucket: &str, len: u64) {
    let key = format!("key-{len}");
    let src = data(len, len);
    let info = client.put_key(bucket, &key, None, &src).await.expect("put");
    assert_eq!(info.length, len);

    // Full sequential read.
    let mut stream = client.open_key(bucket, &key).await.expect("open");
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await.expect("sequential read");
    assert_eq!(all.len() as u64, len, "sequential length for {len}");
    assert!(all == src, "sequential bytes differ for key of {len}");

    // Seek then read.
    let mut rng = SmallRng::seed_from_u64(len);
    for _ in 0..5 {
        let at = if len == 0 {
            0
        } else {
            rng.random_range(0..len)
        };
        stream
            .seek(std::io::SeekFrom::Start(at))
            .await
            .expect("seek");
        let mut tail = Vec::new();
        stream
            .read_to_end(&mut tail)
            .await
            .expect("read after seek");
        assert!(tail[..] == src[at as usize..], "seek to {at} of {len}");
    }

    // Positioned reads leave the cursor alone.
    stream
        .seek(std::io::SeekFrom::Start(len / 2))
        .await
        .expect("seek");
    for _ in 0..20 {
        if len == 0 {
            break;
        }
        let a = rng.random_range(0..len);
        let n = rng.random_range(1..=(len - a).min(3 * STRIPE));
        let mut buf = vec![0u8; n as usize];
        let got = stream.read_at(a, &mut buf).await.expect("read_at");
        assert_eq!(got as u64, n);
        assert!(
            buf[..] == src[a as usize..(a + n) as usize],
            "pread {a}+{n} of {len}"
        );
    }
    assert_eq!(stream.position(), len / 2, "preads moved the cursor");

    // EOF rules.
    let mut buf = [0u8; 16];
    assert_eq!(stream.read_at(len, &mut buf).await.expect("read at end"), 0);
    assert_eq!(
        stream
            .read_at(len + 100, &mut buf)
            .await
            .expect("read past end"),
        0
    );
    let err = stream
        .read_exact_at(len.saturating_sub(8), &mut buf)
        .await
        .expect_err("a read past the end fails");
    assert!(
        matches!(err, ec_client::ClientError::UnexpectedEof { .. }),
        "{err}"
    );
    if len > 0 {
        // A pread crossing the end returns the tail only.
        let got = stream.read_at(len - 1, &mut buf).await.expect("tail read");
        assert_eq!(got, 1);
        assert_eq!(buf[0], src[len as usize - 1]);
    }
}

/// Every boundary size of rs-3-2 with 4 KiB cells, in one cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_at_layout_boundaries() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "b", 1024 * 1024).await;
    for len in [
        0,
        1,
        CELL - 1,
        CELL,
        CELL + 1,
        STRIPE - 1,
        STRIPE,
        STRIPE + 1,
        2 * STRIPE + CELL + 5,
    ] {
        check_round_trip(&client, "b", len).await;
    }
    cluster.shutdown().await;
}

/// A key spanning three block groups (block size 2 cells -> 6 cells per group).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_spanning_three_block_groups() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "small", 2 * CELL).await;
    let len = 2 * (2 * STRIPE) + STRIPE + 7;
    check_round_trip(&client, "small", len).await;
    let info = client
        .key_info("small", &format!("key-{len}"))
        .await
        .expect("info");
    assert_eq!(info.block_groups.len(), 3);
    assert_eq!(info.block_groups.iter().map(|g| g.length).sum::<u64>(), len);
    cluster.shutdown().await;
}
