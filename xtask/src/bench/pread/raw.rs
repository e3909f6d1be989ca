//! The `pread` suite's raw rows: the reuse rows' key ranges read as bare
//! ReadChunk RPCs, with no EC or stream layer, as their baseline.

use std::time::Instant;

use anyhow::Context;
use ec_client::{Client, ReplicaIndex};

use super::super::{Latencies, Row, Settings};
use super::{WORKLOADS, one_mib_offsets, workload_offsets};

/// One data index of one block group, as the raw rows read it.
struct RawBlock {
    id: proto_crate::BlockId,
    dn: block_stream::XceiverClient,
    data: proto_crate::BlockData,
}

/// One block group of the key: its key offset, layout and data indexes.
struct RawGroup {
    start: u64,
    layout: ec_codec::BlockGroupLayout,
    blocks: Vec<RawBlock>,
}

/// Reads `span` of `block` as ReadChunk RPCs, chunk by chunk: exactly its
/// bytes, unchecked, or (`verified`) verified as a block stream does
/// (`XceiverClient::read_chunk_verified`: with the datanode's checksums of
/// the window bytes around them).
async fn read_span(
    block: &RawBlock,
    span: &ec_codec::CellSpan,
    verified: bool,
) -> anyhow::Result<()> {
    let mut at = span.offset_in_block;
    let end = at + span.len;
    while at < end {
        let chunk = block
            .data
            .chunks
            .get(block.data.chunks.partition_point(|c| c.end() <= at))
            .context("block shorter than the key says")?;
        let n = end.min(chunk.end()) - at;
        if verified {
            block.dn.read_chunk_verified(block.id, chunk, at, n).await?;
        } else {
            block.dn.read_chunk(block.id, chunk, at, n).await?;
        }
        at += n;
    }
    Ok(())
}

/// One op of the raw rows: key range `pos..pos + len` read as the `reuse`
/// client reads it (group after group; the cells of one group at once, as
/// `parallel_cell_reads` does), as ReadChunk RPCs with no EC layer.
async fn raw_op(groups: &[RawGroup], pos: u64, len: u64, verified: bool) -> anyhow::Result<()> {
    let end = pos + len;
    for g in groups {
        let g_end = g.start + g.layout.group_len();
        if g_end <= pos || g.start >= end {
            continue;
        }
        let range = pos.max(g.start) - g.start..end.min(g_end) - g.start;
        let spans: Vec<_> = g.layout.cells_for_range(range)?.collect();
        let reads = spans.iter().map(|span| async move {
            let block = g
                .blocks
                .get(span.replica_index.get() as usize - 1)
                .context("span on a parity index")?;
            read_span(block, span, verified).await
        });
        futures::future::try_join_all(reads).await?;
    }
    Ok(())
}

/// Raw ReadChunk RPCs for the `reuse` rows' key ranges (the same offsets,
/// split into cells by each group's layout and sent to the datanodes that
/// hold them, a group's cells at once as the client reads them), with no EC
/// layer: without checksum verification (the transport's limit,
/// `raw-readchunk`) and with it (`raw-verified`: each piece verified as a
/// block stream does, against the 16 KiB bytesPerChecksum windows around
/// it, the datanode sending the checksums of the window bytes it does not
/// send). reuse/raw-verified
/// is the EC and stream layers' own cost, raw-verified/raw-readchunk the
/// cost of end-to-end verification. `sequential-64k` covers the same bytes
/// as one 64 KiB ReadChunk per read, where the stream fetches 4 MiB windows
/// ahead: its ratio shows what read-ahead buys.
///
/// Reading the same datanodes matters: one ReadChunk's latency differs by up
/// to a third between the datanodes of one in-process cluster, so a raw row
/// served by index 1 alone is not a baseline for reads spread over 1..=d.
pub(super) async fn measure_raw(
    rows: &mut Vec<Row>,
    client: &Client,
    info: &ec_client::KeyInfo,
    ec: ec_codec::EcReplicationConfig,
    s: &Settings,
) -> anyhow::Result<()> {
    // A channel of its own per datanode, with the benchmark client's
    // transport settings and counters of its own (the RPCs of these modes
    // are counted there).
    let raw = block_stream::XceiverClientManager::new(
        client.config().xceiver.clone(),
        std::sync::Arc::default(),
    );
    let mut groups = Vec::new();
    let mut start = 0;
    for g in &info.block_groups {
        let mut blocks = Vec::new();
        for unit in 0..ec.data() {
            let index = ReplicaIndex::from_unit(unit).context("replica index")?;
            let node = g
                .pipeline
                .nodes_for(index)
                .next()
                .with_context(|| format!("no datanode holds index {index}"))?;
            // With security on, the raw reads carry the key's READ token.
            let dn = raw
                .client(&node.address)?
                .with_fixed_token(g.token.as_ref());
            let data = dn.get_block(g.block_id(index)).await?;
            blocks.push(RawBlock {
                id: g.block_id(index),
                dn,
                data,
            });
        }
        groups.push(RawGroup {
            start,
            layout: ec_codec::BlockGroupLayout::new(ec, g.length),
            blocks,
        });
        start += g.length;
    }
    // The four workloads with the reuse rows' offsets, and 1 MiB reads
    // beside `random-pread-1m` (the cell-parallelism rows' offsets).
    let mut workloads: Vec<_> = WORKLOADS
        .iter()
        .enumerate()
        .map(|(i, (name, size, _))| (*name, *size, workload_offsets(i, s.ops, info.length)))
        .collect();
    workloads.push(("random-pread-1m", 1 << 20, one_mib_offsets(s, info.length)));
    for (mode, verified) in [("raw-readchunk", false), ("raw-verified", true)] {
        for (name, size, offs) in &workloads {
            let mut lat = Latencies::default();
            let before = raw.metrics().snapshot();
            let start = Instant::now();
            for &o in offs {
                let t = Instant::now();
                raw_op(&groups, o, *size, verified).await?;
                lat.push(t.elapsed());
            }
            let elapsed = start.elapsed();
            let rpcs = raw.metrics().snapshot().since(&before);
            let ops = offs.len() as u64;
            rows.push(super::super::report::row(
                name,
                mode,
                1,
                ops,
                ops * size,
                elapsed,
                &lat,
                &rpcs,
            ));
        }
    }
    Ok(())
}
