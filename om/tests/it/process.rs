//! The `om` binary as an operator runs it: SIGTERM stops it gracefully
//! (exit status 0, as Ctrl-C does), `--log-format json` writes one JSON
//! object per log line, and `--metrics-listen` prints where `/metrics` is.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

#[test]
fn sigterm_stops_the_om_gracefully_and_logs_can_be_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_om"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--log-format", "json", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn om");
    // Drained as it comes, so that logs can never fill the pipe and block the om.
    let mut err = child.stderr.take().expect("stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let serving = lines.next().expect("a line").expect("utf-8");
    assert!(serving.starts_with("om serving on 127.0.0.1:"), "{serving}");
    let metrics = lines.next().expect("a line").expect("utf-8");
    assert!(
        metrics.starts_with("om metrics on http://127.0.0.1:") && metrics.ends_with("/metrics"),
        "{metrics}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "a graceful stop, not death by signal"
    );
    let stderr = stderr.join().expect("stderr reader");
    let first = stderr.lines().next().expect("a log line");
    assert!(
        first.starts_with('{') && first.contains("\"level\":\"INFO\""),
        "{stderr}"
    );
}

/// An om of the active-passive versions still leading the store (election `om-active`)
/// runs its own services unaware of the new oms': the new om refuses to start beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_om_refuses_to_start_beside_an_older_active_om() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = meta_store::local_etcd::LocalEtcd::start(&dir.path().join("etcd"), 1)
        .await
        .expect("etcd starts (apt-get install etcd-server)");
    let store = meta_store::MetaStore::Etcd(
        meta_store::EtcdStore::connect(&meta_store::EtcdConfig::new(etcd.endpoints()))
            .await
            .expect("connect"),
    );
    let old = store
        .campaign(
            "om-active",
            "10.0.0.9:9862",
            std::time::Duration::from_secs(10),
        )
        .await
        .expect("the old om leads");
    let (data, endpoints) = (dir.path().join("om"), etcd.endpoints().join(","));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_om"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data)
            .args(["--etcd", &endpoints])
            .output()
    })
    .await
    .expect("task")
    .expect("run om");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("10.0.0.9:9862") && stderr.contains("older version"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "it never served");
    old.resign().await.expect("resign");
}
