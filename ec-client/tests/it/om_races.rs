//! om operations that race over gRPC (issue 11, part 2 examples): each is
//! one write transaction that checks what it depends on, so exactly one of
//! two conflicting operations wins and the state is the winner's.

use crate::common;

use std::collections::BTreeMap;

use common::{cluster, data, replicated_bucket};
use ec_client::ClientError;

fn om_error(e: &ClientError) -> &'static str {
    match e {
        ClientError::Om { code, .. } => code.name(),
        _ => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_and_abort_of_one_upload_have_exactly_one_winner() {
    let (cluster, client) = cluster().await;
    replicated_bucket(&client, "b", 1 << 20).await;
    let other = cluster.client().await.expect("second client");
    let (mut completes, mut aborts) = (0, 0);
    for i in 0..30u64 {
        let key = format!("k{i}");
        let up = client
            .initiate_multipart_upload("b", &key, None, BTreeMap::new())
            .await
            .expect("initiate");
        let bytes = data(1000, i);
        let mut w = client.upload_part(&up, 1).await.expect("part");
        w.write(&bytes).await.expect("write");
        let p = w.close_part("e1").await.expect("close part");
        let parts = vec![(1, p.etag)];
        let (c, a) = tokio::join!(
            client.complete_multipart_upload(&up, &parts, 0, BTreeMap::new()),
            other.abort_multipart_upload(&up)
        );
        let exists = client.key_info("b", &key).await.is_ok();
        match (&c, &a) {
            (Ok(_), Err(e)) => {
                assert_eq!(om_error(e), "NO_SUCH_UPLOAD", "{e}");
                assert!(exists, "try {i}: complete won, the key exists");
                assert!(common::read_all(&client, "b", &key).await == bytes);
                completes += 1;
            }
            (Err(e), Ok(())) => {
                assert_eq!(om_error(e), "NO_SUCH_UPLOAD", "{e}");
                assert!(!exists, "try {i}: abort won, no key");
                aborts += 1;
            }
            _ => panic!("try {i}: complete {c:?} and abort {a:?} must have one winner"),
        }
        assert!(
            client.list_parts(&up).await.is_err(),
            "try {i}: the upload is gone either way"
        );
    }
    assert_eq!(completes + aborts, 30);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_with_an_upload_in_progress_cannot_be_deleted() {
    let (cluster, client) = cluster().await;
    replicated_bucket(&client, "b", 1 << 20).await;
    let up = client
        .initiate_multipart_upload("b", "k", None, BTreeMap::new())
        .await
        .expect("initiate");
    let e = client.delete_bucket("b").await.expect_err("not empty");
    assert_eq!(om_error(&e), "BUCKET_NOT_EMPTY", "{e}");
    client.abort_multipart_upload(&up).await.expect("abort");
    client.delete_bucket("b").await.expect("empty now");
    replicated_bucket(&client, "b", 1 << 20).await;
    assert!(
        client
            .list_multipart_uploads("b", "")
            .await
            .expect("uploads")
            .is_empty(),
        "a bucket created again under the name inherits no upload"
    );
    cluster.shutdown().await;
}
