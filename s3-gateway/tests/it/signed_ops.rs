//! Every S3 operation the gateway serves, through SigV4-signed requests
//! (headers, and a streaming aws-chunked upload as aws-cli and the SDKs
//! send it), against a minicluster; plus the signature errors. The same
//! operations run through aws-cli and boto3 in `.ci/run`.

use crate::common;

use base64::Engine;
use common::{Signer, between, data, dechunk, header, signed_cluster};
use md5::{Digest, Md5};
use minicluster::{S3_ACCESS_KEY, S3_SECRET_KEY};

async fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// Buckets, PUT (plain and streaming-signed), GET, HEAD, COPY, the three
/// listings, DeleteObject, DeleteObjects and DeleteBucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucket_and_object_operations() {
    let (cluster, s) = signed_cluster().await;
    let report = run(move || {
        let ok = |r: &(u16, Vec<(String, String)>, Vec<u8>), what: &str| {
            assert!(r.0 / 100 == 2, "{what}: {} {}", r.0, String::from_utf8_lossy(&r.2));
        };
        ok(&s.send("PUT", "/sig", &[], &[], b""), "CreateBucket");
        ok(&s.send("HEAD", "/sig", &[], &[], b""), "HeadBucket");
        let r = s.send("GET", "/", &[], &[], b"");
        ok(&r, "ListBuckets");
        assert!(String::from_utf8_lossy(&r.2).contains("<Name>sig</Name>"));

        let small = data(3000);
        ok(&s.send("PUT", "/sig/plain.bin", &[], &[("x-amz-meta-color", "red")], &small), "PutObject");
        let big = data(300_000);
        let r = s.send_with("PUT", "/sig/dir/streamed.bin", &[], &[], &big, true);
        ok(&r, "PutObject (aws-chunked, signed chunks)");
        let etag = header(&r.1, "etag").expect("etag").trim_matches('"').to_string();
        let want: String = Md5::digest(&big).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(etag, want);
        let r = s.send("GET", "/sig/dir/streamed.bin", &[], &[], b"");
        assert_eq!(r.0, 200);
        assert!(dechunk(&r.2, &r.1) == big, "streamed upload reads back");
        let r = s.send("HEAD", "/sig/plain.bin", &[], &[], b"");
        assert_eq!((r.0, header(&r.1, "x-amz-meta-color")), (200, Some("red")));

        let r = s.send(
            "PUT",
            "/sig/never.bin",
            &[],
            &[("x-amz-copy-source", "/sig/plain.bin"), ("x-amz-copy-source-if-match", "\"0000\"")],
            b"",
        );
        assert_eq!(r.0, 412, "a failing copy-source condition");
        ok(&s.send("PUT", "/sig/copy.bin", &[], &[("x-amz-copy-source", "/sig/plain.bin")], b""), "CopyObject");
        let r = s.send("GET", "/sig/copy.bin", &[], &[], b"");
        assert!(dechunk(&r.2, &r.1) == small && header(&r.1, "x-amz-meta-color") == Some("red"));

        let r = s.send("GET", "/sig", &[("list-type", "2"), ("delimiter", "/")], &[], b"");
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert_eq!(between(&body, "<Key>", "</Key>"), vec!["copy.bin", "plain.bin"], "{body}");
        assert_eq!(between(&body, "<Prefix>", "</Prefix>").last().map(String::as_str), Some("dir/"), "{body}");
        let r = s.send("GET", "/sig", &[("max-keys", "1")], &[], b"");
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert!(body.contains("<IsTruncated>true</IsTruncated>") && body.contains("<Key>copy.bin</Key>"), "{body}");
        let r = s.send("GET", "/sig", &[("versions", "")], &[], b"");
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert_eq!(between(&body, "<VersionId>", "</VersionId>"), vec!["null"; 3], "{body}");

        ok(&s.send("DELETE", "/sig/copy.bin", &[], &[], b""), "DeleteObject");
        let xml = b"<Delete><Object><Key>plain.bin</Key></Object><Object><Key>dir/streamed.bin</Key></Object></Delete>";
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(xml));
        let r = s.send("POST", "/sig", &[("delete", "")], &[("content-md5", &md5)], xml);
        ok(&r, "DeleteObjects");
        assert_eq!(between(&String::from_utf8_lossy(&r.2), "<Deleted>", "</Deleted>").len(), 2);
        ok(&s.send("DELETE", "/sig", &[], &[], b""), "DeleteBucket");
        s.send("HEAD", "/sig", &[], &[], b"").0
    })
    .await;
    assert_eq!(report, 404, "the bucket is gone");
    cluster.shutdown().await;
}

/// ListMultipartUploads with a delimiter rolls more uploads than one om page (1000) into
/// one common prefix, and a page that ends on a common prefix resumes after every upload
/// under it (it listed the prefix again on the next page before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_uploads_rolls_up_more_than_an_om_page() {
    let (cluster, s) = signed_cluster().await;
    let client = cluster.client().await.expect("client");
    let s = run(move || {
        assert_eq!(s.send("PUT", "/roll", &[], &[], b"").0, 200);
        s
    })
    .await;
    for i in 0..1005 {
        client
            .initiate_multipart_upload("roll", &format!("d/k{i:04}"), None, Default::default())
            .await
            .expect("initiate");
    }
    for k in ["c", "e"] {
        client
            .initiate_multipart_upload("roll", k, None, Default::default())
            .await
            .expect("initiate");
    }
    run(move || {
        let r = s.send(
            "GET",
            "/roll",
            &[("uploads", ""), ("delimiter", "/")],
            &[],
            b"",
        );
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert_eq!(between(&body, "<Key>", "</Key>"), vec!["c", "e"], "{body}");
        let prefixes: Vec<String> = between(&body, "<Prefix>", "</Prefix>")
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        assert_eq!(prefixes, vec!["d/"], "{body}");
        assert!(body.contains("<IsTruncated>false</IsTruncated>"), "{body}");
        // One entry a page: c, then d/, then e — each once.
        let (mut seen, mut key_marker, mut id_marker) = (Vec::new(), String::new(), String::new());
        for _ in 0..5 {
            let mut q = vec![("uploads", ""), ("delimiter", "/"), ("max-uploads", "1")];
            if !key_marker.is_empty() {
                q.push(("key-marker", &key_marker));
                q.push(("upload-id-marker", &id_marker));
            }
            let r = s.send("GET", "/roll", &q, &[], b"");
            let body = String::from_utf8_lossy(&r.2).to_string();
            seen.extend(
                between(&body, "<Key>", "</Key>")
                    .iter()
                    .map(|v| v.to_string()),
            );
            seen.extend(
                between(&body, "<Prefix>", "</Prefix>")
                    .iter()
                    .filter(|p| !p.is_empty())
                    .map(|v| v.to_string()),
            );
            if !body.contains("<IsTruncated>true</IsTruncated>") {
                break;
            }
            key_marker = between(&body, "<NextKeyMarker>", "</NextKeyMarker>")[0].to_string();
            id_marker =
                between(&body, "<NextUploadIdMarker>", "</NextUploadIdMarker>")[0].to_string();
        }
        assert_eq!(seen, ["c", "d/", "e"]);
    })
    .await;
    cluster.shutdown().await;
}

/// CreateMultipartUpload, UploadPart, ListParts, ListMultipartUploads,
/// CompleteMultipartUpload (ETag in the `-N` form), GET ?partNumber, and
/// AbortMultipartUpload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_operations() {
    let (cluster, s) = signed_cluster().await;
    run(move || {
        assert_eq!(s.send("PUT", "/mpu", &[], &[], b"").0, 200);
        let r = s.send("POST", "/mpu/obj", &[("uploads", "")], &[], b"");
        let body = String::from_utf8_lossy(&r.2).to_string();
        let id = between(&body, "<UploadId>", "</UploadId>")[0].to_string();
        let p1 = data(5 * 1024 * 1024);
        let p2 = b"tail".to_vec();
        let mut etags = Vec::new();
        for (n, part) in [(1, &p1), (2, &p2)] {
            let r = s.send("PUT", "/mpu/obj", &[("partNumber", &n.to_string()), ("uploadId", &id)], &[], part);
            assert_eq!(r.0, 200, "UploadPart {n}: {}", String::from_utf8_lossy(&r.2));
            etags.push(header(&r.1, "etag").expect("etag").to_string());
        }
        let r = s.send("GET", "/mpu/obj", &[("uploadId", &id)], &[], b"");
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert_eq!(between(&body, "<PartNumber>", "</PartNumber>"), vec!["1", "2"], "ListParts: {body}");
        let r = s.send("GET", "/mpu", &[("uploads", "")], &[], b"");
        assert!(String::from_utf8_lossy(&r.2).contains(&id), "ListMultipartUploads");
        let xml = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag></Part><Part><PartNumber>2</PartNumber><ETag>{}</ETag></Part></CompleteMultipartUpload>",
            etags[0], etags[1]
        );
        let r = s.send("POST", "/mpu/obj", &[("uploadId", &id)], &[], xml.as_bytes());
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert_eq!(r.0, 200, "Complete: {body}");
        let etag = between(&body, "<ETag>", "</ETag>")[0].replace("&quot;", "").replace('"', "");
        assert!(etag.ends_with("-2") && etag.len() == 34, "multipart ETag form: {body}");
        let r = s.send("GET", "/mpu/obj", &[], &[], b"");
        let whole = dechunk(&r.2, &r.1);
        assert!(whole.len() == p1.len() + 4 && whole[..p1.len()] == p1[..] && whole[p1.len()..] == p2[..]);
        let r = s.send("GET", "/mpu/obj", &[("partNumber", "2")], &[], b"");
        assert_eq!((r.0, header(&r.1, "x-amz-mp-parts-count")), (206, Some("2")));
        assert_eq!(dechunk(&r.2, &r.1), p2);

        // ListMultipartUploads pages with max-uploads and the two markers.
        let mut ids = Vec::new();
        for k in ["p/a", "p/b", "p/c"] {
            let r = s.send("POST", &format!("/mpu/{k}"), &[("uploads", "")], &[], b"");
            ids.push(between(&String::from_utf8_lossy(&r.2), "<UploadId>", "</UploadId>")[0].to_string());
        }
        let (mut seen, mut key_marker, mut id_marker) = (Vec::new(), String::new(), String::new());
        for _ in 0..5 {
            let mut q = vec![("uploads", ""), ("prefix", "p/"), ("max-uploads", "2")];
            if !key_marker.is_empty() {
                q.push(("key-marker", &key_marker));
                q.push(("upload-id-marker", &id_marker));
            }
            let r = s.send("GET", "/mpu", &q, &[], b"");
            let body = String::from_utf8_lossy(&r.2).to_string();
            seen.extend(between(&body, "<UploadId>", "</UploadId>").iter().map(|v| v.to_string()));
            if !body.contains("<IsTruncated>true</IsTruncated>") {
                break;
            }
            key_marker = between(&body, "<NextKeyMarker>", "</NextKeyMarker>")[0].to_string();
            id_marker = between(&body, "<NextUploadIdMarker>", "</NextUploadIdMarker>")[0].to_string();
        }
        assert_eq!(seen, ids, "paged ListMultipartUploads");
        let r = s.send("GET", "/mpu", &[("uploads", ""), ("delimiter", "/")], &[], b"");
        let body = String::from_utf8_lossy(&r.2).to_string();
        assert!(body.contains("<Prefix>p/</Prefix>") && !body.contains("<Key>p/a</Key>"), "{body}");
        for (k, id) in ["p/a", "p/b", "p/c"].iter().zip(&ids) {
            assert_eq!(s.send("DELETE", &format!("/mpu/{k}"), &[("uploadId", id)], &[], b"").0, 204);
        }

        let r = s.send("POST", "/mpu/gone", &[("uploads", "")], &[], b"");
        let id2 = between(&String::from_utf8_lossy(&r.2), "<UploadId>", "</UploadId>")[0].to_string();
        assert_eq!(s.send("DELETE", "/mpu/gone", &[("uploadId", &id2)], &[], b"").0, 204, "AbortMultipartUpload");
        let r = s.send("GET", "/mpu/gone", &[("uploadId", &id2)], &[], b"");
        assert!(r.0 == 404 && String::from_utf8_lossy(&r.2).contains("NoSuchUpload"));
    })
    .await;
    cluster.shutdown().await;
}

/// Signature errors: a wrong secret is 403 SignatureDoesNotMatch, an unknown
/// key 403 InvalidAccessKeyId, a clock two hours off 403 RequestTimeTooSkewed,
/// and an unsigned request 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signature_errors() {
    let (cluster, s) = signed_cluster().await;
    let addr = s.addr;
    run(move || {
        let code = |r: &(u16, Vec<(String, String)>, Vec<u8>)| {
            (
                r.0,
                between(&String::from_utf8_lossy(&r.2), "<Code>", "</Code>")
                    .first()
                    .map(|c| c.to_string()),
            )
        };
        let wrong = Signer {
            secret_key: "nope".into(),
            ..Signer {
                addr,
                access_key: S3_ACCESS_KEY.into(),
                secret_key: String::new(),
                skew_secs: 0,
            }
        };
        assert_eq!(
            code(&wrong.send("GET", "/", &[], &[], b"")),
            (403, Some("SignatureDoesNotMatch".into()))
        );
        let unknown = Signer {
            addr,
            access_key: "nobody".into(),
            secret_key: S3_SECRET_KEY.into(),
            skew_secs: 0,
        };
        assert_eq!(
            code(&unknown.send("GET", "/", &[], &[], b"")),
            (403, Some("InvalidAccessKeyId".into()))
        );
        let skewed = Signer {
            addr,
            access_key: S3_ACCESS_KEY.into(),
            secret_key: S3_SECRET_KEY.into(),
            skew_secs: -7200,
        };
        assert_eq!(
            code(&skewed.send("GET", "/", &[], &[], b"")),
            (403, Some("RequestTimeTooSkewed".into()))
        );
        let unsigned = common::http(addr, "GET", "/", &[], b"");
        assert_eq!(unsigned.0, 403);
        let signed_get_of_object = s.send("GET", "/nobucket/x", &[], &[], b"");
        assert_eq!(
            code(&signed_get_of_object),
            (404, Some("NoSuchBucket".into()))
        );
    })
    .await;
    // Rejections before any operation ran are counted too.
    let m = cluster.s3_metrics().expect("metrics");
    assert_eq!(m.responses.get(&403).copied(), Some(4), "{m:?}");
    assert_eq!(m.requests_of("GetObject"), 1);
    cluster.shutdown().await;
}
