//! The `om` binary on an etcd that takes only TLS with client certificates and
//! authenticated users (issue 18): `--etcd-ca`, `--etcd-cert`/`--etcd-key` and
//! `--etcd-user`/`--etcd-password-file`. A real member with TLS and auth on, the om as a
//! process: it serves, its rows land under its namespace, and a wrong password stops it at
//! start with etcd's refusal named.

use std::process::Stdio;
use std::time::Duration;

use ec_client::{BucketOptions, Client, ClientConfig};
use meta_store::local_etcd::{LocalEtcd, LocalEtcdOptions, LocalEtcdTls};
use meta_store::{EtcdTls, MetaStore};
use minicluster::process::Binaries;
use minicluster::tls::ThrowawayCa;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The om's stdout, line by line.
type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

/// Starts the om binary on `etcd` with `password` for user `om`, named `localhost` to the
/// others (`--advertise`); returns the child, its first stdout line (`None` when it exited
/// without one) and the rest.
async fn om_on(
    bins: &Binaries,
    dir: &std::path::Path,
    endpoints: &str,
    tls: &LocalEtcdTls,
    password: &str,
) -> (tokio::process::Child, Option<String>, Lines) {
    std::fs::create_dir_all(dir).expect("om dir");
    let password_file = dir.join("etcd-password");
    std::fs::write(&password_file, format!("{password}\n")).expect("password file");
    let mut child = tokio::process::Command::new(&bins.om)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("om"))
        .args(["--etcd", endpoints, "--etcd-namespace", "/om/"])
        .arg("--etcd-ca")
        .arg(&tls.ca)
        .arg("--etcd-cert")
        .arg(&tls.cert)
        .arg("--etcd-key")
        .arg(&tls.key)
        .args(["--etcd-user", "om", "--etcd-password-file"])
        .arg(&password_file)
        .args(["--advertise", "localhost"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn om");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = next_line(&mut lines).await;
    (child, line, lines)
}

/// The om's next stdout line (at most 60 s away; `None` once it exited).
async fn next_line(lines: &mut Lines) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the om says something or exits within 60 s")
        .expect("read stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_om_serves_from_an_etcd_with_tls_and_users() {
    let bins = Binaries::locate().expect("om binary");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = ThrowawayCa::new("etcd test CA").expect("CA");
    let files = ca
        .write_loopback(&dir.path().join("tls"), "etcd")
        .expect("certificate");
    let tls = LocalEtcdTls {
        ca: files.ca,
        cert: files.cert,
        key: files.key,
    };
    let etcd = LocalEtcd::start_with(
        &dir.path().join("etcd"),
        1,
        LocalEtcdOptions::default().with_tls(tls.clone()),
    )
    .await
    .expect("etcd starts with TLS");
    etcd.enable_auth("root-secret", &[("om", "om-secret", b"/om/")])
        .await
        .expect("auth on");
    let endpoints = etcd.endpoints().join(",");
    assert!(endpoints.starts_with("https://"), "{endpoints}");

    // A wrong password: the om stops at start, naming why.
    let (refused, line, _) = om_on(
        &bins,
        &dir.path().join("wrong"),
        &endpoints,
        &tls,
        "not-the-password",
    )
    .await;
    assert_eq!(line, None, "it never served");
    let out = refused.wait_with_output().await.expect("wait");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("connecting to etcd") && stderr.contains("authentication failed"),
        "{stderr}"
    );

    let (mut om, line, mut lines) = om_on(
        &bins,
        &dir.path().join("right"),
        &endpoints,
        &tls,
        "om-secret",
    )
    .await;
    let line = line.expect("a line");
    let address = line
        .strip_prefix("om serving on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    let client = Client::connect(&address, ClientConfig::default())
        .await
        .expect("client");
    client
        .create_bucket("secure", BucketOptions::default())
        .await
        .expect("create a bucket");
    assert_eq!(client.list_buckets().await.expect("list").len(), 1);
    // It runs the background services, under the name it advertises.
    assert_eq!(
        next_line(&mut lines).await.as_deref(),
        Some("om running the background services")
    );
    // The rows are in etcd, under the om's namespace (read as root).
    let root = MetaStore::Etcd(
        meta_store::EtcdStore::connect(
            &meta_store::EtcdConfig::new(etcd.endpoints())
                .with_namespace(b"/om/".to_vec())
                .with_tls(
                    EtcdTls::new(std::fs::read(&tls.ca).expect("ca")).with_identity(
                        std::fs::read(&tls.cert).expect("cert"),
                        std::fs::read(&tls.key).expect("key"),
                    ),
                )
                .with_user("root", "root-secret"),
        )
        .await
        .expect("connect as root"),
    );
    let buckets: meta_store::Table<String, meta_store::codec::Raw> =
        meta_store::Table::new("buckets");
    assert_eq!(
        buckets.count(&root, &()).await.expect("count"),
        1,
        "the om's bucket row is under /om/"
    );
    let port = address.rsplit_once(':').expect("HOST:PORT").1;
    assert_eq!(
        root.leader(om::OM_ELECTION).await.expect("leader"),
        Some(format!("localhost:{port}"))
    );
    om.kill().await.expect("kill");
}
