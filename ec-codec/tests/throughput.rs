//! Rough encode/decode throughput, run by hand:
//! `cargo test --release --test throughput -- --ignored --nocapture`. Prints numbers; asserts
//! nothing about speed.

use std::time::Instant;

use ec_codec::EcReplicationConfig;

/// rs-3-2 / rs-6-3 / rs-10-4 with 1 MiB cells: encode and 2-erasure reconstruct MB/s (data bytes).
#[test]
#[ignore = "benchmark; run explicitly in release"]
fn encode_throughput() {
    for scheme in [
        "rs-3-2-1024k",
        "rs-6-3-1024k",
        "rs-10-4-1024k",
        "xor-2-1-1024k",
    ] {
        let cfg: EcReplicationConfig = scheme.parse().expect("valid codec call");
        let coder = cfg.coder();
        let c = cfg.cell_size() as usize;
        let data: Vec<Vec<u8>> = (0..cfg.data())
            .map(|j| (0..c).map(|i| (i * 31 + j * 7) as u8).collect())
            .collect();
        let mut parity = vec![vec![0u8; c]; cfg.parity()];
        let inputs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let rounds = 100;
        let t = Instant::now();
        for _ in 0..rounds {
            let mut out: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            coder.encode(&inputs, &mut out).expect("valid codec call");
        }
        let secs = t.elapsed().as_secs_f64();
        let mb = (rounds * cfg.stripe_size() as usize) as f64 / 1e6;
        let all: Vec<&[u8]> = inputs
            .iter()
            .copied()
            .chain(parity.iter().map(Vec::as_slice))
            .collect();
        let lost: Vec<usize> = (0..cfg.parity().min(2)).collect();
        let units: Vec<Option<&[u8]>> = (0..cfg.total())
            .map(|u| (!lost.contains(&u)).then_some(all[u]))
            .collect();
        let mut rebuilt = vec![vec![0u8; c]; lost.len()];
        let t = Instant::now();
        for _ in 0..rounds {
            let mut out: Vec<&mut [u8]> = rebuilt.iter_mut().map(Vec::as_mut_slice).collect();
            coder
                .reconstruct(&units, &lost, &mut out)
                .expect("valid codec call");
        }
        let dsecs = t.elapsed().as_secs_f64();
        println!(
            "{scheme}: encode {:.0} MB/s, reconstruct {lost:?} {:.0} MB/s (stripe data bytes)",
            mb / secs,
            mb / dsecs
        );
    }
}
