//! The `om` and `datanode` binaries with `--tls-ca`, `--tls-cert` and
//! `--tls-key`, as separate processes: datanodes register over mutual TLS,
//! a client trusting the CA writes and reads a key, a SIGKILLed datanode
//! comes back and registers again; a binary given the CA without its own
//! certificate refuses to start, naming the flags.

use std::time::Duration;

use ec_client::{BucketOptions, Client, ClientConfig};
use minicluster::pattern;
use minicluster::process::{Binaries, ProcessCluster, ProcessOptions, ProcessTimings, Target};

async fn read_all(client: &Client) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut s = client.open_key("b", "k").await.expect("open");
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.expect("read");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binaries_serve_tls_and_datanodes_register_over_mutual_tls() {
    let bins = Binaries::locate().expect("om and datanode binaries");
    let dir = tempfile::tempdir().expect("temp dir");
    let options = ProcessOptions {
        tls: true,
        ..ProcessOptions::default()
    };
    let mut cluster =
        ProcessCluster::start_with(&bins, dir.path(), 5, ProcessTimings::default(), options)
            .await
            .expect("cluster of processes with TLS");
    let tls = cluster.client_tls().expect("CA").expect("TLS on");
    let om = cluster.om_address();
    let statuses = om::list_datanode_statuses(&om, Some(&tls))
        .await
        .expect("ListDatanodes over TLS");
    assert_eq!(statuses.len(), 5, "every datanode registered");

    let client = Client::connect(&om, ClientConfig::default().with_tls(Some(tls.clone())))
        .await
        .expect("client");
    client
        .create_bucket("b", BucketOptions::default())
        .await
        .expect("bucket");
    let mut bytes = vec![0u8; 3 * 1024 * 1024 + 17];
    pattern::fill(7, 0, &mut bytes);
    client.put_key("b", "k", None, &bytes).await.expect("put");
    assert_eq!(read_all(&client).await, bytes);

    // A datanode killed and started again registers again (over mutual TLS:
    // its start waits for the om's answer) and serves reads.
    cluster.kill(Target::Datanode(0)).await.expect("kill");
    cluster.restart(Target::Datanode(0)).await.expect("restart");
    assert_eq!(cluster.starts(Target::Datanode(0)), 2);
    assert_eq!(read_all(&client).await, bytes);

    // Plaintext to the same om gets no answer.
    let plain = tokio::time::timeout(Duration::from_secs(10), async {
        Client::connect(&om, ClientConfig::default())
            .await?
            .list_buckets()
            .await
    })
    .await
    .expect("bounded");
    assert!(plain.is_err(), "plaintext got an answer: {plain:?}");
    cluster.kill_all().await.expect("stop");
}

#[test]
fn a_server_given_the_ca_without_its_certificate_refuses_to_start() {
    let bins = Binaries::locate().expect("om and datanode binaries");
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = minicluster::tls::ThrowawayCa::new("test CA")
        .and_then(|ca| ca.write_loopback(dir.path(), "node"))
        .expect("certificates");
    for (program, name) in [(&bins.om, "om"), (&bins.datanode, "datanode")] {
        let out = std::process::Command::new(program)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join(name))
            .arg("--tls-ca")
            .arg(&ca.ca)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{name} started without a certificate"
        );
        assert!(
            stderr.contains("--tls-cert") && stderr.contains("--tls-key"),
            "{name}: {stderr}"
        );
        // And a certificate without the CA is a usage error before anything starts.
        let out = std::process::Command::new(program)
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join(name))
            .arg("--tls-cert")
            .arg(&ca.cert)
            .arg("--tls-key")
            .arg(&ca.key)
            .output()
            .expect("runs");
        assert!(
            !out.status.success(),
            "{name} took a certificate without a CA"
        );
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("--tls-ca"),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
