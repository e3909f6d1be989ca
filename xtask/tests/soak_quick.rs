//! The short version of `cargo xtask soak`: 20 seconds of mixed EC,
//! replicated and S3 traffic while datanodes are stopped and started, run as
//! the real binary. Asserts zero wrong bytes, that the workload ran through
//! a datanode being down, and that open block files stayed within the
//! datanodes' bound; the long run is `cargo xtask soak --minutes N`.

use std::process::Command;

use serde_json::Value;

#[test]
fn twenty_seconds_of_soak_hold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("soak.json");
    let svg = dir.path().join("soak.svg");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "soak",
            "--seconds",
            "20",
            "--restart-every",
            "8",
            "--max-size",
            "262144",
            "--max-open-files",
            "16",
            "--seed",
            "7",
            "--json",
        ])
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .output()
        .expect("run xtask soak");
    assert!(
        out.status.success(),
        "soak failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("soak json")).expect("parses");
    assert_eq!(doc["wrong"], 0, "no read returned wrong bytes");
    assert!(doc["ops"].as_u64().expect("ops") > 0);
    let samples = doc["samples"].as_array().expect("samples");
    assert!(samples.len() >= 5, "a sample every 2 s");
    let datanodes = doc["datanodes"].as_u64().expect("datanodes");
    for s in samples {
        let open = s["open_files"].as_u64().expect("open files");
        assert!(
            open <= datanodes * 16,
            "open block files {open} past the bound"
        );
    }
    assert!(
        samples.iter().any(|s| !s["down"].is_null()),
        "a datanode was down during the run"
    );
    let drawing = std::fs::read_to_string(&svg).expect("soak svg");
    assert!(drawing.starts_with("<svg") && drawing.contains("open block files"));
}
