//! What lands on the datanodes: every internal block's committed length
//! matches ARCHITECTURE.md's layout formulas, data indexes past the data still have an
//! (empty) block record, and every record carries `blockGroupLength`.

use crate::common;

use common::{CELL, STRIPE, cluster, data, ec_bucket, rs32};
use ec_codec::BlockGroupLayout;

/// Internal block lengths on each datanode equal the layout math, for sizes
/// around cell and stripe boundaries and a key spanning several groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_internal_block_lengths_match_layout() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "b", 2 * CELL).await;
    for len in [
        1,
        CELL - 1,
        CELL,
        CELL + 1,
        2 * CELL + 3,
        STRIPE,
        STRIPE + 1,
        2 * STRIPE + CELL + 5,
        5 * STRIPE + 1,
    ] {
        let key = format!("k{len}");
        let info = client
            .put_key("b", &key, None, &data(len, 7))
            .await
            .expect("put");
        for g in &info.block_groups {
            let layout = BlockGroupLayout::new(rs32(), g.length);
            for r in rs32().replica_indexes() {
                let node = g.pipeline.nodes_for(r).next().expect("location per index");
                let dn = block_stream::XceiverClientManager::direct(&node.address)
                    .expect("client")
                    .with_fixed_token(g.token.as_ref());
                let block = dn
                    .get_block(g.block_id(r))
                    .await
                    .unwrap_or_else(|e| panic!("key of {len}: index {r} has no block record: {e}"));
                let expected = layout.internal_block_len(r).expect("valid index");
                assert_eq!(
                    block.size, expected,
                    "key of {len}, group {}, index {r}",
                    g.local_id
                );
                assert_eq!(
                    dn.get_committed_block_length(g.block_id(r))
                        .await
                        .expect("length"),
                    expected
                );
                assert_eq!(
                    block.block_group_length(),
                    Some(g.length),
                    "blockGroupLength of index {r}"
                );
                if r.unit() >= layout.expected_data_locations() && rs32().is_data(r) {
                    assert!(
                        block.chunks.is_empty(),
                        "padding index {r} must hold no chunks"
                    );
                }
            }
        }
    }
    cluster.shutdown().await;
}

/// A key smaller than one cell: parity indexes hold exactly that many bytes,
/// and the two unused data indexes have empty records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_smaller_than_a_cell_has_short_parity_and_empty_records() {
    let (cluster, client) = cluster().await;
    ec_bucket(&client, "b", 1 << 20).await;
    let info = client
        .put_key("b", "tiny", None, &data(100, 1))
        .await
        .expect("put");
    let g = &info.block_groups[0];
    let mut sizes = Vec::new();
    for r in rs32().replica_indexes() {
        let node = g.pipeline.nodes_for(r).next().expect("location");
        let dn = block_stream::XceiverClientManager::direct(&node.address)
            .expect("client")
            .with_fixed_token(g.token.as_ref());
        sizes.push(dn.get_block(g.block_id(r)).await.expect("record").size);
    }
    assert_eq!(sizes, vec![100, 0, 0, 100, 100]);
    cluster.shutdown().await;
}
