//! Key rename (Ozone's `ozone sh key rename`): one om transaction, no data
//! moved, a new generation; a replaced destination's blocks go to the
//! deletion log; `rename_key_if(NotExists)` refuses an existing destination.

use crate::common;

use std::time::Duration;

use common::{data, read_all};
use ec_client::{ClientError, WriteCondition};
use minicluster::{MiniCluster, MiniClusterConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_moves_the_record_not_the_bytes() {
    // Deletions are held back, so that the log shows exactly what a rename freed.
    let cluster = MiniCluster::start(
        MiniClusterConfig::default().with_deletion_grace(Duration::from_secs(3600)),
    )
    .await
    .expect("cluster");
    let client = cluster.client().await.expect("client");
    client
        .create_bucket("b", Default::default())
        .await
        .expect("bucket");
    let a = data(1_000_000, 1);
    let b = data(2_000, 2);
    let put_a = client.put_key("b", "a", None, &a).await.expect("a");
    client.put_key("b", "b", None, &b).await.expect("b");
    let pending = async || {
        cluster
            .om()
            .pending_deletions()
            .await
            .expect("deletion log")
    };

    // To a free name: nothing freed, nothing read or written on a datanode.
    let before = client.metrics();
    let renamed_after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis();
    let moved = client.rename_key("b", "a", "c").await.expect("rename");
    assert_eq!(
        client
            .metrics()
            .since(&before)
            .rpcs_total
            .values()
            .sum::<u64>(),
        0
    );
    assert_eq!(pending().await, 0);
    assert_eq!(moved.name, "c");
    assert_eq!(moved.block_groups, put_a.block_groups, "the same blocks");
    assert!(moved.generation > put_a.generation, "a new generation");
    assert!(
        u128::from(moved.created_unix_ms) >= renamed_after,
        "the record carries the rename's time, not the put's"
    );
    assert!(matches!(
        client.key_info("b", "a").await,
        Err(ClientError::KeyNotFound { .. })
    ));
    assert_eq!(read_all(&client, "b", "c").await, a);

    // Only if nothing is there: refused, both keys as they were.
    let err = client
        .rename_key_if("b", "c", "b", WriteCondition::NotExists)
        .await
        .expect_err("b exists");
    assert!(err.is_condition_failed(), "{err}");
    assert_eq!(read_all(&client, "b", "b").await, b);
    assert_eq!(read_all(&client, "b", "c").await, a);

    // Over an existing key: it is replaced, and its one group's five
    // replicas are logged for deletion.
    client.rename_key("b", "c", "b").await.expect("replace");
    assert_eq!(read_all(&client, "b", "b").await, a);
    assert_eq!(pending().await, 5);

    // A missing source; a bad destination name.
    let err = client
        .rename_key("b", "nope", "x")
        .await
        .expect_err("missing");
    assert!(
        matches!(err, ClientError::KeyNotFound { ref key, .. } if key == "nope"),
        "{err}"
    );
    let err = client
        .rename_key("b", "b", "")
        .await
        .expect_err("empty name");
    assert!(matches!(err, ClientError::Om { .. }), "{err}");
    // To itself: nothing changes, but a condition is still checked.
    let err = client
        .rename_key_if("b", "b", "b", WriteCondition::NotExists)
        .await
        .expect_err("b exists");
    assert!(err.is_condition_failed(), "{err}");
    let same = client.rename_key("b", "b", "b").await.expect("self");
    assert_eq!(read_all(&client, "b", &same.name).await, a);
}
