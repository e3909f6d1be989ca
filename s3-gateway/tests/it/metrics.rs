//! Observability end to end: after an S3 PUT and GET through the gateway,
//! every process's `/metrics` endpoint (the URLs `cluster.json` names)
//! answers in the Prometheus text format and its counters moved; the om and
//! datanodes answer the standard gRPC health check.

use crate::common;

use common::{data, http};
use minicluster::{MiniCluster, MiniClusterConfig};

/// `GET url` over a plain TCP connection: (status, content type, body).
fn scrape(url: &str) -> (u16, String, String) {
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest.split_once('/').expect("a path");
    let addr: std::net::SocketAddr = host.parse().expect("HOST:PORT");
    let (status, headers, body) = http(addr, "GET", &format!("/{path}"), &[], b"");
    let content_type = common::header(&headers, "content-type")
        .unwrap_or_default()
        .to_string();
    (status, content_type, String::from_utf8(body).expect("text"))
}

/// The value of the sample line `name` (with its labels, exactly) in `text`.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_serves_metrics_that_move_with_a_workload() {
    let mut cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let addr = cluster.start_s3_gateway(0, false).await.expect("gateway");
    let body = data(3 * 1024 * 1024 + 5);
    let sent = body.clone();
    let got = tokio::task::spawn_blocking(move || {
        assert_eq!(http(addr, "PUT", "/bkt", &[], b"").0, 200);
        assert_eq!(http(addr, "PUT", "/bkt/obj", &[], &sent).0, 200);
        // 100 bytes inside a checksum window: a ReadChunk with edges.
        let ranged = http(
            addr,
            "GET",
            "/bkt/obj",
            &[("Range", "bytes=1000-1099")],
            b"",
        );
        assert_eq!(ranged.0, 206);
        assert_eq!(ranged.2, &sent[1000..1100]);
        http(addr, "GET", "/bkt/obj", &[], b"")
    })
    .await
    .expect("requests");
    assert_eq!(got.0, 200);
    assert_eq!(got.2, body);

    let info = cluster.info();
    let urls = info.metrics.expect("cluster.json names the metrics URLs");
    let s3_url = urls.s3.clone().expect("the gateway's");
    let (om, dns) = (urls.om.clone(), urls.datanodes.clone());
    let (om_text, dn_texts, s3_text) = tokio::task::spawn_blocking(move || {
        let (status, content_type, om_text) = scrape(&om);
        assert_eq!(status, 200);
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        let dn_texts: Vec<String> = dns.iter().map(|u| scrape(u).2).collect();
        let (_, _, s3_text) = scrape(&s3_url);
        assert_eq!(scrape(&om.replace("/metrics", "/other")).0, 404);
        (om_text, dn_texts, s3_text)
    })
    .await
    .expect("scrapes");

    // The om: a committed key, five healthy datanodes.
    assert!(
        sample(
            &om_text,
            r#"rpc_server_calls_total{service="om",method="CommitKey",code="OK"}"#
        )
        .is_some_and(|n| n >= 1.0),
        "{om_text}"
    );
    assert_eq!(
        sample(&om_text, r#"om_datanodes{state="HEALTHY"}"#),
        Some(5.0)
    );
    assert!(
        om_text.contains("rpc_server_duration_seconds_bucket"),
        "{om_text}"
    );

    // The datanodes: together they stored the object's cells and parity.
    assert_eq!(dn_texts.len(), 5);
    let written: f64 = dn_texts
        .iter()
        .filter_map(|t| sample(t, "datanode_written_bytes_total"))
        .sum();
    assert!(written >= body.len() as f64, "{written}");
    let puts: f64 = dn_texts
        .iter()
        .filter_map(|t| {
            sample(
                t,
                r#"rpc_server_calls_total{service="datanode",method="PutBlock",code="OK"}"#,
            )
        })
        .sum();
    assert!(puts >= 5.0, "{dn_texts:?}");
    // The ranged GET's edges came from the closed block's fine checksums.
    let edge_reads = |how: &str| -> f64 {
        let name = format!(r#"datanode_edge_reads_total{{how="{how}"}}"#);
        dn_texts.iter().filter_map(|t| sample(t, &name)).sum()
    };
    assert_eq!((edge_reads("fine"), edge_reads("window")), (1.0, 0.0));
    assert!(
        dn_texts
            .iter()
            .filter_map(|t| sample(t, "datanode_fine_checksum_cache_bytes"))
            .sum::<f64>()
            > 0.0
    );

    // The gateway: exactly one PUT, one GET of the object and one of 100
    // of its bytes, and its client's reads.
    assert_eq!(
        sample(
            &s3_text,
            r#"s3_requests_total{operation="PutObject",status="200"}"#
        ),
        Some(1.0),
        "{s3_text}"
    );
    assert_eq!(
        sample(
            &s3_text,
            r#"s3_requests_total{operation="GetObject",status="200"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&s3_text, "s3_sent_bytes_total"),
        Some(body.len() as f64 + 100.0)
    );
    assert!(
        sample(&s3_text, r#"client_datanode_rpcs_total{kind="ReadChunk"}"#)
            .is_some_and(|n| n >= 1.0),
        "{s3_text}"
    );

    // grpc.health.v1 on the om and a datanode.
    for address in [cluster.om_address(), cluster.datanodes()[0].address()] {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
            .expect("endpoint")
            .connect()
            .await
            .expect("connect");
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .expect("check")
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
    }
}
