//! The datanode's protocol rules, checked over real gRPC: replica index
//! checks, out-of-range reads, the read-length cap, and restart durability.

use crate::common;

use block_stream::BlockStreamError;
use common::{CELL, cluster, data, ec_bucket, ri};
use proto_crate::ResultCode;
use tokio::io::AsyncReadExt;

fn code_of(e: &BlockStreamError) -> Option<ResultCode> {
    match e {
        BlockStreamError::Datanode { code, .. } => Some(*code),
        _ => None,
    }
}

/// GetBlock with another replica index is rejected (never another index's
/// data); ReadChunk past the block end gets OUT_OF_RANGE; a length above the
/// cap is rejected before the datanode allocates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datanode_rejects_bad_reads() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "b", 1 << 20).await;
    let info = client
        .put_key("b", "k", None, &data(2 * CELL + 10, 5))
        .await
        .expect("put");
    let g = &info.block_groups[0];
    let node = g.pipeline.nodes_for(ri(1)).next().expect("index 1");
    let dn = block_stream::XceiverClientManager::direct(&node.address)
        .expect("client")
        .with_fixed_token(g.token.as_ref());

    let err = dn.get_block(g.block_id(ri(2))).await.unwrap_err();
    assert_eq!(
        code_of(&err),
        Some(ResultCode::ReplicaIndexMismatch),
        "{err}"
    );
    assert!(err.is_location_failure());

    let block = dn.get_block(g.block_id(ri(1))).await.expect("block");
    let chunk = block.chunks[0].clone();
    let err = dn
        .read_chunk(g.block_id(ri(1)), &chunk, CELL - 10, 20)
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), Some(ResultCode::OutOfRange), "{err}");

    let err = dn
        .read_chunk(g.block_id(ri(1)), &chunk, 0, datanode::MAX_READ_LEN + 1)
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), Some(ResultCode::LengthTooLarge), "{err}");
    assert!(
        !err.is_location_failure(),
        "a caller error is not a failed location"
    );

    let missing = proto_crate::BlockId {
        local_id: g.local_id + 1000,
        ..g.block_id(ri(1))
    };
    // The key's token covers only its own group: probing another block
    // takes the om's service token.
    let service = cluster.om().service_token().expect("service token");
    let err = block_stream::XceiverClientManager::direct(&node.address)
        .expect("client")
        .with_fixed_token(service.as_ref())
        .get_block(missing)
        .await
        .unwrap_err();
    assert_eq!(code_of(&err), Some(ResultCode::NoSuchBlock), "{err}");
    cluster.shutdown().await;
}

/// Every datanode restarted on the same data dir serves the same blocks, and
/// a client that had cached channels reconnects by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_datanodes_serve_the_same_blocks() {
    let (mut cluster, client) = cluster().await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(5 * CELL + 17, 6);
    client.put_key("b", "k", None, &src).await.expect("put");
    for i in 0..cluster.datanodes().len() {
        let dn = cluster.datanode_mut(i).expect("datanode");
        let address = dn.address();
        dn.stop().await;
        dn.restart().await.expect("restart");
        assert_eq!(dn.address(), address, "same port after restart");
    }
    let mut stream = client.open_key("b", "k").await.expect("open");
    let mut all = Vec::new();
    stream
        .read_to_end(&mut all)
        .await
        .expect("read after restart");
    assert!(all == src);
    cluster.shutdown().await;
}
