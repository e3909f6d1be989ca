//! Conformance details a client relies on, each one a kind the gateway now handles as Amazon
//! does: retries of idempotent requests, documented limits, bucket naming, self-copies,
//! system-defined metadata, listing fields, bucket re-creation, headers it does not implement.

use crate::common;

use base64::Engine;
use common::{between, code, header, signed_cluster, text};
use md5::{Digest, Md5};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_clients_send_are_answered_as_amazon_does() {
    let (cluster, s) = signed_cluster().await;
    tokio::task::spawn_blocking(move || {
        // Bucket naming rules in full; re-creating one's own bucket (us-east-1) is 200.
        for bad in ["foo.-bar", "foo-.bar", "xn--abc", "abc-s3alias", "192.168.5.4"] {
            let r = s.send("PUT", &format!("/{bad}"), &[], &[], b"");
            assert_eq!(code(&r), (400, "InvalidBucketName".into()), "{bad}");
        }
        assert_eq!(s.send("PUT", "/conf", &[], &[], b"").0, 200);
        assert_eq!(s.send("PUT", "/conf", &[], &[], b"").0, 200, "re-created by its owner");
        let r = s.send("GET", "/conf", &[("location", "")], &[], b"");
        assert_eq!(r.0, 200, "GetBucketLocation: {}", text(&r));
        assert!(text(&r).contains("LocationConstraint"), "{}", text(&r));
        assert_eq!(s.send("PUT", "/conf2", &[], &[], b"").0, 200);
        let r = s.send("GET", "/", &[("max-buckets", "1")], &[], b"");
        let body = text(&r);
        assert_eq!(between(&body, "<Name>", "</Name>"), vec!["conf"], "{body}");
        let token = between(&body, "<ContinuationToken>", "</ContinuationToken>");
        assert_eq!(token.len(), 1, "{body}");
        let r = s.send("GET", "/", &[("max-buckets", "1"), ("continuation-token", &token[0])], &[], b"");
        assert_eq!(between(&text(&r), "<Name>", "</Name>"), vec!["conf2"], "{}", text(&r));

        // System-defined metadata is stored and returned.
        let sys = [
            ("cache-control", "max-age=60"),
            ("content-disposition", "attachment; filename=\"a.txt\""),
            ("content-encoding", "gzip"),
            ("content-language", "de-CH"),
            ("expires", "Wed, 21 Oct 2037 07:28:00 GMT"),
        ];
        assert_eq!(s.send("PUT", "/conf/sys", &[], &sys, b"body").0, 200);
        for method in ["HEAD", "GET"] {
            let r = s.send(method, "/conf/sys", &[], &[], b"");
            for (name, value) in sys {
                assert_eq!(header(&r.1, name), Some(value), "{method} {name}");
            }
        }

        // Limits: 1,001 keys in one DeleteObjects (k0 among them stays); user metadata over
        // 2 KB.
        assert_eq!(s.send("PUT", "/conf/k0", &[], &[], b"k0").0, 200);
        let xml: String = std::iter::once("<Delete>".to_string())
            .chain((0..1001).map(|n| format!("<Object><Key>k{n}</Key></Object>")))
            .chain(std::iter::once("</Delete>".to_string()))
            .collect();
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(xml.as_bytes()));
        let r = s.send("POST", "/conf", &[("delete", "")], &[("content-md5", &md5)], xml.as_bytes());
        assert_eq!(code(&r), (400, "MalformedXML".into()));
        assert_eq!(s.send("HEAD", "/conf/k0", &[], &[], b"").0, 200, "nothing deleted");

        // DeleteObjects honours each entry's ETag condition.
        let k0 = s.send("HEAD", "/conf/k0", &[], &[], b"");
        let etag = header(&k0.1, "etag").expect("etag").to_string();
        assert_eq!(s.send("PUT", "/conf/k1", &[], &[], b"k1").0, 200);
        let xml = "<Delete><Object><Key>k0</Key><ETag>\"0123\"</ETag></Object><Object><Key>k1</Key></Object></Delete>".to_string();
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(xml.as_bytes()));
        let r = s.send("POST", "/conf", &[("delete", "")], &[("content-md5", &md5)], xml.as_bytes());
        assert_eq!(r.0, 200, "{}", text(&r));
        assert_eq!(between(&text(&r), "<Code>", "</Code>"), vec!["PreconditionFailed"], "{}", text(&r));
        assert_eq!(s.send("HEAD", "/conf/k0", &[], &[], b"").0, 200, "its ETag did not match");
        assert_eq!(s.send("HEAD", "/conf/k1", &[], &[], b"").0, 404);
        let xml = format!("<Delete><Object><Key>k0</Key><ETag>{etag}</ETag></Object></Delete>");
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(xml.as_bytes()));
        let r = s.send("POST", "/conf", &[("delete", "")], &[("content-md5", &md5)], xml.as_bytes());
        assert_eq!(r.0, 200, "{}", text(&r));
        assert_eq!(s.send("HEAD", "/conf/k0", &[], &[], b"").0, 404);
        // The integrity claims of an XML body are verified before it is acted on.
        assert_eq!(s.send("PUT", "/conf/k2", &[], &[], b"k2").0, 200);
        let xml = "<Delete><Object><Key>k2</Key></Object></Delete>";
        let wrong = base64::engine::general_purpose::STANDARD.encode(Md5::digest(b"another body"));
        let r = s.send("POST", "/conf", &[("delete", "")], &[("content-md5", &wrong)], xml.as_bytes());
        assert_eq!(code(&r), (400, "BadDigest".into()));
        let r = s.send("POST", "/conf", &[("delete", "")], &[("x-amz-checksum-crc32", "AAAAAA==")], xml.as_bytes());
        assert_eq!(code(&r), (400, "BadDigest".into()));
        assert_eq!(s.send("HEAD", "/conf/k2", &[], &[], b"").0, 200, "nothing deleted");
        let tagging = b"<Tagging><TagSet><Tag><Key>x</Key><Value>1</Value></Tag></TagSet></Tagging>";
        let r = s.send("PUT", "/conf/k2", &[("tagging", "")], &[("content-md5", &wrong)], tagging);
        assert_eq!(code(&r), (400, "BadDigest".into()));
        let big = "v".repeat(2100);
        let r = s.send("PUT", "/conf/meta", &[], &[("x-amz-meta-big", &big)], b"x");
        assert_eq!(code(&r), (400, "MetadataTooLarge".into()));

        // A copy onto itself must change something.
        let r = s.send("PUT", "/conf/sys", &[], &[("x-amz-copy-source", "/conf/sys")], b"");
        assert_eq!(code(&r), (400, "InvalidRequest".into()));
        let r = s.send(
            "PUT",
            "/conf/sys",
            &[],
            &[("x-amz-copy-source", "/conf/sys"), ("x-amz-metadata-directive", "REPLACE"), ("x-amz-meta-new", "1")],
            b"",
        );
        assert_eq!(r.0, 200, "{}", text(&r));
        let r = s.send("HEAD", "/conf/sys", &[], &[], b"");
        assert_eq!(header(&r.1, "x-amz-meta-new"), Some("1"));

        // Headers that would change a write's meaning are refused, not ignored.
        for h in [("x-amz-server-side-encryption", "AES256"), ("x-amz-acl", "public-read-write"), ("x-amz-object-lock-mode", "COMPLIANCE")] {
            let r = s.send("PUT", "/conf/refused", &[], &[h], b"x");
            assert_eq!(code(&r), (501, "NotImplemented".into()), "{h:?}");
        }
        assert_eq!(s.send("HEAD", "/conf/refused", &[], &[], b"").0, 404);

        // Listing fields: v1 always has Marker; an empty delimiter is not echoed; v2 returns
        // owners when asked.
        let r = s.send("GET", "/conf", &[], &[], b"");
        assert!(text(&r).contains("<Marker></Marker>") || text(&r).contains("<Marker/>"), "{}", text(&r));
        let r = s.send("GET", "/conf", &[("delimiter", "")], &[], b"");
        assert!(!text(&r).contains("<Delimiter>"), "{}", text(&r));
        let r = s.send("GET", "/conf", &[("list-type", "2"), ("fetch-owner", "true")], &[], b"");
        assert!(text(&r).contains("<Owner>"), "{}", text(&r));
        let r = s.send("GET", "/conf", &[("list-type", "2")], &[], b"");
        assert!(!text(&r).contains("<Owner>"), "{}", text(&r));

        // A Complete retried after it succeeded gets the same answer; once the key is
        // rewritten, the upload is gone.
        let r = s.send("POST", "/conf/mp", &[("uploads", "")], &[], b"");
        let id = between(&text(&r), "<UploadId>", "</UploadId>")[0].clone();
        let r = s.send("PUT", "/conf/mp", &[("partNumber", "1"), ("uploadId", &id)], &[], b"only part");
        let etag = header(&r.1, "etag").expect("etag").to_string();
        let xml = format!("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>");
        let first = s.send("POST", "/conf/mp", &[("uploadId", &id)], &[], xml.as_bytes());
        assert_eq!(first.0, 200, "{}", text(&first));
        let again = s.send("POST", "/conf/mp", &[("uploadId", &id)], &[], xml.as_bytes());
        assert_eq!(again.0, 200, "{}", text(&again));
        assert_eq!(
            between(&text(&again), "<ETag>", "</ETag>"),
            between(&text(&first), "<ETag>", "</ETag>")
        );
        assert_eq!(s.send("PUT", "/conf/mp", &[], &[], b"rewritten").0, 200);
        let r = s.send("POST", "/conf/mp", &[("uploadId", &id)], &[], xml.as_bytes());
        assert_eq!(code(&r), (404, "NoSuchUpload".into()));

        // A Complete sent for another key must not complete the upload (under its own key).
        let r = s.send("POST", "/conf/mp2", &[("uploads", "")], &[], b"");
        let id = between(&text(&r), "<UploadId>", "</UploadId>")[0].clone();
        let r = s.send("PUT", "/conf/mp2", &[("partNumber", "1"), ("uploadId", &id)], &[], b"part of mp2");
        let etag = header(&r.1, "etag").expect("etag").to_string();
        let xml = format!("<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>");
        let r = s.send("POST", "/conf/elsewhere", &[("uploadId", &id)], &[], xml.as_bytes());
        assert_eq!(code(&r), (404, "NoSuchUpload".into()));
        assert_eq!(s.send("HEAD", "/conf/mp2", &[], &[], b"").0, 404, "not completed");
        assert_eq!(s.send("HEAD", "/conf/elsewhere", &[], &[], b"").0, 404);
        // A checksum claim the object's checksum cannot answer is refused.
        let r = s.send(
            "POST",
            "/conf/mp2",
            &[("uploadId", &id)],
            &[("x-amz-checksum-sha256", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")],
            xml.as_bytes(),
        );
        assert_eq!(code(&r), (400, "InvalidRequest".into()));
        let r = s.send("POST", "/conf/mp2", &[("uploadId", &id)], &[], xml.as_bytes());
        assert_eq!(r.0, 200, "{}", text(&r));
    })
    .await
    .expect("blocking task");
    cluster.shutdown().await;
}

/// UploadPartCopy (ranges of another object become parts, copied inside the cluster) and
/// GetObjectAttributes (size, ETag, checksum and parts from the record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_part_copy_and_object_attributes() {
    let (cluster, s) = signed_cluster().await;
    tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/opsb", &[], &[], b"").0, 200);
        let src = common::data(6 * 1024 * 1024 + 17);
        assert_eq!(s.send("PUT", "/opsb/src", &[], &[], &src).0, 200);
        let r = s.send("POST", "/opsb/dst", &[("uploads", "")], &[], b"");
        let id = between(&text(&r), "<UploadId>", "</UploadId>")[0].clone();
        let split = 5 * 1024 * 1024;
        let mut etags = Vec::new();
        for (n, range) in [("1", format!("bytes=0-{}", split - 1)), ("2", format!("bytes={split}-{}", src.len() - 1))] {
            let r = s.send(
                "PUT",
                "/opsb/dst",
                &[("partNumber", n), ("uploadId", &id)],
                &[("x-amz-copy-source", "/opsb/src"), ("x-amz-copy-source-range", &range)],
                b"",
            );
            assert_eq!(r.0, 200, "UploadPartCopy {n}: {}", text(&r));
            let etag = between(&text(&r), "<ETag>", "</ETag>")[0].replace("&quot;", "\"");
            etags.push(etag);
        }
        let r = s.send(
            "PUT",
            "/opsb/dst",
            &[("partNumber", "3"), ("uploadId", &id)],
            &[("x-amz-copy-source", "/opsb/src"), ("x-amz-copy-source-range", "bytes=5-1")],
            b"",
        );
        assert_eq!(code(&r), (400, "InvalidArgument".into()));
        let xml = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag></Part><Part><PartNumber>2</PartNumber><ETag>{}</ETag></Part></CompleteMultipartUpload>",
            etags[0], etags[1]
        );
        let r = s.send("POST", "/opsb/dst", &[("uploadId", &id)], &[], xml.as_bytes());
        assert_eq!(r.0, 200, "{}", text(&r));
        let r = s.send("GET", "/opsb/dst", &[], &[], b"");
        assert!(common::dechunk(&r.2, &r.1) == src, "the copied parts make the source");

        let r = s.send(
            "GET",
            "/opsb/dst",
            &[("attributes", "")],
            &[("x-amz-object-attributes", "ETag,ObjectSize,Checksum,ObjectParts,StorageClass")],
            b"",
        );
        assert_eq!(r.0, 200, "{}", text(&r));
        let body = text(&r);
        assert_eq!(between(&body, "<ObjectSize>", "</ObjectSize>"), vec![src.len().to_string()]);
        assert_eq!(between(&body, "<PartsCount>", "</PartsCount>"), vec!["2"], "{body}");
        assert_eq!(between(&body, "<Size>", "</Size>"), vec![split.to_string(), (src.len() - split).to_string()]);
        assert_eq!(between(&body, "<StorageClass>", "</StorageClass>"), vec!["STANDARD"]);
        assert!(body.contains("<ChecksumCRC64NVME>"), "{body}");
        assert!(body.contains("<ETag>"), "{body}");
        let r = s.send("GET", "/opsb/src", &[("attributes", "")], &[("x-amz-object-attributes", "ObjectSize")], b"");
        let body = text(&r);
        assert_eq!(between(&body, "<ObjectSize>", "</ObjectSize>"), vec![src.len().to_string()], "{body}");
        assert!(!body.contains("<ETag>"), "only what was asked: {body}");
    })
    .await
    .expect("blocking task");
    cluster.shutdown().await;
}

/// Object tags: set at PUT, replaced and deleted in place (the ETag stays), counted by HEAD,
/// copied or replaced by CopyObject's tagging directive, and limited as Amazon limits them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_tags() {
    let (cluster, s) = signed_cluster().await;
    tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/tagb", &[], &[], b"").0, 200);
        let r = s.send(
            "PUT",
            "/tagb/k",
            &[],
            &[("x-amz-tagging", "a=1&b=two%20words")],
            b"data",
        );
        assert_eq!(r.0, 200, "{}", text(&r));
        let etag = header(&r.1, "etag").expect("etag").to_string();
        let head = s.send("HEAD", "/tagb/k", &[], &[], b"");
        assert_eq!(header(&head.1, "x-amz-tagging-count"), Some("2"));
        let r = s.send("GET", "/tagb/k", &[("tagging", "")], &[], b"");
        let body = text(&r);
        assert_eq!(between(&body, "<Key>", "</Key>"), vec!["a", "b"], "{body}");
        assert_eq!(
            between(&body, "<Value>", "</Value>"),
            vec!["1", "two words"],
            "{body}"
        );

        let xml = b"<Tagging><TagSet><Tag><Key>c</Key><Value>3</Value></Tag></TagSet></Tagging>";
        let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(xml));
        let r = s.send(
            "PUT",
            "/tagb/k",
            &[("tagging", "")],
            &[("content-md5", &md5)],
            xml,
        );
        assert_eq!(r.0, 200, "{}", text(&r));
        let r = s.send("GET", "/tagb/k", &[("tagging", "")], &[], b"");
        assert_eq!(between(&text(&r), "<Key>", "</Key>"), vec!["c"]);
        let head = s.send("HEAD", "/tagb/k", &[], &[], b"");
        assert_eq!(
            header(&head.1, "etag"),
            Some(etag.as_str()),
            "tags change no data"
        );

        // CopyObject: the source's tags by default, the request's with REPLACE.
        let r = s.send(
            "PUT",
            "/tagb/copy",
            &[],
            &[("x-amz-copy-source", "/tagb/k")],
            b"",
        );
        assert_eq!(r.0, 200, "{}", text(&r));
        let r = s.send("GET", "/tagb/copy", &[("tagging", "")], &[], b"");
        assert_eq!(between(&text(&r), "<Key>", "</Key>"), vec!["c"]);
        let r = s.send(
            "PUT",
            "/tagb/copy2",
            &[],
            &[
                ("x-amz-copy-source", "/tagb/k"),
                ("x-amz-tagging-directive", "REPLACE"),
                ("x-amz-tagging", "d=4"),
            ],
            b"",
        );
        assert_eq!(r.0, 200, "{}", text(&r));
        let r = s.send("GET", "/tagb/copy2", &[("tagging", "")], &[], b"");
        assert_eq!(between(&text(&r), "<Key>", "</Key>"), vec!["d"]);

        let r = s.send("DELETE", "/tagb/k", &[("tagging", "")], &[], b"");
        assert_eq!(r.0 / 100, 2, "{}", text(&r));
        let head = s.send("HEAD", "/tagb/k", &[], &[], b"");
        assert_eq!(header(&head.1, "x-amz-tagging-count"), None);
        assert_eq!(head.0, 200, "the object stays");

        let eleven: Vec<String> = (0..11).map(|n| format!("k{n}=v")).collect();
        let r = s.send(
            "PUT",
            "/tagb/many",
            &[],
            &[("x-amz-tagging", &eleven.join("&"))],
            b"x",
        );
        assert_eq!(code(&r), (400, "InvalidTag".into()));
        assert_eq!(s.send("HEAD", "/tagb/many", &[], &[], b"").0, 404);
    })
    .await
    .expect("blocking task");
    cluster.shutdown().await;
}
