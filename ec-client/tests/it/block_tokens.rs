//! Block tokens end to end (security on, as the minicluster runs by
//! default): raw calls to a datanode with a missing, forged, expired,
//! wrong-block or wrong-mode token are refused with
//! BLOCK_TOKEN_VERIFICATION_FAILED; readers and writers whose token expires
//! mid-stream get a new one from the om once and go on.

use crate::common;

use std::time::Duration;

use block_stream::{BlockStreamError, XceiverClientManager};
use bytes::Bytes;
use common::{CELL, data, ec_bucket, replicated_bucket, ri, test_config};
use minicluster::{MiniCluster, MiniClusterConfig};
use proto_crate::block_token::{
    AccessModes, BlockToken, BlockTokenIdentifier, BlockTokenSecret, SECRET_LEN, TokenScope,
};
use proto_crate::{ChecksumData, ChecksumType, ChunkInfo, ResultCode};

fn refused(r: Result<impl std::fmt::Debug, BlockStreamError>) -> String {
    match r {
        Err(
            e @ BlockStreamError::Datanode {
                code: ResultCode::BlockTokenVerificationFailed,
                ..
            },
        ) => {
            assert!(
                !e.is_location_failure(),
                "a token failure is not a bad location"
            );
            e.to_string()
        }
        other => panic!("expected BLOCK_TOKEN_VERIFICATION_FAILED, got {other:?}"),
    }
}

async fn secure_cluster(lifetime: Duration) -> (MiniCluster, ec_client::Client) {
    let cluster = MiniCluster::start(
        MiniClusterConfig::default().with_security(Some(om::BlockTokenConfig { lifetime })),
    )
    .await
    .expect("minicluster starts");
    let client = cluster.client_with(test_config()).await.expect("client");
    (cluster, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_by_the_datanode() {
    let (cluster, client) = secure_cluster(om::DEFAULT_BLOCK_TOKEN_LIFETIME).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let one = client
        .put_key("b", "one", None, &data(CELL + 5, 1))
        .await
        .expect("put");
    let other = client
        .put_key("b", "other", None, &data(CELL + 5, 2))
        .await
        .expect("put");
    let g = &one.block_groups[0];
    let token = g
        .token
        .clone()
        .expect("security on: the group carries a token");
    assert_eq!(
        token.identifier().expect("readable").modes,
        AccessModes::READ,
        "a committed key's token only reads"
    );
    let node = g.pipeline.nodes_for(ri(1)).next().expect("index 1");
    let raw = XceiverClientManager::direct(&node.address).expect("client");
    let block = g.block_id(ri(1));

    // The right token reads.
    let with = raw.clone().with_fixed_token(Some(&token));
    let record = with.get_block(block).await.expect("valid token");

    // Missing.
    let why = refused(raw.get_block(block).await);
    assert!(why.contains("no block token"), "{why}");

    // Wrong block: the other key's token.
    let theirs = raw
        .clone()
        .with_fixed_token(other.block_groups[0].token.as_ref());
    let why = refused(theirs.get_block(block).await);
    assert!(why.contains("not block"), "{why}");

    // Wrong mode: READ cannot write.
    let chunk = ChunkInfo {
        name: "forged".into(),
        offset: record.size,
        len: 4,
        checksum: ChecksumData {
            ty: ChecksumType::None,
            bytes_per_checksum: 1024,
            checksums: Vec::new(),
        },
    };
    let why = refused(
        with.write_chunk(block, chunk.clone(), Bytes::from_static(b"evil"))
            .await,
    );
    assert!(why.contains("WriteChunk needs WRITE"), "{why}");

    // Forged: every mode on every block, under the om's current key id but
    // signed with a secret of our own.
    let key_id = token.identifier().expect("readable").key_id;
    let forger = BlockTokenSecret {
        key_id,
        secret: [7; SECRET_LEN],
        active_from_unix_ms: 0,
        expires_unix_ms: u64::MAX,
    };
    let forged = forger.sign(&BlockTokenIdentifier {
        scope: TokenScope::AllBlocks,
        modes: AccessModes::ALL,
        expiry_unix_ms: u64::MAX,
        key_id,
        owner: "mallory".into(),
    });
    let why = refused(
        raw.clone()
            .with_fixed_token(Some(&forged))
            .write_chunk(block, chunk, Bytes::from_static(b"evil"))
            .await,
    );
    assert!(why.contains("signature"), "{why}");
    let junk = BlockToken::from_bytes(Bytes::from_static(b"not a token"));
    refused(
        raw.clone()
            .with_fixed_token(Some(&junk))
            .get_block(block)
            .await,
    );

    // Nothing was written: the key reads back exactly.
    assert_eq!(
        common::read_all(&client, "b", "one").await,
        data(CELL + 5, 1)
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_outlive_their_tokens_and_expired_tokens_are_refused() {
    let lifetime = Duration::from_secs(3);
    let (cluster, client) = secure_cluster(lifetime).await;
    ec_bucket(&client, "ec", 1 << 20).await;
    replicated_bucket(&client, "rep", 1 << 20).await;
    let len = 2 * CELL + 100;
    let src = data(len, 9);
    for bucket in ["ec", "rep"] {
        let info = client.put_key(bucket, "k", None, &src).await.expect("put");
        assert_eq!(info.block_groups.len(), 1);
    }
    let ec = client.open_key("ec", "k").await.expect("open");
    let rep = client.open_key("rep", "k").await.expect("open");
    let stale = client.key_info("ec", "k").await.expect("info").block_groups[0]
        .token
        .clone()
        .expect("token");
    let mut head = vec![0u8; 10];
    ec.read_exact_at(0, &mut head).await.expect("read");
    rep.read_exact_at(0, &mut head).await.expect("read");

    // A writer opened now too: its group's token expires before it closes.
    let mut w = client.create_key("ec", "slow", None).await.expect("create");
    w.write(&src[..CELL as usize]).await.expect("write");

    // Wait on the datanode's own verdict, not a clock guess: a token issued
    // after every other one (the streams', the writer's, `stale`) is polled
    // until the datanode refuses it as expired; then all of them are.
    let g = &client.key_info("ec", "k").await.expect("info").block_groups[0];
    let node = g.pipeline.nodes_for(ri(1)).next().expect("index 1");
    let probe = XceiverClientManager::direct(&node.address)
        .expect("client")
        .with_fixed_token(g.token.as_ref());
    let deadline = tokio::time::Instant::now() + lifetime + Duration::from_secs(30);
    let mut poll = tokio::time::interval(Duration::from_millis(100));
    loop {
        poll.tick().await;
        match probe.get_block(g.block_id(ri(1))).await {
            Ok(_) => assert!(
                tokio::time::Instant::now() < deadline,
                "a token outlived its lifetime by 30 s"
            ),
            Err(e) => {
                assert!(e.to_string().contains("expired"), "{e}");
                break;
            }
        }
    }

    // A raw call with the old token: expired.
    let why = refused(
        XceiverClientManager::direct(&node.address)
            .expect("client")
            .with_fixed_token(Some(&stale))
            .get_block(g.block_id(ri(1)))
            .await,
    );
    assert!(why.contains("expired"), "{why}");

    // The open streams renew theirs: exactly one refresh per group read.
    let before = client.metrics();
    let mut rest = vec![0u8; (len - 10) as usize];
    ec.read_exact_at(10, &mut rest)
        .await
        .expect("EC read past the lifetime");
    assert_eq!(rest, src[10..]);
    assert_eq!(client.metrics().since(&before).token_refreshes, 1);
    let before = client.metrics();
    rep.read_exact_at(10, &mut rest)
        .await
        .expect("replicated read past the lifetime");
    assert_eq!(rest, src[10..]);
    assert_eq!(client.metrics().since(&before).token_refreshes, 1);

    // The writer renews through its session and commits.
    w.write(&src[CELL as usize..])
        .await
        .expect("write past the lifetime");
    let info = w.close().await.expect("close past the lifetime");
    assert_eq!(info.length, len);
    assert_eq!(common::read_all(&client, "ec", "slow").await, src);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_security_off_no_tokens_are_issued_or_needed() {
    let cluster = MiniCluster::start(MiniClusterConfig::default().with_security(None))
        .await
        .expect("minicluster starts");
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "b", 1 << 20).await;
    let info = client
        .put_key("b", "k", None, &data(CELL, 3))
        .await
        .expect("put");
    let g = &info.block_groups[0];
    assert!(g.token.is_none());
    let node = g.pipeline.nodes_for(ri(1)).next().expect("index 1");
    XceiverClientManager::direct(&node.address)
        .expect("client")
        .get_block(g.block_id(ri(1)))
        .await
        .expect("no token needed");
    assert!(cluster.om().service_token().expect("token").is_none());
    cluster.shutdown().await;
}
