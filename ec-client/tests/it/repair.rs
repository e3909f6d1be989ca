//! EC repair of a block group (`om::reconstruct_ec_indexes` → the target datanode's
//! `EcReconstructionCoordinator`), over real gRPC: a rebuilt index restores the group's
//! redundancy, its block is byte-for-byte and chunk-for-chunk what the write path stored, a
//! corrupt source is skipped, and too few sources fail without touching the key.

use crate::common;

use block_stream::XceiverClientManager;
use common::{
    CELL, Failure, STRIPE, check_stored_lengths, data, ec_bucket, fail, failure_cluster, node_of,
    outside_datanode, read_all, ri, rs32,
};
use ec_client::KeyInfo;
use proto_crate::{BlockData, DatanodeId, ReplicaIndex};

/// The committed record and bytes of index `r` of group 0 at its (first) location.
async fn stored_block(info: &KeyInfo, r: ReplicaIndex) -> (BlockData, Vec<u8>) {
    let g = &info.block_groups[0];
    let node = g.pipeline.nodes_for(r).next().expect("a location");
    let dn = XceiverClientManager::direct(&node.address)
        .expect("client")
        .with_fixed_token(g.token.as_ref());
    let block = dn.get_block(g.block_id(r)).await.expect("block record");
    let mut bytes = Vec::new();
    for c in &block.chunks {
        bytes.extend_from_slice(
            &dn.read_chunk(g.block_id(r), c, c.offset, c.len)
                .await
                .expect("chunk"),
        );
    }
    (block, bytes)
}

fn uuid(s: &str) -> DatanodeId {
    s.parse().expect("a datanode id")
}

/// Losing index 2 (data), 5 (parity) or 1 (the only data index of the last, one-byte stripe):
/// once rebuilt on a sixth datanode, the key still reads exactly after two more of the
/// original five datanodes stop — three lost in all, which rs-3-2 cannot survive unrepaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_index_restores_redundancy() {
    for lost in [2u32, 5, 1] {
        let (mut cluster, client) = failure_cluster(6).await;
        ec_bucket(&client, "b", 1 << 20).await;
        let src = data(2 * STRIPE + 1, u64::from(lost));
        let info = client.put_key("b", "k", None, &src).await.expect("put");
        let victim = node_of(&cluster, &info, 0, lost);
        fail(&mut cluster, victim, Failure::Down).await;
        let spare = outside_datanode(&cluster, &info);
        let repaired =
            om::reconstruct_ec_indexes(cluster.om(), "b", "k", 0, &[(ri(lost), uuid(&spare))])
                .await
                .unwrap_or_else(|e| panic!("rebuild of index {lost}: {e}"));
        let g = &repaired.block_groups[0];
        assert_eq!(g.pipeline.locations.len(), 5, "one location per index");
        let holder: Vec<_> = g.pipeline.nodes_for(ri(lost)).collect();
        assert_eq!(holder.len(), 1);
        assert_eq!(holder[0].uuid.as_str(), spare);
        check_stored_lengths(&repaired).await;

        // Two more of the original five stop: only the rebuilt index keeps the key readable.
        let others: Vec<u32> = (1..=5).filter(|&r| r != lost).take(2).collect();
        for r in others {
            let n = node_of(&cluster, &repaired, 0, r);
            fail(&mut cluster, n, Failure::Down).await;
        }
        assert!(
            read_all(&client, "b", "k").await == src,
            "key with index {lost} rebuilt"
        );
        cluster.shutdown().await;
    }
}

/// For group lengths at every layout boundary, each index rebuilt from the other four is the
/// same block the write path stored: same length, same chunks (offsets, lengths, checksums)
/// and same bytes. Padding indexes get an empty record, as the write path gives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_blocks_equal_what_the_write_path_stored() {
    let (cluster, client) = failure_cluster(6).await;
    ec_bucket(&client, "b", 1 << 20).await;
    for (n, len) in [CELL, CELL + 1, STRIPE, 2 * STRIPE + CELL + 5]
        .into_iter()
        .enumerate()
    {
        for r in rs32().replica_indexes() {
            let key = format!("k{n}-{r}");
            let info = client
                .put_key("b", &key, None, &data(len, n as u64))
                .await
                .expect("put");
            let (want, want_bytes) = stored_block(&info, r).await;
            let spare = outside_datanode(&cluster, &info);
            let repaired =
                om::reconstruct_ec_indexes(cluster.om(), "b", &key, 0, &[(r, uuid(&spare))])
                    .await
                    .unwrap_or_else(|e| panic!("length {len} index {r}: {e}"));
            let (got, got_bytes) = stored_block(&repaired, r).await;
            assert_eq!(got.size, want.size, "length {len} index {r}");
            assert_eq!(got.chunks, want.chunks, "length {len} index {r}");
            assert_eq!(got.metadata, want.metadata, "length {len} index {r}");
            assert!(got_bytes == want_bytes, "length {len} index {r}: bytes");
        }
    }
    cluster.shutdown().await;
}

/// A source that answers ReadChunk with corrupt bytes is caught by its checksums and replaced
/// by another index; the rebuilt block is still exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_source_is_skipped() {
    let (mut cluster, client) = failure_cluster(6).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(2 * STRIPE + CELL + 5, 3);
    let info = client.put_key("b", "k", None, &src).await.expect("put");
    let (want, want_bytes) = stored_block(&info, ri(2)).await;
    let corrupt = node_of(&cluster, &info, 0, 1);
    fail(&mut cluster, corrupt, Failure::Corrupt).await;
    let spare = outside_datanode(&cluster, &info);
    let healthy = node_of(&cluster, &info, 0, 3);
    let sent =
        |cluster: &minicluster::MiniCluster| cluster.datanodes()[healthy].metrics().read_bytes();
    let before = sent(&cluster);
    let repaired = om::reconstruct_ec_indexes(cluster.om(), "b", "k", 0, &[(ri(2), uuid(&spare))])
        .await
        .expect("rebuilt around the corrupt source");
    let (got, got_bytes) = stored_block(&repaired, ri(2)).await;
    assert_eq!(got.chunks, want.chunks);
    assert!(got_bytes == want_bytes);
    let injected = cluster.datanodes()[corrupt].faults().injected();
    assert!(injected > 0, "the corrupt source was read");
    // Stripe 0 was planned from indexes 1, 3 and 4, and re-planned from 3,
    // 4 and 5 when 1 failed: index 3's cells were read once each (its block
    // is 2 cells), not again for the re-plan.
    assert_eq!(sent(&cluster) - before, 2 * CELL, "index 3's bytes, once");
    cluster.shutdown().await;
}

/// With three of five indexes gone no index can be rebuilt: the om says why and the key's
/// locations stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_sources_fail_and_change_nothing() {
    let (mut cluster, client) = failure_cluster(6).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let info = client
        .put_key("b", "k", None, &data(2 * STRIPE, 4))
        .await
        .expect("put");
    for r in [1, 2, 4] {
        let n = node_of(&cluster, &info, 0, r);
        fail(&mut cluster, n, Failure::Down).await;
    }
    let spare = outside_datanode(&cluster, &info);
    let err = om::reconstruct_ec_indexes(cluster.om(), "b", "k", 0, &[(ri(1), uuid(&spare))])
        .await
        .unwrap_err();
    assert!(
        matches!(&err, om::OmError::InsufficientSources(m) if m.contains("INSUFFICIENT_SOURCES: ")),
        "{err}"
    );
    let after = client.key_info("b", "k").await.expect("info");
    assert_eq!(after.block_groups, info.block_groups);
    // The failed rebuild's target is logged for deletion (it may hold part of a block); until
    // that deletion is done, no copy of the group may be registered there: the deletion is by
    // block and would take it.
    assert!(cluster.om().pending_deletions().await.expect("log") >= 1);
    let err = om::add_replica(cluster.om(), "b", "k", 0, Some(ri(3)), &spare)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, om::OmError::InvalidArgument(m) if m.contains("deletion")),
        "{err}"
    );
    cluster.shutdown().await;
}

/// A copy that does not fit the group — longer than the layout's length for its index, or of
/// the right length but recorded for another group length — is skipped when the coordinator
/// opens its sources, so the rebuild never decodes from it: with the true index 1 unavailable
/// and the bogus spare of index 1 the only copy of that index, index 2 is rebuilt exactly
/// from indexes 3, 4 and 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_that_does_not_fit_the_group_is_skipped() {
    let (mut cluster, client) = failure_cluster(7).await;
    ec_bucket(&client, "b", 1 << 20).await;
    let src = data(2 * STRIPE + 5, 6);
    let index_1 = 2 * CELL + 5;
    for (case, (len, group_len)) in [
        (index_1 + 100, src.len() as u64),
        (index_1, src.len() as u64 + 1),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("k{case}");
        let info = client.put_key("b", &key, None, &src).await.expect("put");
        let (want, want_bytes) = stored_block(&info, ri(2)).await;
        let g = &info.block_groups[0];

        // A bogus spare of index 1 on a datanode outside the group: zeros, with checksums
        // that cannot catch them (none).
        let bogus = outside_datanode(&cluster, &info);
        let bogus_dn = cluster.datanode_by_uuid(&bogus).expect("dn");
        let store = bogus_dn.node().expect("running").store();
        let meta = [(
            proto_crate::BLOCK_GROUP_LENGTH_KEY.to_string(),
            group_len.to_string(),
        )]
        .into();
        common::plant_with(store, g.block_id(ri(1)), vec![0u8; len as usize], meta).await;
        let spare = proto_crate::BlockLocation {
            datanode: bogus_dn.node().expect("running").details().clone(),
            replica_index: Some(ri(1)),
        };
        let with_spare = cluster
            .om()
            .add_location("b", &key, 0, (g.container_id, g.local_id), spare)
            .await
            .expect("spare recorded");
        // The true index 1 answers nothing.
        let first = node_of(&cluster, &info, 0, 1);
        fail(&mut cluster, first, Failure::Down).await;

        let used: Vec<String> = with_spare.block_groups[0]
            .pipeline
            .locations
            .iter()
            .map(|l| l.datanode.uuid.to_string())
            .collect();
        let target = cluster
            .datanodes()
            .iter()
            .find(|d| d.is_running() && !used.iter().any(|u| u == d.uuid()))
            .expect("a seventh datanode")
            .uuid()
            .to_string();
        let repaired =
            om::reconstruct_ec_indexes(cluster.om(), "b", &key, 0, &[(ri(2), uuid(&target))])
                .await
                .expect("rebuilt without the bogus copy");
        let (got, got_bytes) = stored_block(&repaired, ri(2)).await;
        assert_eq!(got.chunks, want.chunks, "case {case}");
        assert!(got_bytes == want_bytes, "case {case}: bytes");
        cluster
            .datanode_mut(first)
            .expect("dn")
            .restart()
            .await
            .expect("restart");
    }
    cluster.shutdown().await;
}
