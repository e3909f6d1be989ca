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

/// Regression: a key being written when the om was SIGKILLed was lost (its session lived
/// in the om's memory; after the restart the writer's next allocation answered
/// NO_SUCH_SESSION). Open sessions are rows of the om's store now: the writer allocates its
/// next block groups from the restarted om, and its close, begun while the om is down
/// again, waits for it and commits; the key reads back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_progress_survives_an_om_sigkill() {
    use ec_client::{BucketOptions, Client, ClientConfig, ReplicationConfig};
    use minicluster::process::{ProcessCluster, ProcessTimings, Target};

    let bins = Binaries::locate().expect("om and datanode binaries");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cluster = ProcessCluster::start(&bins, dir.path(), 5, ProcessTimings::default())
        .await
        .expect("cluster");
    let client = Client::connect(&cluster.om_address(), ClientConfig::default())
        .await
        .expect("client");
    let ec = "rs-3-2-64k".parse().expect("scheme");
    let options = BucketOptions {
        replication: Some(ReplicationConfig::Ec(ec)),
        // 64 KiB blocks: a block group holds 192 KiB, so the write allocates again
        // after the restart.
        block_size: Some(64 * 1024),
        ..Default::default()
    };
    let mut attempts = 0;
    while let Err(e) = client.create_bucket("w", options.clone()).await {
        attempts += 1;
        assert!(attempts < 100, "creating the bucket: {e}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let data: Vec<u8> = (0..1_000_000u32)
        .map(|i| (i.wrapping_mul(31) >> 3) as u8)
        .collect();
    let (before, after) = data.split_at(400_000);
    let mut w = client.create_key("w", "k", None).await.expect("create");
    w.write(before).await.expect("write before the kill");
    cluster.kill(Target::Om).await.expect("kill the om");
    cluster.restart(Target::Om).await.expect("restart the om");
    w.write(after).await.expect("write after the restart");
    w.close()
        .await
        .expect("close commits into the restarted om");
    // A replicated key, every byte on its datanodes (hsync), so that its close has only
    // the commit left; the om is killed, and started again only after the close has
    // begun: the commit waits for it instead of failing the write.
    let three = Some(ReplicationConfig::Replicated { factor: 3 });
    let mut r = client.create_key("w", "r", three).await.expect("create");
    r.write(&data).await.expect("write");
    r.hsync().await.expect("hsync");
    cluster.kill(Target::Om).await.expect("kill the om again");
    // The client's connection has seen the om go (a read fails), so the commit is refused
    // a connection rather than sent on a dead one, where it could not be resent safely.
    let mut reads = 0;
    while client.list_buckets().await.is_ok() {
        reads += 1;
        assert!(reads < 100, "the killed om still answers");
    }
    // join! polls the close first: its commit is refused a connection before the om
    // process has started (it serves only once its start is logged).
    let (closed, restarted) = tokio::join!(r.close(), cluster.restart(Target::Om));
    restarted.expect("restart the om again");
    closed.expect("close waits for the om");
    for key in ["k", "r"] {
        let r = client.open_key("w", key).await.expect("open");
        let mut back = vec![0u8; data.len()];
        r.read_exact_at(0, &mut back).await.expect("read");
        assert!(back == data, "{key} reads back whole");
    }
    cluster.kill_all().await.expect("stop");
}
