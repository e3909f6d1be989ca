//! The `s3-gateway` binary as a process of a [`ProcessCluster`] (what
//! `cargo xtask cluster --processes` runs): it serves S3 over the om and
//! datanode processes, honours the ACLs stored in the om (an anonymous GET
//! of a public-read object is served, of a private one refused), and every
//! process stops on SIGTERM.

use std::io::{Read, Write};

use ec_client::{BucketOptions, CannedAcl, Client, ClientConfig, object_metadata};
use minicluster::process::{Binaries, ProcessCluster, ProcessTimings};

/// An unsigned `GET path` over HTTP/1.1: (status, body).
fn anonymous_get(endpoint: &str, path: &str) -> (u16, Vec<u8>) {
    let addr = endpoint.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the gateway");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    // The gateway answers with Content-Length or chunks; a short body fits one chunk.
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let text = body.clone();
        let line_end = text.windows(2).position(|w| w == b"\r\n").unwrap_or(0);
        let len = usize::from_str_radix(std::str::from_utf8(&text[..line_end]).unwrap_or("0"), 16)
            .unwrap_or(0);
        body = text[line_end + 2..line_end + 2 + len].to_vec();
    }
    (status, body)
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_process_serves_acls_and_every_process_stops() {
    let bins = Binaries::locate().expect("om and datanode binaries");
    assert!(
        bins.s3_gateway.is_some(),
        "the s3-gateway binary (cargo build -p s3-gateway)"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let mut cluster = ProcessCluster::start(&bins, dir.path(), 5, ProcessTimings::default())
        .await
        .expect("cluster of processes");
    let endpoint = cluster
        .start_gateway(&bins, 0, "admin-key", "admin-secret")
        .await
        .expect("gateway process");
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint}");
    let pids = cluster.pids();
    assert_eq!((pids.oms.len(), pids.datanodes.len()), (1, 5));
    let all: Vec<u32> = pids
        .oms
        .iter()
        .chain(&pids.datanodes)
        .copied()
        .chain(pids.s3)
        .collect();
    assert_eq!(all.len(), 7);
    assert!(all.iter().all(|p| alive(*p)));

    let client = Client::connect(&cluster.om_address(), ClientConfig::default())
        .await
        .expect("client");
    let options = BucketOptions {
        acl: CannedAcl::PublicRead,
        ..BucketOptions::default()
    };
    client.create_bucket("pub", options).await.expect("bucket");
    client
        .put_key("pub", "open", None, b"hello")
        .await
        .expect("put");
    client
        .put_key("pub", "closed", None, b"secret")
        .await
        .expect("put");
    let acl = [(
        object_metadata::CANNED_ACL.to_string(),
        "public-read".to_string(),
    )];
    client
        .set_key_metadata(
            "pub",
            "open",
            object_metadata::ACL_PREFIX,
            acl.into_iter().collect(),
        )
        .await
        .expect("object ACL");

    let e = endpoint.clone();
    let (open, closed, listing) = tokio::task::spawn_blocking(move || {
        (
            anonymous_get(&e, "/pub/open"),
            anonymous_get(&e, "/pub/closed"),
            anonymous_get(&e, "/pub?list-type=2"),
        )
    })
    .await
    .expect("requests");
    assert_eq!(open, (200, b"hello".to_vec()));
    assert_eq!(closed.0, 403, "{}", String::from_utf8_lossy(&closed.1));
    assert_eq!(listing.0, 200, "a public-read bucket lists anonymously");

    cluster.stop_all().await.expect("stop");
    assert!(
        all.iter().all(|p| !alive(*p)),
        "every process exited on SIGTERM"
    );
}
