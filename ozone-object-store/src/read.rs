//! Reads: `get_opts` (conditions, ranges, `head`) streamed from a
//! [`KeyInputStream`] that reads ahead, and `get_ranges` as one vectored
//! read ([`KeyInputStream::read_ranges`]).

use std::io::SeekFrom;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use ec_client::{ClientError, KeyInputStream};
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, GetResult, GetResultPayload, Result};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::OzoneStore;
use crate::error::{OzoneStoreError, from_client, generic, not_supported};
use crate::meta::{attributes_of, key_of, object_meta};

/// Bytes of each piece a GET stream yields.
const PIECE: usize = 1 << 20;

/// The bytes `range` names in an object of `len` bytes, by object_store's
/// rules (a bounded range past the end is cut at the end; a start past the
/// end is refused).
fn resolve(range: &GetRange, len: u64) -> Result<Range<u64>> {
    range.as_range(len).map_err(|_| {
        let (start, end) = match range {
            GetRange::Bounded(r) => (r.start, r.end),
            GetRange::Offset(o) => (*o, len),
            GetRange::Suffix(n) => (len.saturating_sub(*n), len),
        };
        generic(OzoneStoreError::RangeNotSatisfiable { start, end, len })
    })
}

/// `get_opts`: one om lookup; for `head`, no datanode RPC.
pub(crate) async fn get(
    store: &OzoneStore,
    location: &Path,
    options: GetOptions,
) -> Result<GetResult> {
    if options.version.is_some() {
        return Err(not_supported(
            "reading an older version (the om keeps none)",
        ));
    }
    let mut reader = store
        .client
        .open_key(&store.bucket, key_of(location))
        .await
        .map_err(|e| from_client(location, e))?;
    let info = reader.info().clone();
    let meta = object_meta(location.clone(), &info);
    options.check_preconditions(&meta)?;
    let range = match &options.range {
        Some(r) => resolve(r, info.length)?,
        None => 0..info.length,
    };
    let attributes = attributes_of(&info.metadata);
    let payload = if options.head {
        futures::stream::empty().boxed()
    } else {
        reader
            .seek(SeekFrom::Start(range.start))
            .await
            .map_err(generic)?;
        stream(reader, range.end - range.start, location.clone())
    };
    Ok(GetResult {
        payload: GetResultPayload::Stream(payload),
        meta,
        range,
        attributes,
        extensions: Default::default(),
    })
}

/// `left` bytes from `reader`'s position, in pieces of up to [`PIECE`]
/// bytes; sequential, so the reader's read-ahead keeps the next windows in
/// flight while the caller consumes a piece.
fn stream(
    reader: KeyInputStream,
    left: u64,
    location: Path,
) -> futures::stream::BoxStream<'static, Result<Bytes>> {
    futures::stream::try_unfold((reader, left), move |(mut reader, left)| {
        let location = location.clone();
        async move {
            if left == 0 {
                return Ok(None);
            }
            let want = usize::try_from(left).unwrap_or(PIECE).min(PIECE);
            let mut buf = BytesMut::zeroed(want);
            reader
                .read_exact(&mut buf)
                .await
                .map_err(|e| match ClientError::from_io(e) {
                    Ok(client) => from_client(&location, client),
                    Err(io) => generic(io),
                })?;
            Ok(Some((buf.freeze(), (reader, left - want as u64))))
        }
    })
    .boxed()
}

/// The smallest set of disjoint ranges covering `ranges`, in offset order
/// (overlapping ranges merged; touching ones kept apart — the vectored read
/// merges those itself).
fn disjoint_cover(ranges: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut sorted: Vec<Range<u64>> = ranges.to_vec();
    sorted.sort_by_key(|r| (r.start, r.end));
    let mut cover: Vec<Range<u64>> = Vec::with_capacity(sorted.len());
    for r in sorted {
        match cover.last_mut() {
            Some(c) if r.start < c.end || (r.start == c.start) => c.end = c.end.max(r.end),
            _ => cover.push(r),
        }
    }
    cover
}

/// `get_ranges`: every range checked against the object first (as
/// `get_range` would), then all read in one vectored call. The vectored read
/// refuses overlapping ranges (Hadoop's `readVectored` contract) and
/// object_store allows them, so overlapping ranges are read once as their
/// union and each answer is a zero-copy slice of it.
pub(crate) async fn get_ranges(
    store: &OzoneStore,
    location: &Path,
    ranges: &[Range<u64>],
) -> Result<Vec<Bytes>> {
    let reader = store
        .client
        .open_key(&store.bucket, key_of(location))
        .await
        .map_err(|e| from_client(location, e))?;
    let len = reader.len();
    let resolved = ranges
        .iter()
        .map(|r| resolve(&GetRange::Bounded(r.clone()), len))
        .collect::<Result<Vec<_>>>()?;
    let cover = disjoint_cover(&resolved);
    let fetched = reader
        .read_ranges(&cover)
        .await
        .map_err(|e| from_client(location, e))?;
    Ok(resolved
        .iter()
        .map(|r| {
            // The last cover starting at or before `r` holds it.
            let i = cover
                .partition_point(|c| c.start <= r.start)
                .saturating_sub(1);
            let (c, bytes) = (&cover[i], &fetched[i]);
            let from = usize::try_from(r.start - c.start).unwrap_or(usize::MAX);
            let to = usize::try_from(r.end - c.start).unwrap_or(usize::MAX);
            bytes.slice(from..to)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The cover is disjoint, sorted, and holds each range inside the
        /// cover entry `get_ranges` looks it up in.
        #[test]
        fn every_range_lies_in_the_cover_entry_it_is_looked_up_in(
            ranges in prop::collection::vec((0u64..64, 0u64..16), 0..12),
        ) {
            let ranges: Vec<Range<u64>> = ranges.into_iter().map(|(s, l)| s..s + l).collect();
            let cover = disjoint_cover(&ranges);
            for w in cover.windows(2) {
                prop_assert!(w[0].end <= w[1].start, "{cover:?}");
            }
            for r in &ranges {
                let i = cover.partition_point(|c| c.start <= r.start).saturating_sub(1);
                prop_assert!(cover[i].start <= r.start && r.end <= cover[i].end, "{r:?} in {cover:?}");
            }
        }
    }
}
