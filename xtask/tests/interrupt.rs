//! An interrupted bench cleans up after itself: SIGINT while `xtask bench
//! pread` runs stops its clusters and removes their temporary directories
//! (killed outright, each run left 1.6 GB behind), and the run fails with
//! "interrupted". A spawned process over a real signal.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The cluster directories under `tmp` (the minicluster's prefix).
fn cluster_dirs(tmp: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(tmp)
        .expect("read temp dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("minicluster-"))
        })
        .collect()
}

#[test]
fn an_interrupted_bench_removes_its_cluster_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["bench", "pread", "--quick", "--ops", "100000"])
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn xtask bench");
    // Interrupt once the bench's clusters exist (its signal handlers are in
    // place before it starts them), polling for the directory.
    let deadline = Instant::now() + Duration::from_secs(120);
    while cluster_dirs(tmp.path()).is_empty() {
        assert!(Instant::now() < deadline, "no cluster directory appeared");
        assert!(
            child.try_wait().expect("poll child").is_none(),
            "the bench ended before it was interrupted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -INT");
    let out = child.wait_with_output().expect("wait for xtask");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an interrupted bench fails");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_eq!(cluster_dirs(tmp.path()), Vec::<std::path::PathBuf>::new());
}
