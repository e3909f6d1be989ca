//! S3 users, bucket owners and canned ACLs through the gateway, with
//! SigV4-signed requests of users the om issued keys to, and unsigned
//! (anonymous) ones: who gets 403 `AccessDenied`, and what a `public-read`
//! or `authenticated-read` ACL opens.

use crate::common;

use common::{Answer, Signer, code, http, signed_cluster, text};

async fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

fn as_user(admin: &Signer, c: &om::S3Credentials) -> Signer {
    Signer {
        addr: admin.addr,
        access_key: c.access_key.clone(),
        secret_key: c.secret_key.clone(),
        skew_secs: 0,
    }
}

fn ok(r: &Answer, what: &str) {
    assert!(r.0 / 100 == 2, "{what}: {} {}", r.0, text(r));
}

fn denied(r: &Answer, what: &str) {
    assert_eq!(code(r), (403, "AccessDenied".into()), "{what}: {}", text(r));
}

const PRIVATE_POLICY: &str = "<AccessControlPolicy><Owner><ID>alice</ID></Owner><AccessControlList>\
<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"CanonicalUser\">\
<ID>alice</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>\
</AccessControlList></AccessControlPolicy>";

/// User B is refused everything on user A's private bucket; a `public-read`
/// bucket ACL lets B and anonymous requests list it, an object's ACL lets
/// them read it; writes stay the owner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_acls_and_anonymous_requests() {
    let (cluster, admin) = signed_cluster().await;
    let mut om = om::OmAdminClient::connect(&cluster.om_address(), None)
        .await
        .expect("admin client");
    let alice = as_user(&admin, &om.create_user("alice").await.expect("alice"));
    let bob_key = om.create_user("bob").await.expect("bob");
    let bob = as_user(&admin, &bob_key);
    let alice_view = as_user(&admin, &bob_key);
    let addr = admin.addr;
    let anon = move |method: &str, path: &str| http(addr, method, path, &[], b"");
    run(move || {
        ok(
            &alice.send("PUT", "/alice-b", &[], &[], b""),
            "alice creates her bucket",
        );
        ok(
            &alice.send("PUT", "/alice-b/private", &[], &[], b"secret"),
            "PutObject",
        );
        ok(
            &alice.send(
                "PUT",
                "/alice-b/public",
                &[],
                &[("x-amz-acl", "public-read")],
                b"open",
            ),
            "PutObject public-read",
        );
        ok(
            &alice.send(
                "PUT",
                "/alice-b/members",
                &[],
                &[("x-amz-acl", "authenticated-read")],
                b"m",
            ),
            "PutObject authenticated-read",
        );

        // Bob: nothing on a private bucket but the public objects.
        denied(
            &bob.send("GET", "/alice-b/private", &[], &[], b""),
            "bob GET private",
        );
        assert_eq!(
            bob.send("HEAD", "/alice-b/private", &[], &[], b"").0,
            403,
            "bob HEAD private"
        );
        denied(&bob.send("GET", "/alice-b", &[], &[], b""), "bob lists");
        denied(
            &bob.send("PUT", "/alice-b/bob", &[], &[], b"x"),
            "bob writes",
        );
        denied(
            &bob.send("DELETE", "/alice-b/private", &[], &[], b""),
            "bob deletes",
        );
        denied(
            &bob.send("DELETE", "/alice-b", &[], &[], b""),
            "bob deletes the bucket",
        );
        denied(
            &bob.send("GET", "/alice-b", &[("acl", "")], &[], b""),
            "bob reads the ACL",
        );
        denied(
            &bob.send(
                "PUT",
                "/alice-b",
                &[("acl", "")],
                &[("x-amz-acl", "public-read")],
                b"",
            ),
            "bob opens the bucket",
        );
        denied(
            &bob.send("POST", "/alice-b/mpu", &[("uploads", "")], &[], b""),
            "bob uploads",
        );
        assert_eq!(
            code(&bob.send("GET", "/alice-b/missing", &[], &[], b"")).0,
            403,
            "no existence leak"
        );
        let r = bob.send("GET", "/alice-b/public", &[], &[], b"");
        assert_eq!(
            (r.0, common::dechunk(&r.2, &r.1)),
            (200, b"open".to_vec()),
            "bob reads public-read"
        );
        ok(
            &bob.send("GET", "/alice-b/members", &[], &[], b""),
            "bob reads authenticated-read",
        );
        assert_eq!(
            code(&bob.send("PUT", "/alice-b", &[], &[], b"")),
            (409, "BucketAlreadyExists".into()),
            "another's bucket name"
        );

        // Anonymous: only what is public.
        let r = anon("GET", "/alice-b/public");
        assert_eq!(
            (r.0, common::dechunk(&r.2, &r.1)),
            (200, b"open".to_vec()),
            "anonymous GET public-read"
        );
        denied(&anon("GET", "/alice-b/private"), "anonymous GET private");
        denied(
            &anon("GET", "/alice-b/members"),
            "anonymous GET authenticated-read",
        );
        denied(&anon("GET", "/alice-b"), "anonymous list");
        denied(&anon("PUT", "/anon-b"), "anonymous CreateBucket");
        denied(&anon("GET", "/"), "anonymous ListBuckets");

        // ListBuckets shows each user its own; the administrator sees all.
        ok(
            &bob.send("PUT", "/bob-b", &[], &[], b""),
            "bob creates his bucket",
        );
        let names = |s: &Signer| {
            common::between(
                &text(&s.send("GET", "/", &[], &[], b"")),
                "<Name>",
                "</Name>",
            )
        };
        assert_eq!(names(&alice), ["alice-b"]);
        assert_eq!(names(&bob), ["bob-b"]);
        assert_eq!(names(&admin), ["alice-b", "bob-b"]);
        assert!(text(&bob.send("GET", "/", &[], &[], b"")).contains("<ID>bob</ID>"));

        // A public-read bucket ACL opens the listing, not the objects.
        ok(
            &alice.send(
                "PUT",
                "/alice-b",
                &[("acl", "")],
                &[("x-amz-acl", "public-read")],
                b"",
            ),
            "PutBucketAcl public-read",
        );
        let acl = text(&alice.send("GET", "/alice-b", &[("acl", "")], &[], b""));
        assert!(
            acl.contains("groups/global/AllUsers") && acl.contains("<ID>alice</ID>"),
            "{acl}"
        );
        let listing = text(&bob.send("GET", "/alice-b", &[("list-type", "2")], &[], b""));
        assert!(listing.contains("<Key>private</Key>"), "{listing}");
        ok(
            &anon("GET", "/alice-b"),
            "anonymous lists a public-read bucket",
        );
        assert_eq!(
            code(&bob.send("GET", "/alice-b/missing", &[], &[], b"")),
            (404, "NoSuchKey".into())
        );
        denied(
            &bob.send("GET", "/alice-b/private", &[], &[], b""),
            "the object stays private",
        );
        denied(
            &bob.send("PUT", "/alice-b/bob", &[], &[], b"x"),
            "writes stay the owner's",
        );

        // An object ACL opens one object; a policy document closes it again.
        ok(
            &alice.send(
                "PUT",
                "/alice-b/private",
                &[("acl", "")],
                &[("x-amz-acl", "public-read")],
                b"",
            ),
            "PutObjectAcl public-read",
        );
        let acl = text(&alice.send("GET", "/alice-b/private", &[("acl", "")], &[], b""));
        assert!(acl.contains("groups/global/AllUsers"), "{acl}");
        ok(
            &anon("GET", "/alice-b/private"),
            "anonymous GET after PutObjectAcl",
        );
        ok(
            &bob.send(
                "PUT",
                "/bob-b/copy",
                &[],
                &[("x-amz-copy-source", "/alice-b/private")],
                b"",
            ),
            "bob copies a readable object into his bucket",
        );
        ok(
            &alice.send(
                "PUT",
                "/alice-b/private",
                &[("acl", "")],
                &[],
                PRIVATE_POLICY.as_bytes(),
            ),
            "PutObjectAcl by policy",
        );
        let acl = text(&alice.send("GET", "/alice-b/private", &[("acl", "")], &[], b""));
        assert!(!acl.contains("AllUsers"), "{acl}");
        denied(&anon("GET", "/alice-b/private"), "closed again");
        denied(
            &bob.send(
                "PUT",
                "/bob-b/copy2",
                &[],
                &[("x-amz-copy-source", "/alice-b/private")],
                b"",
            ),
            "a copy needs READ on its source",
        );
        denied(
            &alice.send(
                "PUT",
                "/alice-b/stolen",
                &[],
                &[("x-amz-copy-source", "/bob-b/copy")],
                b"",
            ),
            "and the copy's object is bob's, private",
        );
        // A copy does not inherit its source's ACL.
        ok(
            &alice.send(
                "PUT",
                "/alice-b/copied",
                &[],
                &[("x-amz-copy-source", "/alice-b/public")],
                b"",
            ),
            "CopyObject",
        );
        denied(
            &anon("GET", "/alice-b/copied"),
            "a copy is private unless asked",
        );

        // Grants beyond the canned forms are refused, not ignored.
        assert_eq!(
            code(&alice.send(
                "PUT",
                "/alice-b/x",
                &[],
                &[("x-amz-acl", "public-read-write")],
                b"x"
            )),
            (501, "NotImplemented".into())
        );
        assert_eq!(
            code(&alice.send(
                "PUT",
                "/alice-b",
                &[("acl", "")],
                &[("x-amz-grant-read", "id=bob")],
                b""
            )),
            (501, "NotImplemented".into())
        );

        // The administrator reaches everything; an owner deletes.
        ok(
            &admin.send("GET", "/bob-b/copy", &[], &[], b""),
            "admin reads bob's object",
        );
        ok(
            &bob.send("DELETE", "/bob-b/copy", &[], &[], b""),
            "bob deletes his object",
        );
    })
    .await;

    // A revoked key is refused at once; the user's other key still works.
    let bob2 = om.create_user("bob").await.expect("second key");
    om.revoke_key(&bob_key.access_key).await.expect("revoke");
    let bob_old = as_user(&alice_view, &bob_key);
    let bob_new = as_user(&alice_view, &bob2);
    run(move || {
        assert_eq!(
            code(&bob_old.send("GET", "/bob-b", &[], &[], b"")),
            (403, "InvalidAccessKeyId".into())
        );
        ok(
            &bob_new.send("GET", "/bob-b", &[], &[], b""),
            "bob's other key",
        );
    })
    .await;
    let users = om.list_users().await.expect("list");
    let names: Vec<_> = users
        .iter()
        .map(|u| (u.name.as_str(), u.access_keys.len()))
        .collect();
    assert_eq!(names, [("alice", 1), ("bob", 1)]);
    drop(cluster);
}

/// Copies decide READ on the object the copy really reads (the header as
/// s3s parses it, `%2F` and all); an upload's ACL survives Complete; an
/// `authenticated-read` bucket opens its listing to users, not to anonymous
/// requests; a bucket made outside S3 is the administrator's alone; a user
/// cannot be named like the administrator's owner id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_uploads_and_ownerless_buckets() {
    let (cluster, admin) = signed_cluster().await;
    let mut om = om::OmAdminClient::connect(&cluster.om_address(), None)
        .await
        .expect("admin client");
    let e = om
        .create_user(om::RESERVED_USER)
        .await
        .expect_err("reserved");
    assert_eq!(e.code, tonic::Code::InvalidArgument, "{e}");
    let alice = as_user(&admin, &om.create_user("alice").await.expect("alice"));
    let bob = as_user(&admin, &om.create_user("bob").await.expect("bob"));
    cluster
        .client()
        .await
        .expect("client")
        .create_bucket("cli-b", ec_client::BucketOptions::default())
        .await
        .expect("a bucket made outside S3");
    let addr = admin.addr;
    let anon = move |method: &str, path: &str| http(addr, method, path, &[], b"");
    run(move || {
        ok(&alice.send("PUT", "/alice-b", &[], &[], b""), "alice's bucket");
        ok(&alice.send("PUT", "/alice-b/secret", &[], &[], b"s"), "a private object");
        ok(&bob.send("PUT", "/bob-b", &[], &[], b""), "bob's bucket");
        // The same private object, however the copy source is spelled.
        for source in ["/alice-b/secret", "alice-b/secret", "%2Falice-b/secret", "%2Falice-b%2Fsecret"] {
            denied(
                &bob.send("PUT", "/bob-b/stolen", &[], &[("x-amz-copy-source", source)], b""),
                &format!("CopyObject from {source}"),
            );
        }
        denied(
            &bob.send("PUT", "/bob-b/stolen", &[], &[("x-amz-copy-source", "alice-b")], b""),
            "a copy source naming no object",
        );
        let r = bob.send("POST", "/bob-b/mpu", &[("uploads", "")], &[], b"");
        let id = common::between(&text(&r), "<UploadId>", "</UploadId>")[0].clone();
        denied(
            &bob.send(
                "PUT",
                "/bob-b/mpu",
                &[("partNumber", "1"), ("uploadId", &id)],
                &[("x-amz-copy-source", "%2Falice-b/secret")],
                b"",
            ),
            "UploadPartCopy from a private object",
        );
        assert_eq!(bob.send("GET", "/bob-b/stolen", &[], &[], b"").0, 404, "nothing was copied");

        // x-amz-acl on CreateMultipartUpload is the completed object's.
        let r = alice.send("POST", "/alice-b/open", &[("uploads", "")], &[("x-amz-acl", "public-read")], b"");
        let id = common::between(&text(&r), "<UploadId>", "</UploadId>")[0].clone();
        let r = alice.send("PUT", "/alice-b/open", &[("partNumber", "1"), ("uploadId", &id)], &[], b"part");
        let etag = common::header(&r.1, "etag").expect("etag").to_string();
        let xml = format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        );
        ok(&alice.send("POST", "/alice-b/open", &[("uploadId", &id)], &[], xml.as_bytes()), "Complete");
        let r = anon("GET", "/alice-b/open");
        assert_eq!((r.0, common::dechunk(&r.2, &r.1)), (200, b"part".to_vec()), "public-read after Complete");

        // authenticated-read on a bucket: users list it, anonymous requests do not.
        ok(
            &alice.send("PUT", "/alice-b", &[("acl", "")], &[("x-amz-acl", "authenticated-read")], b""),
            "PutBucketAcl authenticated-read",
        );
        ok(&bob.send("GET", "/alice-b", &[], &[], b""), "bob lists");
        denied(&anon("GET", "/alice-b"), "anonymous list of an authenticated-read bucket");

        // A bucket with no owner: the administrator's alone.
        denied(&bob.send("GET", "/cli-b", &[], &[], b""), "a user lists an ownerless bucket");
        denied(&bob.send("PUT", "/cli-b/x", &[], &[], b"x"), "a user writes into it");
        ok(&admin.send("PUT", "/cli-b/x", &[], &[], b"x"), "the administrator writes into it");
        let acl = text(&admin.send("GET", "/cli-b", &[("acl", "")], &[], b""));
        assert!(acl.contains(&format!("<ID>{}</ID>", om::RESERVED_USER)), "{acl}");
    })
    .await;
    drop(cluster);
}
