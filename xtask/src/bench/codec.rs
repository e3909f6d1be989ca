//! The `codec` suite: Reed-Solomon encode and two-erasure decode throughput, in GB/s of data
//! (d cells per stripe), for rs-3-2, rs-6-3 and rs-10-4 with cache-resident 64 KiB cells and
//! 1 MiB cells, each with the vectorised kernel and the scalar one in the same run; ratios
//! `rs-D-P encode|decode 64k|1m simd/scalar`. The decode loses data units 0 and 1 (the
//! costliest case: both must be recomputed from the remaining data and parity). No cluster.

use std::time::{Duration, Instant};

use ec_codec::{Kernel, RsCodec};
use minicluster::pattern;

use super::{Latencies, Report, Row, Settings};

/// Stripes coded per measurement: about `target` bytes of data.
fn rounds(data: usize, cell: usize, target: usize) -> usize {
    (target / (data * cell)).max(3)
}

fn measure(
    codec: &RsCodec,
    cell: usize,
    rounds: usize,
    decode: bool,
) -> anyhow::Result<(Duration, Latencies)> {
    let (d, p) = (codec.data_units(), codec.parity_units());
    let cells: Vec<Vec<u8>> = (0..d)
        .map(|i| {
            let mut c = vec![0u8; cell];
            pattern::fill(31 + i as u64, 0, &mut c);
            c
        })
        .collect();
    let data: Vec<&[u8]> = cells.iter().map(Vec::as_slice).collect();
    let mut parity_cells: Vec<Vec<u8>> = vec![vec![0u8; cell]; p];
    {
        let mut outs: Vec<&mut [u8]> = parity_cells.iter_mut().map(Vec::as_mut_slice).collect();
        codec.encode(&data, &mut outs)?;
    }
    let mut units: Vec<Option<&[u8]>> = data.iter().map(|c| Some(*c)).collect();
    units.extend(parity_cells.iter().map(|c| Some(c.as_slice())));
    units[0] = None;
    units[1] = None;
    let mut out: Vec<Vec<u8>> = vec![vec![0u8; cell]; p];
    let mut elapsed = Duration::ZERO;
    let mut lat = Latencies::default();
    for _ in 0..rounds {
        let mut outs: Vec<&mut [u8]> = out.iter_mut().map(Vec::as_mut_slice).collect();
        let t = Instant::now();
        if decode {
            codec.reconstruct(&units, &[0, 1], &mut outs[..2])?;
        } else {
            codec.encode(&data, &mut outs)?;
        }
        let e = t.elapsed();
        elapsed += e;
        lat.push(e);
    }
    if decode && (out[0] != cells[0] || out[1] != cells[1]) {
        anyhow::bail!("decode did not recover the lost cells");
    }
    Ok((elapsed, lat))
}

pub(crate) async fn run(s: &Settings) -> anyhow::Result<Report> {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0));
    let target = if s.quick { 8 << 20 } else { 512 << 20 };
    let none = block_stream::MetricsSnapshot::default();
    let mut rows: Vec<Row> = Vec::new();
    let mut names = Vec::new();
    for (d, p) in [(3usize, 2usize), (6, 3), (10, 4)] {
        for (cell, cell_name) in [(64 << 10, "64k"), (1 << 20, "1m")] {
            for op in ["encode", "decode"] {
                let workload = format!("rs-{d}-{p} {op} {cell_name}");
                let n = rounds(d, cell, target);
                // Side by side: the two kernels alternate in halves so that noise falls on both.
                let mut runs = [
                    (Kernel::Auto, "simd", Duration::ZERO, Latencies::default()),
                    (
                        Kernel::Scalar,
                        "scalar",
                        Duration::ZERO,
                        Latencies::default(),
                    ),
                ];
                for _ in 0..2 {
                    for (kernel, _, total, lat) in &mut runs {
                        let codec = RsCodec::new(d, p)?.with_kernel(*kernel);
                        let (e, l) = measure(&codec, cell, n.div_ceil(2), op == "decode")?;
                        *total += e;
                        lat.extend(l);
                    }
                }
                for (_, mode, total, lat) in &runs {
                    let stripes = n.div_ceil(2) as u64 * 2;
                    let bytes = stripes * (d * cell) as u64;
                    rows.push(super::report::row(
                        &workload, mode, 1, stripes, bytes, *total, lat, &none,
                    ));
                }
                names.push(workload);
            }
        }
    }
    let mut report = Report {
        suite: "codec".into(),
        started_unix_ms: started,
        config: serde_json::json!({
            "simd_available": Kernel::simd_available(),
            "settings": s.config_json(),
        }),
        rows,
        ratios: Default::default(),
    };
    for w in &names {
        report.mb_ratio(&format!("{w} simd/scalar"), (w, "simd"), (w, "scalar"));
    }
    Ok(report)
}
