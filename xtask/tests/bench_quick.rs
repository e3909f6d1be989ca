//! Regression guard for the benchmark (not a timing test): runs
//! `cargo xtask bench --quick` and asserts only counts — zero GetBlock after
//! warm-up in Reuse mode, one GetBlock per touched cell in ReaderPerCall
//! mode (HDDS-10135's regression), that merging never adds ReadChunks, that
//! a repair rebuilds something, and that the JSON of every suite (the meta
//! suite's redb and etcd stores included) has every row.

use std::process::Command;

use serde_json::Value;

fn rows(doc: &Value) -> &Vec<Value> {
    doc["rows"].as_array().expect("rows array")
}

fn find<'a>(doc: &'a Value, workload: &str, mode: &str) -> &'a Value {
    rows(doc)
        .iter()
        .find(|r| r["workload"] == workload && r["mode"] == mode && r["threads"] == 1)
        .unwrap_or_else(|| panic!("no row {workload}/{mode}"))
}

fn rpc(row: &Value, kind: &str) -> u64 {
    row["rpcs"].get(kind).and_then(Value::as_u64).unwrap_or(0)
}

#[test]
fn quick_bench_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("quick.json");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "all", "--quick", "--ops", "100", "--json"])
        .arg(&json)
        .output()
        .expect("run xtask bench");
    assert!(
        out.status.success(),
        "bench failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let pread: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-pread.json")).expect("pread json"),
    )
    .expect("pread JSON parses");
    let write: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-write.json")).expect("write json"),
    )
    .expect("write JSON parses");

    let workloads = [
        "random-pread-4k",
        "random-pread-64k",
        "sequential-64k",
        "positioned-scan-64k",
    ];
    let modes = [
        "reuse",
        "reuse-noverify",
        "reader-per-call",
        "raw-readchunk",
        "raw-verified",
        "degraded",
        "replicated",
        "reuse-crc32c",
    ];
    for w in workloads {
        for m in modes {
            let r = find(&pread, w, m);
            assert_eq!(r["ops"], 100, "{w}/{m}");
            for field in ["seconds", "ops_per_sec", "mb_per_sec", "p50_us", "p99_us"] {
                assert!(r[field].is_number(), "{w}/{m} lacks {field}");
            }
        }
    }
    assert!(
        rows(&pread)
            .iter()
            .any(|r| r["workload"] == "random-pread-4k" && r["threads"] == 8),
        "thread-scaling row"
    );
    // The raw rows read the reuse rows' key ranges from the same datanodes:
    // one ReadChunk per cell the ops touch, and no GetBlock. (The sequential
    // row's 100 aligned 64 KiB reads never cross a cell: one ReadChunk each,
    // where the stream itself fetches 4 MiB windows.)
    for w in workloads {
        let cells = if w == "sequential-64k" {
            100
        } else {
            find(&pread, w, "reuse")["cells_touched"]
                .as_u64()
                .expect("cells_touched")
        };
        for m in ["raw-readchunk", "raw-verified"] {
            let raw = find(&pread, w, m);
            assert_eq!(
                rpc(raw, "ReadChunk"),
                cells,
                "{w}/{m}: one ReadChunk per cell"
            );
            assert_eq!(rpc(raw, "GetBlock"), 0, "{w}/{m}: no GetBlock");
        }
    }
    for w in ["random-pread-4k", "random-pread-64k", "positioned-scan-64k"] {
        let reuse = find(&pread, w, "reuse");
        assert_eq!(
            rpc(reuse, "GetBlock"),
            0,
            "{w}: reuse mode must not GetBlock after warm-up"
        );
        assert_eq!(
            reuse["readers_created"], 0,
            "{w}: reuse mode builds no reader"
        );
        let cells = reuse["cells_touched"].as_u64().expect("cells");
        assert_eq!(
            rpc(reuse, "ReadChunk"),
            cells,
            "{w}: one ReadChunk per touched cell"
        );
        let per_call = find(&pread, w, "reader-per-call");
        let cells = per_call["cells_touched"].as_u64().expect("cells");
        assert_eq!(
            rpc(per_call, "GetBlock"),
            cells,
            "{w}: one GetBlock per touched cell"
        );
        assert_eq!(
            per_call["readers_created"], 100,
            "{w}: one reader per pread"
        );
    }
    for (w, m) in [
        ("write-ec", "serial"),
        ("write-ec", "pipelined"),
        ("write-ec", "pipelined-1"),
        ("write-replicated", "replicated"),
        ("encode-rs-3-2-1024k", "codec"),
    ] {
        find(&write, w, m);
    }
    assert!(write["ratios"]["write-ec pipelined/serial"].is_number());
    assert!(write["ratios"]["write-ec pipelined/pipelined-1"].is_number());

    let vectored: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-vectored.json")).expect("vectored json"),
    )
    .expect("vectored JSON parses");
    for kind in ["replicated", "ec"] {
        for pattern in ["consecutive", "random", "sparse"] {
            for mode in ["positional", "positional-no-merge", "serial-seek"] {
                let r = find(&vectored, &format!("{kind}-{pattern}"), mode);
                for field in [
                    "mean_ms",
                    "min_ms",
                    "max_ms",
                    "mb_per_sec",
                    "read_chunks_per_call",
                ] {
                    assert!(
                        r[field].is_number(),
                        "{kind}-{pattern}/{mode} lacks {field}"
                    );
                }
            }
            // Merging never costs more ReadChunks than not merging.
            let merged =
                find(&vectored, &format!("{kind}-{pattern}"), "positional")["read_chunks_per_call"]
                    .as_f64()
                    .expect("number");
            let unmerged = find(
                &vectored,
                &format!("{kind}-{pattern}"),
                "positional-no-merge",
            )["read_chunks_per_call"]
                .as_f64()
                .expect("number");
            assert!(
                merged <= unmerged,
                "{kind}-{pattern}: {merged} > {unmerged}"
            );
        }
    }

    let s3: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-s3.json")).expect("s3 json"),
    )
    .expect("s3 JSON parses");
    let r = find(&s3, "ranged-get-20mb", "seek");
    assert_eq!(r["ops"], 20, "20 consecutive ranged GETs");
    for field in ["first_ms", "median_ms", "last_ms", "mb_per_sec"] {
        assert!(r[field].is_number(), "s3 row lacks {field}");
    }
    assert_eq!(s3["config"]["key_lookups"], 20, "one key lookup per GET");
    assert!(s3["ratios"]["last GET / first GET"].is_number());
    for (workload, mode) in [
        ("put-plain", "single"),
        ("put-crc32c", "single"),
        ("put-crc64nvme", "single"),
        ("put-sha256", "single"),
        ("mpu-plain", "multipart"),
        ("mpu-crc32c", "multipart"),
        ("put-direct", "client"),
    ] {
        let r = find(&s3, workload, mode);
        assert_eq!(r["ops"], 2, "{workload}: two rounds");
        assert!(r["mb_per_sec"].is_number(), "{workload}");
    }
    for ratio in [
        "put-crc32c/put-plain (MB/s)",
        "put-crc64nvme/put-plain (MB/s)",
        "put-sha256/put-plain (MB/s)",
        "mpu-crc32c/mpu-plain (MB/s)",
        "put gateway/direct (MB/s)",
    ] {
        assert!(s3["ratios"][ratio].is_number(), "{ratio}");
    }

    let codec: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-codec.json")).expect("codec json"),
    )
    .expect("codec JSON parses");
    for scheme in ["rs-3-2", "rs-6-3", "rs-10-4"] {
        for op in ["encode", "decode"] {
            for cell in ["64k", "1m"] {
                let w = format!("{scheme} {op} {cell}");
                for mode in ["simd", "scalar"] {
                    assert!(
                        find(&codec, &w, mode)["mb_per_sec"].is_number(),
                        "{w} {mode}"
                    );
                }
                assert!(
                    codec["ratios"][format!("{w} simd/scalar")].is_number(),
                    "{w} ratio"
                );
            }
        }
    }

    let repair: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-repair.json")).expect("repair json"),
    )
    .expect("repair JSON parses");
    assert_eq!(
        find(&repair, "read-sequential", "ec")["ops"],
        4,
        "four keys read"
    );
    let rebuild = rows(&repair)
        .iter()
        .find(|r| r["workload"] == "rebuild")
        .expect("rebuild row");
    assert!(
        rebuild["ops"].as_u64().is_some_and(|n| n > 0),
        "at least one index rebuilt: {rebuild}"
    );
    assert!(repair["ratios"]["rebuild/read-sequential (MB/s)"].is_number());

    // The meta suite: every store and workload, with exactly the ops asked
    // for (open-commit runs a quarter of --ops, list-100 a tenth).
    let meta: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("quick-meta.json")).expect("meta json"),
    )
    .expect("meta JSON parses");
    for mode in ["redb", "etcd-1", "etcd-3"] {
        for (w, ops) in [("open-commit", 25), ("lookup", 100), ("list-100", 10)] {
            assert_eq!(find(&meta, w, mode)["ops"], ops, "{w}/{mode}");
        }
    }
    for ratio in [
        "open-commit etcd-1/redb",
        "lookup etcd-3/redb",
        "list-100 etcd-1/redb",
    ] {
        assert!(meta["ratios"][ratio].is_number(), "{ratio}");
    }
}
