//! The crash-consistency test, short version (issue 11, part 4): one run of
//! 30 SIGKILLs of the om and datanode processes during EC and replicated
//! writes, overwrites and multipart completes (see `minicluster::crash`).
//! `cargo xtask crash-test --iterations N` runs long ones. The seed comes
//! from `CRASH_TEST_SEED` when set, so a failure can be run again;
//! `CRASH_TEST_KEEP=1` keeps the logs and data dirs of a passing run.

use minicluster::crash::{CrashConfig, run};
use minicluster::process::Binaries;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_processes_lose_no_acknowledged_write() {
    let seed = std::env::var("CRASH_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(11);
    let bins = Binaries::locate().expect("om and datanode binaries");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = CrashConfig {
        seed,
        kill_points: 30,
        datanodes: 6,
        writers: 2,
        base_dir: dir.path().to_path_buf(),
        bins,
    };
    eprintln!("crash test seed {seed} (CRASH_TEST_SEED={seed} replays it)");
    let report = match run(&config).await {
        Ok(r) => r,
        Err(e) => {
            // Keep the logs for the post-mortem.
            let kept = dir.keep();
            panic!("{e}\nlogs and data dirs kept in {}", kept.display());
        }
    };
    eprintln!("{report:?}");
    if std::env::var_os("CRASH_TEST_KEEP").is_some() {
        eprintln!("logs and data dirs kept in {}", dir.keep().display());
    }
    // The kills did not stop the system from working.
    assert!(report.ops_ok > 0, "no write was acknowledged");
}
