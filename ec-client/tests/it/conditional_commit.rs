//! Conditional commits through the client (`KeyOutputStream::close_if`, `delete_key_if`,
//! `complete_multipart_upload_if`): the om checks the condition in the commit's transaction;
//! a refused commit leaves the key as it was and its session's blocks reclaimed.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{data, ec_bucket, read_all, test_config};
use ec_client::{Client, WriteCondition};
use minicluster::{MiniCluster, MiniClusterConfig};

async fn put_if(
    client: &Client,
    key: &str,
    bytes: &[u8],
    condition: WriteCondition,
) -> ec_client::Result<ec_client::KeyInfo> {
    let mut w = client.create_key("b", key, None).await?;
    w.write(bytes).await?;
    w.close_if(BTreeMap::new(), condition).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_and_deletes_honour_their_conditions() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "b", 1 << 20).await;
    let (one, two) = (data(5000, 1), data(7000, 2));

    let first = put_if(&client, "k", &one, WriteCondition::NotExists)
        .await
        .expect("creates");
    let e = put_if(&client, "k", &two, WriteCondition::NotExists)
        .await
        .expect_err("exists");
    assert!(e.is_condition_failed(), "{e}");
    assert!(read_all(&client, "b", "k").await == one);
    assert!(
        cluster
            .wait_for_no_open_sessions(Duration::from_secs(10))
            .await,
        "the refused commit's session is gone"
    );

    let stale = WriteCondition::Generation(first.generation + 1000);
    let e = put_if(&client, "k", &two, stale).await.expect_err("stale");
    assert!(e.is_condition_failed(), "{e}");
    let second = put_if(
        &client,
        "k",
        &two,
        WriteCondition::Generation(first.generation),
    )
    .await
    .expect("current generation");
    assert!(second.generation > first.generation);
    assert!(read_all(&client, "b", "k").await == two);
    let e = put_if(
        &client,
        "k",
        &one,
        WriteCondition::Generation(first.generation),
    )
    .await
    .expect_err("the first generation is gone");
    assert!(e.is_condition_failed(), "{e}");

    let e = client
        .delete_key_if("b", "k", WriteCondition::Generation(first.generation))
        .await
        .expect_err("stale delete");
    assert!(e.is_condition_failed(), "{e}");
    client
        .delete_key_if("b", "k", WriteCondition::Generation(second.generation))
        .await
        .expect("delete");
    assert!(client.key_info("b", "k").await.is_err());
    cluster.shutdown().await;
}
