//! Golden vectors from ISA-L 2.30 (see `testdata/ec-golden/README.md`): our Cauchy RS coder must
//! produce the same parity bytes, so that Ozone/HDFS clients and datanodes can decode what we
//! write and we can decode what they write.

use ec_codec::{BlockGroupLayout, EcCodec, EcError, EcReplicationConfig, ReplicaIndex, RsCodec};

const SCHEMES: [(usize, usize); 3] = [(3, 2), (6, 3), (10, 4)];
const LENGTHS: [usize; 3] = [1, 1001, 4096];

fn read(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/testdata/ec-golden/{name}",
        concat!(env!("CARGO_MANIFEST_DIR"))
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The README's data generator: splitmix64 from `seed`, outputs little-endian, truncated.
fn splitmix64_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        out.extend_from_slice(&z.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// One golden vector: data cells and parity cells.
struct Vector {
    data: Vec<Vec<u8>>,
    parity: Vec<Vec<u8>>,
}

fn vector(d: usize, p: usize, len: usize) -> Vector {
    let stem = format!("rs-{d}-{p}-{len}");
    let data = read(&format!("{stem}.data"));
    let parity = read(&format!("{stem}.parity"));
    assert_eq!(data.len(), d * len, "{stem}.data size");
    assert_eq!(parity.len(), p * len, "{stem}.parity size");
    Vector {
        data: data.chunks(len).map(<[u8]>::to_vec).collect(),
        parity: parity.chunks(len).map(<[u8]>::to_vec).collect(),
    }
}

fn encode(rs: &RsCodec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let mut parity = vec![vec![0u8; len]; rs.parity_units()];
    let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let mut outputs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
    rs.encode(&inputs, &mut outputs)
        .expect("golden vectors are present and well-formed");
    parity
}

/// Every `.data` file is the splitmix64 seed-42 stream the README describes.
#[test]
fn data_files_are_splitmix64_seed_42() {
    for (d, p) in SCHEMES {
        for len in LENGTHS {
            let file = read(&format!("rs-{d}-{p}-{len}.data"));
            assert_eq!(file, splitmix64_bytes(42, d * len), "rs-{d}-{p}-{len}.data");
        }
    }
}

/// Our parity equals ISA-L's byte for byte, for every scheme and length.
#[test]
fn parity_matches_isa_l() {
    for (d, p) in SCHEMES {
        let rs = RsCodec::new(d, p).expect("golden vectors are present and well-formed");
        for len in LENGTHS {
            let v = vector(d, p, len);
            assert!(
                encode(&rs, &v.data) == v.parity,
                "rs-{d}-{p}-{len} parity differs"
            );
        }
    }
}

/// The encode matrix rows equal those the README lists (ISA-L's gf_gen_cauchy1_matrix).
#[test]
fn matrix_rows_match_readme() {
    let rows: [(usize, usize, Vec<Vec<u8>>); 3] = [
        (3, 2, vec![vec![0xf4, 0x8e, 0x01], vec![0x47, 0xa7, 0x7a]]),
        (
            6,
            3,
            vec![
                vec![0x7a, 0xba, 0x47, 0xa7, 0x8e, 0xf4],
                vec![0xba, 0x7a, 0xa7, 0x47, 0xf4, 0x8e],
                vec![0xad, 0x9d, 0xdd, 0x98, 0x3d, 0xaa],
            ],
        ),
        (
            10,
            4,
            vec![
                vec![0xdd, 0x98, 0xad, 0x9d, 0x5d, 0x96, 0x3d, 0xaa, 0x8e, 0xf4],
                vec![0x98, 0xdd, 0x9d, 0xad, 0x96, 0x5d, 0xaa, 0x3d, 0xf4, 0x8e],
                vec![0x3d, 0xaa, 0x5d, 0x96, 0xad, 0x9d, 0xdd, 0x98, 0x47, 0xa7],
                vec![0xaa, 0x3d, 0x96, 0x5d, 0x9d, 0xad, 0x98, 0xdd, 0xa7, 0x47],
            ],
        ),
    ];
    for (d, p, want) in rows {
        let rs = RsCodec::new(d, p).expect("golden vectors are present and well-formed");
        for (i, row) in want.iter().enumerate() {
            assert_eq!(rs.parity_row(i), Some(row.as_slice()), "rs-{d}-{p} row {i}");
        }
        assert_eq!(rs.parity_row(p), None);
    }
}

/// All subsets of `0..n` with exactly `k` members, as sorted index lists.
fn subsets(n: usize, k: usize) -> Vec<Vec<usize>> {
    (0u32..1 << n)
        .filter(|m| m.count_ones() as usize == k)
        .map(|m| (0..n).filter(|i| m & (1 << i) != 0).collect())
        .collect()
}

/// Every erasure pattern of 1..=p units (data and parity alike) is reconstructed exactly from
/// the golden cells; every pattern of p+1 erasures is refused with TooManyErasures.
#[test]
fn every_erasure_pattern_recovers() {
    for (d, p) in SCHEMES {
        let coder = EcReplicationConfig::new(EcCodec::Rs, d, p, 1001)
            .expect("golden vectors are present and well-formed")
            .coder();
        let v = vector(d, p, 1001);
        let all: Vec<&[u8]> = v.data.iter().chain(&v.parity).map(Vec::as_slice).collect();
        let total = d + p;
        for k in 1..=p + 1 {
            for erased in subsets(total, k) {
                let units: Vec<Option<&[u8]>> = (0..total)
                    .map(|i| (!erased.contains(&i)).then_some(all[i]))
                    .collect();
                let mut bufs = vec![vec![0u8; 1001]; erased.len()];
                let mut out: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
                let result = coder.reconstruct(&units, &erased, &mut out);
                if k <= p {
                    result.expect("golden vectors are present and well-formed");
                    for (buf, &e) in bufs.iter().zip(&erased) {
                        assert!(buf == all[e], "rs-{d}-{p}: unit {e} of {erased:?} wrong");
                    }
                } else {
                    assert_eq!(
                        result,
                        Err(EcError::TooManyErasures {
                            available: total - k,
                            needed: d
                        })
                    );
                }
            }
        }
    }
}

/// End to end over the layout: split a group with a partial last stripe into cells, zero-pad
/// each stripe to its parity length, encode, drop p internal blocks and rebuild the data.
#[test]
fn partial_stripe_group_round_trip() {
    let cfg: EcReplicationConfig = "rs-6-3-1k"
        .parse()
        .expect("golden vectors are present and well-formed");
    let len = 3 * cfg.stripe_size() + 2500;
    let layout = BlockGroupLayout::new(cfg, len);
    let group = splitmix64_bytes(7, len as usize);
    let coder = cfg.coder();
    let (d, total) = (cfg.data(), cfg.total());
    // Internal blocks, as written (no padding stored).
    let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); total];
    for stripe in 0..layout.stripe_count() {
        let parity_len = layout
            .cell_len(stripe, ri(d))
            .expect("golden vectors are present and well-formed") as usize;
        let start = layout.stripe_range(stripe).start as usize;
        let mut cells = vec![vec![0u8; parity_len]; total];
        for r in 1..=d {
            let n = layout
                .cell_len(stripe, ri(r - 1))
                .expect("golden vectors are present and well-formed") as usize;
            if n == 0 {
                continue;
            }
            let off = start + (r - 1) * cfg.cell_size() as usize;
            cells[r - 1][..n].copy_from_slice(&group[off..off + n]);
            blocks[r - 1].extend_from_slice(&cells[r - 1][..n]);
        }
        let (data, parity) = cells.split_at_mut(d);
        let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let mut outputs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
        coder
            .encode(&inputs, &mut outputs)
            .expect("golden vectors are present and well-formed");
        for (i, cell) in parity.iter().enumerate() {
            blocks[d + i].extend_from_slice(cell);
        }
    }
    for (i, block) in blocks.iter().enumerate() {
        assert_eq!(
            block.len() as u64,
            layout
                .internal_block_len(ri(i))
                .expect("golden vectors are present and well-formed")
        );
    }
    // Lose data indexes 1 and 5 and parity index 8; rebuild the group from the rest.
    let lost = [0usize, 4, 7];
    let mut rebuilt = vec![0u8; len as usize];
    for stripe in 0..layout.stripe_count() {
        let parity_len = layout
            .cell_len(stripe, ri(d))
            .expect("golden vectors are present and well-formed") as usize;
        let cells: Vec<Vec<u8>> = (0..total)
            .map(|u| {
                let n = layout
                    .cell_len(stripe, ri(u))
                    .expect("golden vectors are present and well-formed")
                    as usize;
                let off = (stripe * cfg.cell_size()) as usize;
                let mut cell = vec![0u8; parity_len];
                if n > 0 {
                    cell[..n].copy_from_slice(&blocks[u][off..off + n]);
                }
                cell
            })
            .collect();
        let units: Vec<Option<&[u8]>> = (0..total)
            .map(|u| (!lost.contains(&u)).then_some(cells[u].as_slice()))
            .collect();
        let wanted: Vec<usize> = (0..d).collect();
        let mut data = vec![vec![0u8; parity_len]; d];
        let mut out: Vec<&mut [u8]> = data.iter_mut().map(Vec::as_mut_slice).collect();
        coder
            .reconstruct(&units, &wanted, &mut out)
            .expect("golden vectors are present and well-formed");
        let start = layout.stripe_range(stripe).start;
        for span in layout
            .cells_for_range(layout.stripe_range(stripe))
            .expect("golden vectors are present and well-formed")
        {
            let src = &data[span.replica_index.unit()][span.offset_in_cell as usize..]
                [..span.len as usize];
            let at = span.group_offset as usize;
            rebuilt[at..at + span.len as usize].copy_from_slice(src);
            assert!(span.group_offset >= start);
        }
    }
    assert!(rebuilt == group);
}

/// The replica index of 0-based unit `unit`.
fn ri(unit: usize) -> ReplicaIndex {
    ReplicaIndex::from_unit(unit).expect("a unit of a real scheme")
}
