//! Every integrity claim a request makes is verified before the object becomes visible:
//! `Content-MD5`, `x-amz-checksum-*` as a header or an aws-chunked trailer, the declared
//! length; a mismatch is refused with Amazon's code and stores nothing (the previous object
//! stays). Checksums are stored and returned by GET/HEAD with `x-amz-checksum-mode: ENABLED`,
//! per part and for the whole multipart object (composite `-N` and full-object CRCs).

use crate::common;

use base64::Engine;
use common::{between, code, dechunk, header, signed_cluster, text};

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn crc32(b: &[u8]) -> Vec<u8> {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32IsoHdlc, b).to_be_bytes()[4..].to_vec()
}

fn crc32c(b: &[u8]) -> Vec<u8> {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, b).to_be_bytes()[4..].to_vec()
}

/// Single PUTs: header and trailer checksums, Content-MD5, declared lengths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_claims_are_verified_before_anything_is_stored() {
    let (cluster, s) = signed_cluster().await;
    tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/integ", &[], &[], b"").0, 200);
        let get = |k: &str, mode: bool| {
            let h: &[(&str, &str)] = if mode {
                &[("x-amz-checksum-mode", "ENABLED")]
            } else {
                &[]
            };
            let r = s.send("GET", &format!("/integ/{k}"), &[], h, b"");
            let body = dechunk(&r.2, &r.1);
            (r.0, body, r.1)
        };
        // The example: a wrong CRC32 is BadDigest and nothing is stored.
        let r = s.send(
            "PUT",
            "/integ/hello.txt",
            &[],
            &[("x-amz-checksum-crc32", "AAAAAA==")],
            b"hello\n",
        );
        assert_eq!(code(&r), (400, "BadDigest".into()));
        assert_eq!(get("hello.txt", false).0, 404);
        let r = s.send(
            "PUT",
            "/integ/hello.txt",
            &[],
            &[("x-amz-checksum-crc32", "NjowIA==")],
            b"hello\n",
        );
        assert_eq!(r.0, 200);
        assert_eq!(header(&r.1, "x-amz-checksum-crc32"), Some("NjowIA=="));
        let (status, body, h) = get("hello.txt", true);
        assert_eq!((status, body.as_slice()), (200, &b"hello\n"[..]));
        assert_eq!(header(&h, "x-amz-checksum-crc32"), Some("NjowIA=="));
        assert_eq!(header(&h, "x-amz-checksum-type"), Some("FULL_OBJECT"));
        assert_eq!(
            header(&get("hello.txt", false).2, "x-amz-checksum-crc32"),
            None,
            "only when asked"
        );
        let r = s.send(
            "HEAD",
            "/integ/hello.txt",
            &[],
            &[("x-amz-checksum-mode", "ENABLED")],
            b"",
        );
        assert_eq!(header(&r.1, "x-amz-checksum-crc32"), Some("NjowIA=="));

        // A failed overwrite leaves the previous object.
        for (headers, want) in [
            (
                vec![("x-amz-checksum-crc32", "AAAAAA==")],
                (400, "BadDigest"),
            ),
            (
                vec![("x-amz-checksum-crc32", "AAAA")],
                (400, "InvalidRequest"),
            ),
            (
                vec![
                    ("x-amz-checksum-crc32", "NjowIA=="),
                    ("x-amz-checksum-sha1", "AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
                ],
                (400, "InvalidRequest"),
            ),
            (vec![("content-md5", "")], (400, "InvalidDigest")),
            (
                vec![("content-md5", "AAAAAAAAAAAAAAAAAAAAAA==")],
                (400, "BadDigest"),
            ),
            (
                vec![("x-amz-sdk-checksum-algorithm", "MD4")],
                (400, "InvalidRequest"),
            ),
        ] {
            let r = s.send("PUT", "/integ/hello.txt", &[], &headers, b"changed\n");
            assert_eq!(code(&r), (want.0, want.1.to_string()), "{headers:?}");
            assert_eq!(
                get("hello.txt", false).1,
                b"hello\n",
                "{headers:?}: the old object stays"
            );
        }

        // Without a checksum the gateway computes and stores CRC64NVME.
        let r = s.send("PUT", "/integ/plain", &[], &[], b"plain");
        assert!(
            header(&r.1, "x-amz-checksum-crc64nvme").is_some(),
            "{:?}",
            r.1
        );
        assert!(header(&get("plain", true).2, "x-amz-checksum-crc64nvme").is_some());

        // A trailer, as current aws-cli and SDKs send CRCs: verified after the body.
        let data = common::data(200_000);
        let good = b64(&crc32c(&data));
        let r = s.send_trailer(
            "/integ/trailed",
            &[],
            &[],
            &data,
            ("x-amz-checksum-crc32c", &good),
            data.len(),
        );
        assert_eq!(r.0, 200, "{}", String::from_utf8_lossy(&r.2));
        assert_eq!(
            header(&get("trailed", true).2, "x-amz-checksum-crc32c"),
            Some(good.as_str())
        );
        let bad = b64(&crc32c(b"something else"));
        let r = s.send_trailer(
            "/integ/trailed",
            &[],
            &[],
            b"other",
            ("x-amz-checksum-crc32c", &bad),
            5,
        );
        assert_eq!(code(&r), (400, "BadDigest".into()));
        assert!(get("trailed", false).1 == data, "the old object stays");
        // A declared length the body does not have.
        let r = s.send_trailer(
            "/integ/short",
            &[],
            &[],
            b"12345",
            ("x-amz-checksum-crc32", &b64(&crc32(b"12345"))),
            6,
        );
        assert_eq!(r.0, 400, "{}", String::from_utf8_lossy(&r.2));
        assert_eq!(get("short", false).0, 404);
    })
    .await
    .expect("blocking task");
    cluster.shutdown().await;
}

/// Multipart: parts verified against their upload's algorithm and stored with their
/// checksums; the object gets the composite (`-N`) or full-object checksum; a Complete whose
/// part checksum or declared size does not match is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_checksums_per_part_and_for_the_object() {
    let (cluster, s) = signed_cluster().await;
    tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/mpc", &[], &[], b"").0, 200);
        let p1 = common::data(5 * 1024 * 1024);
        let p2 = b"the last part".to_vec();
        for (algorithm, ty, digest) in [
            ("CRC32", "COMPOSITE", crc32 as fn(&[u8]) -> Vec<u8>),
            ("CRC32C", "FULL_OBJECT", crc32c as fn(&[u8]) -> Vec<u8>),
        ] {
            let key = format!("/mpc/{ty}");
            let header_name = format!("x-amz-checksum-{}", algorithm.to_ascii_lowercase());
            let r = s.send("POST", &key, &[("uploads", "")], &[("x-amz-checksum-algorithm", algorithm), ("x-amz-checksum-type", ty)], b"");
            assert_eq!(r.0, 200, "{}", String::from_utf8_lossy(&r.2));
            assert_eq!(header(&r.1, "x-amz-checksum-algorithm"), Some(algorithm));
            let id = between(&text(&r), "<UploadId>", "</UploadId>")[0].clone();
            let up = |n: &str, body: &[u8], h: &[(&str, &str)]| {
                s.send("PUT", &key, &[("partNumber", n), ("uploadId", &id)], h, body)
            };
            // A wrong checksum, or another algorithm than the upload's, is refused.
            let r = up("1", &p1, &[(&header_name, &b64(&digest(b"x")))]);
            assert_eq!(code(&r), (400, "BadDigest".into()));
            let r = up("1", &p1, &[("x-amz-checksum-sha256", &b64(&[0u8; 32]))]);
            assert_eq!(code(&r), (400, "InvalidRequest".into()));
            let mut etags = Vec::new();
            let mut sums = Vec::new();
            for (n, part) in [("1", &p1), ("2", &p2)] {
                let sum = b64(&digest(part));
                let r = up(n, part, &[(&header_name, &sum)]);
                assert_eq!(r.0, 200, "{}", String::from_utf8_lossy(&r.2));
                assert_eq!(header(&r.1, &header_name), Some(sum.as_str()));
                etags.push(header(&r.1, "etag").expect("etag").to_string());
                sums.push(sum);
            }
            let r = s.send("GET", &key, &[("uploadId", &id)], &[], b"");
            let tag = format!("Checksum{algorithm}");
            assert_eq!(between(&text(&r), &format!("<{tag}>"), &format!("</{tag}>")), sums, "ListParts");
            let xml = |second_sum: &str| format!(
                "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag><{tag}>{}</{tag}></Part><Part><PartNumber>2</PartNumber><ETag>{}</ETag><{tag}>{second_sum}</{tag}></Part></CompleteMultipartUpload>",
                etags[0], sums[0], etags[1]
            );
            let r = s.send("POST", &key, &[("uploadId", &id)], &[], xml(&sums[0]).as_bytes());
            assert_eq!(code(&r), (400, "InvalidPart".into()), "a listed checksum that is not the part's");
            let r = s.send("POST", &key, &[("uploadId", &id)], &[("x-amz-mp-object-size", "7")], xml(&sums[1]).as_bytes());
            assert_eq!(code(&r), (400, "InvalidRequest".into()), "a declared size that is not the parts'");
            let r = s.send("POST", &key, &[("uploadId", &id)], &[], xml(&sums[1]).as_bytes());
            assert_eq!(r.0, 200, "{}", String::from_utf8_lossy(&r.2));
            let whole = [p1.as_slice(), p2.as_slice()].concat();
            let want = if ty == "COMPOSITE" {
                let joined: Vec<u8> = [digest(&p1), digest(&p2)].concat();
                format!("{}-2", b64(&digest(&joined)))
            } else {
                b64(&digest(&whole))
            };
            assert_eq!(between(&text(&r), &format!("<{tag}>"), &format!("</{tag}>")), vec![want.clone()]);
            let r = s.send("HEAD", &key, &[], &[("x-amz-checksum-mode", "ENABLED")], b"");
            assert_eq!(header(&r.1, &header_name), Some(want.as_str()), "{ty}");
            assert_eq!(header(&r.1, "x-amz-checksum-type"), Some(ty));
            let r = s.send("GET", &key, &[], &[], b"");
            assert!(dechunk(&r.2, &r.1) == whole);
        }
        // Contradictory upload checksums.
        for h in [
            vec![("x-amz-checksum-algorithm", "SHA256"), ("x-amz-checksum-type", "FULL_OBJECT")],
            vec![("x-amz-checksum-algorithm", "CRC64NVME"), ("x-amz-checksum-type", "COMPOSITE")],
            vec![("x-amz-checksum-type", "COMPOSITE")],
        ] {
            let r = s.send("POST", "/mpc/bad", &[("uploads", "")], &h, b"");
            assert_eq!(code(&r), (400, "InvalidRequest".into()), "{h:?}");
        }
    })
    .await
    .expect("blocking task");
    cluster.shutdown().await;
}

/// A copy of a whole object checks the bytes it reads against the source's stored
/// full-object checksum, whether or not the copy is asked for the same algorithm (the
/// copy's own checksum serves for the check, or a second one is computed beside it): a
/// source whose bytes disagree with its record is refused (500, nothing written); an honest
/// one is copied with its MD5 as ETag and its checksum. The object spans several of the
/// copy's read steps (half the gateway's 12 MiB request buffer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_check_the_source_against_its_stored_checksum() {
    use md5::Digest as _;
    let (cluster, s) = signed_cluster().await;
    let client = cluster.client().await.expect("client");
    let s = tokio::task::spawn_blocking(move || {
        assert_eq!(s.send("PUT", "/cpck", &[], &[], b"").0, 200);
        s
    })
    .await
    .expect("blocking task");
    let body = common::data(13_000_000);
    let stored = |crc: &[u8]| {
        std::collections::BTreeMap::from([
            ("checksum-algorithm".to_string(), "CRC32".to_string()),
            ("checksum-value".to_string(), b64(crc)),
            ("checksum-type".to_string(), "FULL_OBJECT".to_string()),
        ])
    };
    for (key, crc) in [("lying", crc32(b"other bytes")), ("honest", crc32(&body))] {
        let mut w = client.create_key("cpck", key, None).await.expect("create");
        w.write(&body).await.expect("write");
        w.close_with(stored(&crc)).await.expect("close");
    }
    let md5_hex = hex::encode(md5::Md5::digest(&body));
    tokio::task::spawn_blocking(move || {
        for (algorithm, to) in [
            (Some("CRC32"), "same"),
            (Some("SHA256"), "other"),
            (None, "default"),
        ] {
            let mut h = vec![("x-amz-copy-source", "/cpck/lying")];
            if let Some(a) = algorithm {
                h.push(("x-amz-checksum-algorithm", a));
            }
            let path = format!("/cpck/{to}");
            let r = s.send("PUT", &path, &[], &h, b"");
            assert_eq!(code(&r).0, 500, "{to}: {}", text(&r));
            assert!(
                text(&r).contains("do not match its stored CRC32"),
                "{}",
                text(&r)
            );
            assert_eq!(
                s.send("GET", &path, &[], &[], b"").0,
                404,
                "{to} was written"
            );

            h[0] = ("x-amz-copy-source", "/cpck/honest");
            let r = s.send("PUT", &path, &[], &h, b"");
            assert_eq!(r.0, 200, "{to}: {}", text(&r));
            assert!(text(&r).contains(&md5_hex), "{}", text(&r));
            let r = s.send(
                "GET",
                &path,
                &[],
                &[("x-amz-checksum-mode", "ENABLED")],
                b"",
            );
            assert_eq!(r.0, 200);
            assert!(dechunk(&r.2, &r.1) == body, "{to}: the copy's bytes differ");
            assert_eq!(
                header(&r.1, "etag"),
                Some(format!("\"{md5_hex}\"").as_str())
            );
            if algorithm == Some("CRC32") {
                assert_eq!(
                    header(&r.1, "x-amz-checksum-crc32"),
                    Some(b64(&crc32(&body)).as_str())
                );
            }
        }
    })
    .await
    .expect("blocking task");
}
