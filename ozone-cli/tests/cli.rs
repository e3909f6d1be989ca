//! The `ozone` binary, spawned as a process against a minicluster on
//! loopback, as a user runs it: buckets and keys end to end, `--json`
//! output, exit statuses, a failed get leaving no file, a closed output pipe,
//! and finding the cluster through `--data-dir` (running or stale).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use minicluster::{MiniCluster, MiniClusterConfig};

fn ozone(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ozone"))
        .args(args)
        .env_remove("OZONE_OM_ADDRESS")
        .output()
        .expect("run ozone")
}

/// Runs `ozone --om OM ARGS…`, expecting success; returns stdout.
fn ok(om: &str, args: &[&str]) -> String {
    let mut all = vec!["--om", om];
    all.extend_from_slice(args);
    let out = ozone(&all);
    assert!(
        out.status.success(),
        "ozone {all:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("JSON output")
}

#[test]
fn buckets_and_keys_end_to_end() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let cluster = rt
        .block_on(MiniCluster::start(MiniClusterConfig::default()))
        .expect("cluster");
    let om = cluster.om_address();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = minicluster::pattern::bytes(6, 0, (3 << 20) + 5);
    let file = dir.path().join("in.bin");
    std::fs::write(&file, &src).expect("write input");
    let file = file.to_str().expect("utf-8 path");

    ok(
        &om,
        &[
            "sh",
            "bucket",
            "create",
            "b1",
            "--replication",
            "rs-3-2-1024k",
        ],
    );
    let buckets = json(&ok(&om, &["--json", "sh", "bucket", "list"]));
    assert_eq!(buckets[0]["name"], "b1");
    assert_eq!(buckets[0]["replication"], "rs-3-2-1024k");

    ok(&om, &["sh", "key", "put", "b1/k", file]);
    let out = dir.path().join("out.bin");
    let out_s = out.to_str().expect("utf-8 path");
    ok(&om, &["sh", "key", "get", "b1/k", out_s]);
    assert_eq!(std::fs::read(&out).expect("output file"), src);
    let cat = Command::new(env!("CARGO_BIN_EXE_ozone"))
        .args(["--om", &om, "sh", "key", "cat", "b1/k"])
        .output()
        .expect("cat");
    assert!(cat.status.success());
    assert_eq!(cat.stdout, src);

    let info = json(&ok(&om, &["--json", "sh", "key", "info", "b1/k"]));
    assert_eq!(info["length"], src.len() as u64);
    let replicas = info["block_groups"][0]["replicas"]
        .as_array()
        .expect("replicas");
    assert_eq!(replicas.len(), 5);
    assert!(replicas.iter().all(|r| r["length"].is_u64()), "{info}");
    let text = ok(&om, &["sh", "key", "info", "b1/k"]);
    assert!(
        text.starts_with("b1/k: 3145733 bytes, rs-3-2-1024k"),
        "{text}"
    );

    ok(&om, &["sh", "key", "cp", "b1/k", "b1/k2"]);
    ok(&om, &["sh", "key", "rename", "b1/k2", "k3"]);
    let keys = json(&ok(&om, &["--json", "sh", "key", "ls", "b1"]));
    let names: Vec<&str> = keys
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|k| k["name"].as_str())
        .collect();
    assert_eq!(names, ["k", "k3"]);
    ok(&om, &["sh", "key", "get", "b1/k3", out_s]);
    assert_eq!(std::fs::read(&out).expect("copy"), src);

    // A missing key: exit status 3, and no output file, partial or not.
    let missing = dir.path().join("missing.bin");
    let m = missing.to_str().expect("utf-8 path");
    let r = ozone(&["--om", &om, "sh", "key", "get", "b1/nope", m]);
    assert_eq!(r.status.code(), Some(3), "{r:?}");
    assert!(!missing.exists());
    assert!(!Path::new(&format!("{m}.partial")).exists());
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("key `b1/nope` not found"), "{stderr}");
    let r = ozone(&["--om", &om, "sh", "bucket", "info", "nope"]);
    assert_eq!(r.status.code(), Some(3), "{r:?}");

    // A directory is not a file to put.
    let dir_s = dir.path().to_str().expect("utf-8 path");
    let r = ozone(&["--om", &om, "sh", "key", "put", "b1/d", dir_s]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("is a directory"),
        "{r:?}"
    );

    // The reader of our output goes away first: a quiet success.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ozone"))
        .args(["--om", &om, "sh", "key", "info", "b1/k"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let done = child.wait_with_output().expect("wait");
    assert!(done.status.success(), "{done:?}");
    assert!(
        done.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );

    let nodes = json(&ok(&om, &["--json", "admin", "datanode", "list"]));
    let nodes = nodes.as_array().expect("list");
    assert_eq!(nodes.len(), 5);
    assert!(nodes.iter().all(|n| n["state"] == "HEALTHY"), "{nodes:?}");

    ok(&om, &["sh", "key", "delete", "b1/k"]);
    assert_eq!(
        ozone(&["--om", &om, "sh", "key", "info", "b1/k"])
            .status
            .code(),
        Some(3)
    );

    // `ls` pages through the om 1000 keys at a time: 1001 keys list whole,
    // in order, as text and as JSON.
    rt.block_on(async {
        let client = cluster.client().await.expect("client");
        let one = ec_client::ReplicationConfig::Replicated { factor: 1 };
        client
            .create_bucket(
                "many",
                ec_client::BucketOptions {
                    replication: Some(one),
                    block_size: None,
                    ..Default::default()
                },
            )
            .await
            .expect("bucket");
        let mut puts = tokio::task::JoinSet::new();
        for i in 0..1001 {
            let client = client.clone();
            puts.spawn(async move {
                client
                    .put_key("many", &format!("k{i:05}"), None, b"x")
                    .await
            });
            if puts.len() >= 16 {
                puts.join_next()
                    .await
                    .expect("a put")
                    .expect("joined")
                    .expect("put");
            }
        }
        while let Some(r) = puts.join_next().await {
            r.expect("joined").expect("put");
        }
    });
    let text = ok(&om, &["sh", "key", "ls", "many"]);
    assert_eq!(text.lines().count(), 1001);
    assert!(
        text.lines().last().is_some_and(|l| l.ends_with("k01000")),
        "{text}"
    );
    let listed = json(&ok(&om, &["--json", "sh", "key", "ls", "many"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(1001));
    assert_eq!(listed[1000]["name"], "k01000");
    assert_eq!(
        json(&ok(
            &om,
            &["--json", "sh", "key", "ls", "many", "--prefix", "zz"]
        )),
        serde_json::json!([])
    );

    // Found through --data-dir, as `cargo xtask minicluster --data-dir` writes it.
    let data_dir = dir.path().join("cluster");
    std::fs::create_dir_all(&data_dir).expect("dir");
    MiniCluster::write_cluster_json(&cluster.info(), &data_dir.join("cluster.json"))
        .expect("cluster.json");
    let d = data_dir.to_str().expect("utf-8 path");
    let r = ozone(&["--data-dir", d, "--json", "sh", "key", "ls", "b1"]);
    assert!(r.status.success(), "{r:?}");
    assert_eq!(json(&String::from_utf8_lossy(&r.stdout))[0]["name"], "k3");

    // A source that fails mid-put (/proc/self/mem reads EIO at offset 0): the
    // put fails, nothing is committed, and the om holds no session once the
    // process has exited (a drop-spawned abort dies with the process's runtime).
    let failed = ozone(&[
        "--om",
        &om,
        "sh",
        "key",
        "put",
        "b1/unreadable",
        "/proc/self/mem",
    ]);
    assert!(!failed.status.success(), "{failed:?}");
    assert_eq!(
        rt.block_on(cluster.om().open_sessions()).expect("count"),
        0,
        "the failed put's session"
    );
    let info = ozone(&["--om", &om, "sh", "key", "info", "b1/unreadable"]);
    assert_eq!(info.status.code(), Some(3), "{info:?}");
    rt.block_on(cluster.shutdown());
}

#[test]
fn a_stale_cluster_file_says_the_cluster_is_not_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("cluster.json"),
        r#"{"om": "127.0.0.1:1", "datanodes": []}"#,
    )
    .expect("cluster.json");
    let d = dir.path().to_str().expect("utf-8 path");
    let r = ozone(&["--data-dir", d, "sh", "bucket", "list"]);
    assert_eq!(r.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        stderr.contains("is not running") && stderr.contains("cargo xtask minicluster --data-dir"),
        "{stderr}"
    );
    // An address without a port, or with a scheme, is refused before any I/O.
    for bad in ["127.0.0.1", "http://127.0.0.1:9862"] {
        let r = ozone(&["--om", bad, "sh", "bucket", "list"]);
        assert_eq!(r.status.code(), Some(1));
        assert!(
            String::from_utf8_lossy(&r.stderr).contains("expected HOST:PORT"),
            "{r:?}"
        );
    }
}
