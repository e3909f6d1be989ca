//! The gateway over real HTTP against a minicluster (unsigned requests to a
//! gateway started without credentials; the signed paths are exercised by
//! the aws-cli/boto3 run in `.ci/run`): ranged GETs cost only their range
//! (counted in bytes the datanodes served), one key lookup per GET, the
//! Range rules end to end, and failures mid-GET cut the stream.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use common::{data, dechunk, header, http};

use minicluster::{MiniCluster, MiniClusterConfig};

fn datanode_read_bytes(c: &MiniCluster) -> u64 {
    c.datanodes().iter().map(|d| d.metrics().read_bytes()).sum()
}

async fn cluster() -> (MiniCluster, SocketAddr) {
    let mut c = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let addr = c.start_s3_gateway(0, false).await.expect("gateway");
    (c, addr)
}

/// 20 consecutive ranged GETs of an object each cost their own length in
/// datanode reads (plus at most one checksum window at each end), never the
/// bytes before the range; each GET is exactly one om key lookup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ranged_gets_cost_only_their_range() {
    let (cluster, addr) = cluster().await;
    let src = data(20 * 300_000 + 17);
    let put = {
        let src = src.clone();
        tokio::task::spawn_blocking(move || {
            let _ = http(addr, "PUT", "/bkt", &[], b"");
            http(
                addr,
                "PUT",
                "/bkt/obj",
                &[("content-type", "application/x-test")],
                &src,
            )
        })
        .await
        .expect("put")
    };
    assert_eq!(put.0, 200, "{:?}", String::from_utf8_lossy(&put.2));
    for i in 0..20u64 {
        let (a, b) = (i * 300_000, i * 300_000 + 299_999);
        let before_bytes = datanode_read_bytes(&cluster);
        let before = cluster.s3_metrics().expect("metrics");
        let (status, headers, body) = tokio::task::spawn_blocking(move || {
            http(
                addr,
                "GET",
                "/bkt/obj",
                &[("range", &format!("bytes={a}-{b}"))],
                b"",
            )
        })
        .await
        .expect("get");
        let body = dechunk(&body, &headers);
        assert_eq!(status, 206);
        assert_eq!(
            header(&headers, "content-range"),
            Some(format!("bytes {a}-{b}/{}", src.len()).as_str())
        );
        assert_eq!(header(&headers, "content-length"), Some("300000"));
        assert!(body == src[a as usize..=b as usize], "GET {i} bytes");
        let read = datanode_read_bytes(&cluster) - before_bytes;
        // Exactly the range: verification fetches the checksums of the
        // window bytes around it, not the bytes.
        assert_eq!(read, 300_000, "GET {i}: bytes read from datanodes");
        let after = cluster.s3_metrics().expect("metrics");
        assert_eq!(
            after.key_lookups - before.key_lookups,
            1,
            "one key lookup per GET"
        );
    }
    cluster.shutdown().await;
}

/// Range rules end to end: suffix, clamping, ignored forms, 416 with
/// `Content-Range: bytes */SIZE`, HEAD with Range, Range + partNumber.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn range_rules_over_http() {
    let (cluster, addr) = cluster().await;
    let src = data(1000);
    let s2 = src.clone();
    tokio::task::spawn_blocking(move || {
        let _ = http(addr, "PUT", "/rrr", &[], b"");
        http(addr, "PUT", "/rrr/o", &[], &s2)
    })
    .await
    .expect("put");
    let cases: Vec<(&str, u16, std::ops::Range<usize>)> = vec![
        ("bytes=-10", 206, 990..1000),
        ("bytes=995-2000", 206, 995..1000),
        ("bytes=-5000", 206, 0..1000),
        ("bytes=7-3", 200, 0..1000),
        ("bytes=0-1,5-6", 200, 0..1000),
        ("lines=1-2", 200, 0..1000),
    ];
    for (rng, status, want) in cases {
        let (st, h, body) = tokio::task::spawn_blocking(move || {
            http(addr, "GET", "/rrr/o", &[("range", rng)], b"")
        })
        .await
        .expect("get");
        assert_eq!(st, status, "{rng}");
        assert!(dechunk(&body, &h) == src[want.clone()], "{rng}");
        assert_eq!(header(&h, "accept-ranges"), Some("bytes"));
        assert!(header(&h, "x-amz-checksum-crc32").is_none());
    }
    let (st, h, _) = tokio::task::spawn_blocking(move || {
        http(addr, "GET", "/rrr/o", &[("range", "bytes=1000-")], b"")
    })
    .await
    .expect("get");
    assert_eq!(
        (st, header(&h, "content-range")),
        (416, Some("bytes */1000"))
    );
    let (st, h, body) = tokio::task::spawn_blocking(move || {
        http(addr, "HEAD", "/rrr/o", &[("range", "bytes=0-9")], b"")
    })
    .await
    .expect("head");
    assert_eq!(
        (st, header(&h, "content-length"), body.len()),
        (206, Some("10"), 0)
    );
    let (st, _, _) = tokio::task::spawn_blocking(move || {
        http(
            addr,
            "GET",
            "/rrr/o?partNumber=1",
            &[("range", "bytes=0-9")],
            b"",
        )
    })
    .await
    .expect("get");
    assert_eq!(st, 400);
    cluster.shutdown().await;
}

/// More than p indexes lost: before the first byte the GET is a 503; after
/// the status line went out the stream is cut, and what arrived is a
/// correct prefix (never wrong bytes under a 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_indexes_give_503_or_a_cut_stream() {
    let (mut cluster, addr) = cluster().await;
    let len = 48 << 20;
    let src = data(len);
    let s2 = src.clone();
    tokio::task::spawn_blocking(move || {
        let _ = http(addr, "PUT", "/fff", &[], b"");
        http(addr, "PUT", "/fff/big", &[], &s2)
    })
    .await
    .expect("put");
    // Cut mid-stream: start the GET, read the headers and a little body,
    // then stop three datanodes and drain what is left.
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(
        format!("GET /fff/big HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .expect("write");
    let mut first = vec![0u8; 64 * 1024];
    let n = s.read(&mut first).expect("first bytes");
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    for i in 0..3 {
        cluster.datanode_mut(i).expect("dn").stop().await;
    }
    let rest = tokio::task::spawn_blocking(move || {
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        rest
    })
    .await
    .expect("drain");
    let mut raw = first[..n].to_vec();
    raw.extend_from_slice(&rest);
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers");
    let body = &raw[split + 4..];
    assert!(
        body.len() < len,
        "the stream must be cut, got all {} bytes",
        body.len()
    );
    assert!(
        body == &src[..body.len()],
        "what arrived is a correct prefix"
    );
    // Before the first byte: a 503, not a 200.
    let (st, _, _) = tokio::task::spawn_blocking(move || http(addr, "GET", "/fff/big", &[], b""))
        .await
        .expect("get");
    assert_eq!(st, 503);
    cluster.shutdown().await;
}

/// Regression: a client that sends `Expect: 100-continue` and gets an error before it sent
/// the body does not send it (botocore); the connection still expected the body, so the
/// next request on it lost its first bytes ("EAD /integ/once": SignatureDoesNotMatch in the
/// boto3 run against `cluster --processes`, once in a few runs). Such an answer now closes
/// the connection: the client's next request goes on a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_before_a_continued_body_closes_the_connection() {
    let (cluster, addr) = cluster().await;
    let answers = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("timeout");
        // No such bucket: answered (404) before the body is read; the body never comes.
        s.write_all(
            format!(
                "PUT /no-such-bucket/k HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 5\r\n\
                 Expect: 100-continue\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("write");
        let mut first = Vec::new();
        let mut buf = [0u8; 4096];
        while !first.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).expect("the answer");
            assert!(n > 0, "closed before answering");
            first.extend_from_slice(&buf[..n]);
        }
        // The next request on the same connection gets no misparsed answer: the gateway
        // closed it after the first (whatever else of that answer is still to come).
        let _ = s.write_all(
            format!("HEAD /no-such-bucket/k HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
        );
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        (
            String::from_utf8_lossy(&first).to_string(),
            String::from_utf8_lossy(&rest).to_string(),
        )
    })
    .await
    .expect("raw http");
    let (first, rest) = answers;
    assert!(first.starts_with("HTTP/1.1 404"), "{first}");
    assert!(
        first.to_ascii_lowercase().contains("connection: close"),
        "{first}"
    );
    assert!(
        !rest.contains("HTTP/1.1"),
        "a second answer on the connection: {rest}"
    );
    cluster.shutdown().await;
}

/// A cluster and an unsigned gateway over it that serves one request at a time and waits
/// `idle` for a request's next bytes.
async fn one_request_gateway(idle: std::time::Duration) -> (MiniCluster, s3_gateway::S3Gateway) {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let gw = s3_gateway::S3Gateway::start(
        cluster.client().await.expect("client"),
        s3_gateway::GatewayConfig::new(([127, 0, 0, 1], 0).into(), "ak", "sk")
            .without_auth()
            .with_max_requests_in_flight(1)
            .with_request_idle_timeout(idle),
    )
    .await
    .expect("gateway");
    (cluster, gw)
}

/// At `max_requests_in_flight` 1, a request that arrives while a PUT is being received is
/// answered 503 SlowDown at once; once the PUT's answer has gone
/// the place is free and the next request is served. The in-flight gauge and the refusal
/// counter follow. (Before the bound, the second request was served beside the PUT.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_in_flight_limit_is_told_to_slow_down() {
    let (_cluster, gw) = one_request_gateway(s3_gateway::DEFAULT_REQUEST_IDLE_TIMEOUT).await;
    let addr = gw.address();
    let metrics = std::sync::Arc::clone(gw.metrics());
    let body = data(3 << 20);
    let want = body.clone();
    let (put, refused, after) = tokio::task::spawn_blocking(move || {
        assert_eq!(http(addr, "PUT", "/bkt", &[], b"").0, 200);
        common::wait_until("the bucket's PUT has left", || {
            metrics.snapshot().requests_in_flight == 0
        });
        let mut refused = None;
        let put = common::http_paused(addr, "PUT", "/bkt/obj", &body, || {
            // The PUT's headers have arrived: it holds the one place.
            common::wait_until("the PUT is in flight", || {
                metrics.snapshot().requests_in_flight == 1
            });
            refused = Some(http(addr, "GET", "/bkt/obj", &[], b""));
        });
        common::wait_until("the PUT's answer has gone", || {
            metrics.snapshot().requests_in_flight == 0
        });
        let after = http(addr, "GET", "/bkt/obj", &[], b"");
        (put, refused.expect("the second request ran"), after)
    })
    .await
    .expect("requests");
    assert_eq!(put.0, 200, "{}", String::from_utf8_lossy(&put.2));
    let (status, headers, text) = refused;
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(&text));
    assert!(
        String::from_utf8_lossy(&text).contains("<Code>SlowDown</Code>"),
        "{}",
        String::from_utf8_lossy(&text)
    );
    assert!(header(&headers, "x-amz-request-id").is_some());
    assert_eq!(after.0, 200);
    assert!(
        after.2 == want,
        "the object reads back whole once the place is free"
    );
    let s = gw.metrics().snapshot();
    assert_eq!((s.requests_refused_busy, s.requests_in_flight), (1, 0));
    assert_eq!(s.responses.get(&503), Some(&1));
}

/// A PUT whose client goes silent mid-body is answered 400 RequestTimeout after the idle
/// timeout, and its place among the requests in flight is free again for the next request.
/// (Before the timeout, it held its place for as long as the client kept the connection.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_client_goes_silent_times_out_and_frees_its_place() {
    let (_cluster, gw) = one_request_gateway(std::time::Duration::from_millis(500)).await;
    let addr = gw.address();
    let metrics = std::sync::Arc::clone(gw.metrics());
    let (stalled, after) = tokio::task::spawn_blocking(move || {
        assert_eq!(http(addr, "PUT", "/bkt", &[], b"").0, 200);
        common::wait_until("the bucket's PUT has left", || {
            metrics.snapshot().requests_in_flight == 0
        });
        let mut s = TcpStream::connect(addr).expect("connect");
        // Without the gateway's timeout the answer never comes: fail rather than hang.
        s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .expect("read timeout");
        s.write_all(
            format!("PUT /bkt/obj HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1000000\r\n\r\n")
                .as_bytes(),
        )
        .expect("headers");
        s.write_all(&data(1000)).expect("a little of the body");
        // Nothing more is sent: the answer comes from the gateway's timeout.
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw);
        common::wait_until("the silent PUT's place is free", || {
            metrics.snapshot().requests_in_flight == 0
        });
        (
            String::from_utf8_lossy(&raw).to_string(),
            http(addr, "PUT", "/bkt/other", &[], b"after"),
        )
    })
    .await
    .expect("requests");
    assert!(stalled.starts_with("HTTP/1.1 400"), "{stalled}");
    assert!(stalled.contains("<Code>RequestTimeout</Code>"), "{stalled}");
    assert_eq!(after.0, 200, "{}", String::from_utf8_lossy(&after.2));
    assert_eq!(gw.metrics().snapshot().requests_refused_busy, 0);
}
