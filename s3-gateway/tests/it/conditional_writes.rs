//! Conditional writes through SigV4-signed requests: `If-None-Match: *` and `If-Match` on
//! PutObject, CompleteMultipartUpload and CopyObject, `If-Match` on DeleteObject. A failed
//! condition stores nothing; sixteen concurrent create-only PUTs of one key leave exactly one
//! winner, whose bytes are the object.

use crate::common;

use std::sync::Arc;

use common::{code, dechunk, header, signed_cluster, text};

/// Each header on each write: what holds is written, what does not is refused with Amazon's
/// code and leaves the object as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditions_on_put_copy_complete_and_delete() {
    let (cluster, s) = signed_cluster().await;
    tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/cwb", &[], &[], b"").0, 200);
        let get = |k: &str| {
            let r = s.send("GET", &format!("/cwb/{k}"), &[], &[], b"");
            (r.0, dechunk(&r.2, &r.1))
        };
        // If-None-Match: * creates once.
        let star = [("if-none-match", "*")];
        let r = s.send("PUT", "/cwb/k", &[], &star, b"first");
        assert_eq!(r.0, 200, "{}", text(&r));
        let first_etag = header(&r.1, "etag").expect("etag").to_string();
        let r = s.send("PUT", "/cwb/k", &[], &star, b"second");
        assert_eq!(code(&r), (412, "PreconditionFailed".into()));
        assert_eq!(get("k"), (200, b"first".to_vec()), "the object stays");
        let r = s.send("PUT", "/cwb/k", &[], &[("if-none-match", "\"abc\"")], b"x");
        assert_eq!(code(&r), (400, "InvalidRequest".into()));

        // If-Match: only the current ETag.
        let r = s.send("PUT", "/cwb/k", &[], &[("if-match", "\"0123\"")], b"second");
        assert_eq!(code(&r), (412, "PreconditionFailed".into()));
        let r = s.send("PUT", "/cwb/missing", &[], &[("if-match", "*")], b"x");
        assert_eq!(code(&r), (404, "NoSuchKey".into()));
        let r = s.send("PUT", "/cwb/k", &[], &[("if-match", &first_etag)], b"second");
        assert_eq!(r.0, 200, "{}", text(&r));
        let second_etag = header(&r.1, "etag").expect("etag").to_string();
        let r = s.send("PUT", "/cwb/k", &[], &[("if-match", &first_etag)], b"third");
        assert_eq!(code(&r), (412, "PreconditionFailed".into()), "the old ETag no longer matches");
        assert_eq!(get("k"), (200, b"second".to_vec()));

        // CopyObject onto an existing destination with If-None-Match: *.
        let copy = [("x-amz-copy-source", "/cwb/k"), ("if-none-match", "*")];
        assert_eq!(s.send("PUT", "/cwb/other", &[], &[], b"other").0, 200);
        let r = s.send("PUT", "/cwb/other", &[], &copy, b"");
        assert_eq!(code(&r), (412, "PreconditionFailed".into()));
        assert_eq!(get("other"), (200, b"other".to_vec()));
        let r = s.send("PUT", "/cwb/fresh", &[], &copy, b"");
        assert_eq!(r.0, 200, "{}", text(&r));
        assert_eq!(get("fresh"), (200, b"second".to_vec()));

        // CompleteMultipartUpload with If-None-Match: * onto an existing key: refused, and the
        // upload stays for a retry without the header.
        let r = s.send("POST", "/cwb/k", &[("uploads", "")], &[], b"");
        let b = text(&r);
        let id = b
            .split("<UploadId>")
            .nth(1)
            .and_then(|t| t.split("</UploadId>").next())
            .expect("upload id")
            .to_string();
        let r = s.send("PUT", "/cwb/k", &[("partNumber", "1"), ("uploadId", &id)], &[], b"part");
        let etag = header(&r.1, "etag").expect("part etag").to_string();
        let xml = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        );
        let r = s.send("POST", "/cwb/k", &[("uploadId", &id)], &star, xml.as_bytes());
        assert_eq!(code(&r), (412, "PreconditionFailed".into()));
        assert_eq!(get("k"), (200, b"second".to_vec()));
        let r = s.send("POST", "/cwb/k", &[("uploadId", &id)], &[("if-match", &second_etag)], xml.as_bytes());
        assert_eq!(r.0, 200, "{}", text(&r));
        assert_eq!(get("k"), (200, b"part".to_vec()));

        // DeleteObject If-Match.
        let r = s.send("DELETE", "/cwb/other", &[], &[("if-match", "\"0123\"")], b"");
        assert_eq!(code(&r), (412, "PreconditionFailed".into()));
        assert_eq!(get("other").0, 200, "still there");
        let r = s.send("DELETE", "/cwb/other", &[], &[("x-amz-if-match-size", "6")], b"");
        assert_eq!(code(&r), (412, "PreconditionFailed".into()), "its size is 5");
        let other = s.send("HEAD", "/cwb/other", &[], &[], b"");
        let etag = header(&other.1, "etag").expect("etag").to_string();
        let r = s.send("DELETE", "/cwb/other", &[], &[("if-match", &etag), ("x-amz-if-match-size", "5")], b"");
        assert_eq!(r.0, 204, "{}", text(&r));
        assert_eq!(get("other").0, 404);
    })
    .await
    .expect("blocking task");
    cluster.shutdown().await;
}

/// Sixteen create-only PUTs of one key at once: exactly one 200; the others are refused (412
/// when the key existed at arrival, 409 when another write won during the upload), and the
/// object is the winner's bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_create_only_puts_have_one_winner() {
    let (cluster, s) = signed_cluster().await;
    let s = Arc::new(s);
    let s2 = Arc::clone(&s);
    tokio::task::spawn_blocking(move || assert_eq!(s2.send("PUT", "/race", &[], &[], b"").0, 200))
        .await
        .expect("create bucket");
    let mut tasks = Vec::new();
    for n in 0..16u8 {
        let s = Arc::clone(&s);
        tasks.push(tokio::task::spawn_blocking(move || {
            let payload = vec![n; 100_000];
            let r = s.send("PUT", "/race/k", &[], &[("if-none-match", "*")], &payload);
            (n, code(&r))
        }));
    }
    let mut winners = Vec::new();
    for t in tasks {
        let (n, (status, c)) = t.await.expect("task");
        match status {
            200 => winners.push(n),
            412 => assert_eq!(c, "PreconditionFailed"),
            409 => assert_eq!(c, "ConditionalRequestConflict"),
            other => panic!("PUT {n}: unexpected {other} {c}"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    let w = winners[0];
    let got = tokio::task::spawn_blocking(move || {
        let r = s.send("GET", "/race/k", &[], &[], b"");
        dechunk(&r.2, &r.1)
    })
    .await
    .expect("get");
    assert!(got == vec![w; 100_000], "the object is the winner's");
    cluster.shutdown().await;
}

/// The om's own check, not only the gateway's: a create-only PUT that found no key on arrival
/// is refused at its commit (409 `ConditionalRequestConflict`) when another writer created the
/// key while its body was still arriving; the other writer's object stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_only_put_that_loses_during_its_upload_is_refused_by_the_om() {
    let (cluster, s) = signed_cluster().await;
    let om = Arc::clone(cluster.om());
    let handle = tokio::runtime::Handle::current();
    let s = Arc::new(s);
    let (r, got) = tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/late", &[], &[], b"").0, 200);
        let body = vec![7u8; 3 * 1024 * 1024];
        let r = s.send_paused("/late/k", &[("if-none-match", "*")], &body, || {
            // The paused PUT passed the gateway's check and opened its om session...
            handle.block_on(async {
                tokio::time::timeout(
                    std::time::Duration::from_secs(30),
                    om.wait_open_sessions(|n| n > 0),
                )
                .await
                .expect("the paused PUT opened its session")
                .expect("count");
            });
            // ...when another writer creates the key.
            assert_eq!(s.send("PUT", "/late/k", &[], &[], b"winner").0, 200);
        });
        let g = s.send("GET", "/late/k", &[], &[], b"");
        (r, dechunk(&g.2, &g.1))
    })
    .await
    .expect("requests");
    assert_eq!(code(&r), (409, "ConditionalRequestConflict".into()));
    assert_eq!(got, b"winner");
    cluster.shutdown().await;
}
