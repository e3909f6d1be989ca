//! Request ids: every answer carries `x-amz-request-id`, an error body names it in
//! `<RequestId>`, and the om and datanode RPCs the request caused carried it (seen here as the
//! `rpc` spans those servers open for each call, captured by a tracing layer). Presigned URLs
//! valid for more than a week are refused.

#[path = "it/common/mod.rs"]
mod common;

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use common::{Signer, header, http};
use minicluster::{MiniCluster, MiniClusterConfig, S3_ACCESS_KEY, S3_SECRET_KEY};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::{Context, SubscriberExt};

/// (request id, method path) of every `rpc` span opened.
#[derive(Clone, Default)]
struct Rpcs(Arc<Mutex<Vec<(String, String)>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Rpcs {
    fn on_new_span(&self, attrs: &Attributes<'_>, _id: &Id, _ctx: Context<'_, S>) {
        if attrs.metadata().name() != "rpc" {
            return;
        }
        #[derive(Default)]
        struct Fields(String, String);
        impl Visit for Fields {
            fn record_debug(&mut self, f: &Field, v: &dyn Debug) {
                match f.name() {
                    "request_id" => self.0 = format!("{v:?}"),
                    "path" => self.1 = format!("{v:?}"),
                    _ => {}
                }
            }
        }
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((fields.0, fields.1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_id_names_a_request_everywhere_it_went() {
    let rpcs = Rpcs::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(rpcs.clone()))
        .expect("the only subscriber of this test binary");
    let mut cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let addr = cluster.start_s3_gateway(0, true).await.expect("gateway");
    let s = Signer {
        addr,
        access_key: S3_ACCESS_KEY.into(),
        secret_key: S3_SECRET_KEY.into(),
        skew_secs: 0,
    };
    let (put, missing, presigned) = tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/rid", &[], &[], b"").0, 200);
        let put = s.send("PUT", "/rid/k", &[], &[], &common::data(5000));
        let missing = s.send("GET", "/rid/absent", &[], &[], b"");
        let presigned = http(
            addr,
            "GET",
            "/rid/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=604801&X-Amz-Signature=00",
            &[],
            b"",
        );
        (put, missing, presigned)
    })
    .await
    .expect("requests");
    assert_eq!(put.0, 200);
    let id = header(&put.1, "x-amz-request-id")
        .expect("an id")
        .to_string();
    assert_eq!(id.len(), 16, "{id}");
    let seen = rpcs.0.lock().expect("rpcs").clone();
    let paths: Vec<&str> = seen
        .iter()
        .filter(|(r, _)| *r == id)
        .map(|(_, p)| p.as_str())
        .collect();
    assert!(paths.iter().any(|p| p.ends_with("/CommitKey")), "{paths:?}");
    assert!(
        paths.iter().any(|p| p.ends_with("/WriteChunk")),
        "{paths:?}"
    );
    assert!(paths.iter().any(|p| p.ends_with("/PutBlock")), "{paths:?}");

    assert_eq!(missing.0, 404);
    let other = header(&missing.1, "x-amz-request-id").expect("an id");
    assert_ne!(other, id);
    let body = String::from_utf8_lossy(&missing.2);
    assert!(
        body.contains(&format!("<RequestId>{other}</RequestId>")),
        "{body}"
    );

    assert_eq!(presigned.0, 403);
    assert!(
        String::from_utf8_lossy(&presigned.2).contains("AuthorizationQueryParametersError"),
        "{}",
        String::from_utf8_lossy(&presigned.2)
    );
    cluster.shutdown().await;
}
