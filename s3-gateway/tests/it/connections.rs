//! The gateway's connections over real sockets: the deadlines that close a connection (one
//! that sends nothing, over plain HTTP and after a TLS handshake; an answer the client stops
//! taking) and the bound on how many are open at once.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::{data, http};
use minicluster::{MiniCluster, MiniClusterConfig};
use s3_gateway::{GatewayConfig, S3Gateway};
use tokio_rustls::rustls;

/// A cluster (with TLS when `tls`) and a gateway over it without credentials, set up by
/// `config`; HTTPS with the cluster's gateway certificate when `tls`.
async fn gateway(
    tls: bool,
    config: impl FnOnce(GatewayConfig) -> GatewayConfig,
) -> (MiniCluster, S3Gateway) {
    let cluster = MiniCluster::start(MiniClusterConfig::default().with_tls(tls))
        .await
        .expect("cluster");
    let mut c = config(GatewayConfig::new(([127, 0, 0, 1], 0).into(), "ak", "sk").without_auth());
    if let Some(t) = cluster.tls() {
        c = c.with_https(t.https.clone());
    }
    let gw = S3Gateway::start(cluster.client().await.expect("client"), c)
        .await
        .expect("gateway");
    (cluster, gw)
}

/// A connection that never sends a byte is closed after the idle timeout (hyper's header
/// timer, from the connection's start now that the gateway serves HTTP/1.1 alone). Before,
/// hyper-util's protocol detection read the first bytes with no timer, and the connection
/// stayed open for as long as the client kept it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_sends_nothing_is_closed() {
    let (_cluster, gw) = gateway(false, |c| {
        c.with_request_idle_timeout(Duration::from_millis(500))
    })
    .await;
    let addr = gw.address();
    let (read, raw) = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        // Without the gateway's timeout the connection stays open: fail rather than hang.
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        let mut raw = Vec::new();
        (s.read_to_end(&mut raw).map_err(|e| e.kind()), raw)
    })
    .await
    .expect("connection");
    assert_eq!(read, Ok(0), "the gateway closed the connection");
    assert!(raw.is_empty(), "and answered nothing: {raw:?}");
}

/// Over HTTPS, a client that completes its handshake and then sends nothing is closed after
/// the idle timeout too, and a client offering HTTP/2 is given HTTP/1.1. Before, only the
/// handshake had a deadline (the connection stayed open for as long as the client kept it),
/// and ALPN chose `h2`, which had no idle deadline at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_that_sends_nothing_after_its_handshake_is_closed() {
    let (cluster, gw) = gateway(true, |c| {
        c.with_request_idle_timeout(Duration::from_millis(500))
    })
    .await;
    let t = cluster.tls().expect("a TLS cluster");
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        <rustls::pki_types::CertificateDer as rustls::pki_types::pem::PemObject>::pem_slice_iter(
            t.https.ca_pem(),
        )
    {
        roots.add(cert.expect("CA PEM")).expect("CA certificate");
    }
    let mut client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(gw.address())
        .await
        .expect("connect");
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(name, tcp)
        .await
        .expect("the handshake completes");
    assert_eq!(
        tls.get_ref().1.alpn_protocol(),
        Some(&b"http/1.1"[..]),
        "HTTP/1.1 is chosen"
    );
    let mut raw = Vec::new();
    // Without the gateway's deadline nothing ever comes: fail rather than hang.
    let read = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::io::AsyncReadExt::read_to_end(&mut tls, &mut raw),
    )
    .await
    .expect("the gateway ended the connection within 60 s");
    // A clean close_notify reads as the end; a cut without one as an error. Either way the
    // connection is over and nothing was answered.
    assert!(
        matches!(&read, Ok(0)) || read.is_err(),
        "the connection ended: {read:?}"
    );
    assert!(raw.is_empty(), "and answered nothing: {raw:?}");
}

/// A GET whose client stops reading is cut once it has taken nothing for the idle timeout,
/// and its place among the requests in flight (the only one here) is free for the next
/// request. Before, the stalled answer held the place, and with it the whole gateway, for
/// as long as the client kept its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_whose_client_stops_reading_is_cut_off_and_frees_its_place() {
    let (_cluster, gw) = gateway(false, |c| {
        c.with_max_requests_in_flight(1)
            .with_request_idle_timeout(Duration::from_millis(500))
    })
    .await;
    let addr = gw.address();
    let metrics = Arc::clone(gw.metrics());
    // Far more than the sockets' buffers (4 MiB to send, 128 KiB to receive without reads)
    // and the gateway's 4 MiB GET chunks hold.
    const LEN: usize = 24 << 20;
    let (got, after, open) = tokio::task::spawn_blocking(move || {
        assert_eq!(http(addr, "PUT", "/bkt", &[], b"").0, 200);
        assert_eq!(http(addr, "PUT", "/bkt/big", &[], &data(LEN)).0, 200);
        assert_eq!(http(addr, "PUT", "/bkt/small", &[], b"small").0, 200);
        common::wait_until("the PUTs' places are free", || {
            metrics.snapshot().requests_in_flight == 0
        });
        let mut s = TcpStream::connect(addr).expect("connect");
        s.write_all(format!("GET /bkt/big HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
            .expect("request");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        // The answer's first bytes, to see that it is a 200; then the client reads nothing.
        let mut got = vec![0u8; 12];
        s.read_exact(&mut got).expect("the status line");
        assert_eq!(
            &got[..],
            b"HTTP/1.1 200",
            "{}",
            String::from_utf8_lossy(&got)
        );
        let held = std::time::Instant::now();
        // The answer stalls, then the gateway cuts it.
        common::wait_until("the stalled GET's place is free", || {
            metrics.snapshot().requests_in_flight == 0
        });
        let held = held.elapsed();
        assert!(
            held >= Duration::from_millis(400),
            "the place was held until the write deadline, not freed at once: {held:?}"
        );
        let after = http(addr, "GET", "/bkt/small", &[], b"");
        // Whatever the buffers held, then the cut (an end or a reset).
        let _ = s.read_to_end(&mut got);
        common::wait_until("every connection has closed", || {
            metrics.snapshot().connections_open == 0
        });
        (got.len(), after, metrics.snapshot().connections_open)
    })
    .await
    .expect("requests");
    assert!(
        got < LEN,
        "the answer was cut: {got} bytes of {LEN} arrived"
    );
    assert_eq!(after.0, 200, "{}", String::from_utf8_lossy(&after.2));
    assert_eq!(after.2, b"small");
    assert_eq!(open, 0);
    assert_eq!(gw.metrics().snapshot().requests_refused_busy, 0);
}

/// With `max_connections` 1, a second connection is not served while the first is open (it
/// waits in the listen backlog), and is served once the first closes; the gauge counts the
/// open one. Before the bound, the second was served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_limit_waits_until_one_closes() {
    let (_cluster, gw) = gateway(false, |c| c.with_max_connections(1)).await;
    let addr = gw.address();
    let metrics = Arc::clone(gw.metrics());
    let (waited, answer) = tokio::task::spawn_blocking(move || {
        let first = TcpStream::connect(addr).expect("first");
        common::wait_until("the first connection is open", || {
            metrics.snapshot().connections_open == 1
        });
        // The kernel completes the second's handshake into the backlog; the gateway does not
        // take it.
        let mut second = TcpStream::connect(addr).expect("second");
        second
            .write_all(
                format!("GET /bkt HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .expect("request");
        second
            .set_read_timeout(Some(Duration::from_millis(500)))
            .expect("read timeout");
        let mut byte = [0u8; 1];
        let waited = second.read(&mut byte).map_err(|e| e.kind());
        assert_eq!(metrics.snapshot().connections_open, 1, "only one is open");
        drop(first);
        second
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        let mut answer = Vec::new();
        let _ = second.read_to_end(&mut answer);
        (waited, String::from_utf8_lossy(&answer).to_string())
    })
    .await
    .expect("connections");
    assert!(
        matches!(
            waited,
            Err(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
        ),
        "the second connection was not answered while the first was open: {waited:?}"
    );
    assert!(answer.starts_with("HTTP/1.1 "), "then it was: {answer}");
}
