//! The S3 users module's unit tests: issuing, bounds under races, names,
//! restarts, moving an older file's users onto the store, bucket ACLs.

//! Each test but the one about older files runs on both stores.

use redb::{ReadableDatabase, TableError};

use super::*;
use crate::OmConfig;
use crate::test_oms::{BACKENDS, TestOm};
use proto_crate::CannedAcl;

#[tokio::test]
async fn keys_are_issued_listed_looked_up_and_revoked() {
    for b in BACKENDS {
        keys_are_issued_listed_looked_up_and_revoked_on(TestOm::start(b).await).await;
    }
}

async fn keys_are_issued_listed_looked_up_and_revoked_on(om: TestOm) {
    let a = om.create_s3_key("alice").await.expect("issue a key");
    assert_eq!(a.access_key.len(), 20);
    assert!(a.access_key.starts_with("OZ"));
    assert_eq!(a.secret_key.len(), 40);
    let a2 = om.create_s3_key("alice").await.expect("issue a key");
    assert_ne!(a.access_key, a2.access_key);
    assert_ne!(a.secret_key, a2.secret_key);
    assert_eq!(
        om.s3_secret(&a.access_key).await.expect("the om call"),
        ("alice".to_string(), a.secret_key.clone())
    );
    // A third key is refused: the bound holds.
    assert!(matches!(
        om.create_s3_key("alice").await,
        Err(OmError::LimitExceeded(_))
    ));
    let users = om.list_s3_users().await.expect("the om call");
    assert_eq!(users.len(), 1);
    assert_eq!(
        users[0].access_keys,
        [a.access_key.clone(), a2.access_key.clone()]
    );
    assert_eq!(
        om.revoke_s3_key(&a.access_key).await.expect("the om call"),
        "alice"
    );
    assert!(matches!(
        om.s3_secret(&a.access_key).await,
        Err(OmError::AccessKeyNotFound(_))
    ));
    assert!(matches!(
        om.revoke_s3_key(&a.access_key).await,
        Err(OmError::AccessKeyNotFound(_))
    ));
    assert_eq!(
        om.list_s3_users().await.expect("the om call")[0].access_keys,
        vec![a2.access_key.clone()]
    );
    // After a revocation the user may hold a new key.
    om.create_s3_key("alice").await.expect("issue a key");
}

/// Eight issues for one user at once: exactly the bound's two succeed
/// (each transaction reads the user's keys, so two cannot both see one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_issues_do_not_pass_the_bound() {
    for b in BACKENDS {
        racing_issues_do_not_pass_the_bound_on(TestOm::start(b).await).await;
    }
}

async fn racing_issues_do_not_pass_the_bound_on(om: TestOm) {
    let (om, _kept) = om.split();
    let om = std::sync::Arc::new(om);
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let om = std::sync::Arc::clone(&om);
            tokio::spawn(async move { om.create_s3_key("carol").await })
        })
        .collect();
    let mut issued = 0;
    for t in tasks {
        match t.await.expect("task") {
            Ok(_) => issued += 1,
            Err(OmError::LimitExceeded(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(issued, MAX_ACCESS_KEYS_PER_USER);
    let users = om.list_s3_users().await.expect("list");
    assert_eq!(users[0].access_keys.len(), MAX_ACCESS_KEYS_PER_USER);
}

#[tokio::test]
async fn bad_user_names_are_refused() {
    for b in BACKENDS {
        bad_user_names_are_refused_on(TestOm::start(b).await).await;
    }
}

async fn bad_user_names_are_refused_on(om: TestOm) {
    for bad in ["", "a b", "ü", &"x".repeat(65), "a/b", RESERVED_USER] {
        assert!(
            matches!(
                om.create_s3_key(bad).await,
                Err(OmError::InvalidArgument(_))
            ),
            "{bad:?}"
        );
    }
    assert!(om.list_s3_users().await.expect("the om call").is_empty());
}

#[tokio::test]
async fn users_and_keys_survive_a_restart() {
    for b in BACKENDS {
        let om = TestOm::start(b).await;
        let k = om.create_s3_key("bob").await.expect("issue a key");
        let om = om.restart().await;
        assert_eq!(
            om.s3_secret(&k.access_key).await.expect("the om call").1,
            k.secret_key
        );
    }
}

/// An `om.redb` written before users moved onto the store: its users and
/// keys are there after the om opens, the old tables are gone, the user
/// count carries the bound on, and opening again changes nothing.
#[tokio::test]
async fn an_older_om_file_has_its_users_moved_onto_the_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let db = Database::create(dir.path().join("om.redb")).expect("old file");
        let txn = db.begin_write().expect("write");
        {
            let mut users = txn.open_table(OLD_USERS).expect("table");
            let mut keys = txn.open_table(OLD_ACCESS_KEYS).expect("table");
            for (user, key, at) in [
                ("dave", "OZDAVE1", 10),
                ("dave", "OZDAVE2", 20),
                ("erin", "OZERIN1", 30),
            ] {
                users.insert(user, at).expect("user");
                let record = pb::S3AccessKeyRecord {
                    access_key: key.into(),
                    user: user.into(),
                    secret_key: format!("secret-of-{key}"),
                    created_unix_ms: at,
                };
                keys.insert(key, record.encode_to_vec().as_slice())
                    .expect("key");
            }
        }
        txn.commit().expect("commit");
    }
    for _ in 0..2 {
        let om = OzoneManager::open(OmConfig::new(dir.path()))
            .await
            .expect("open the om");
        let users = om.list_s3_users().await.expect("list");
        let listed: Vec<(&str, Vec<&str>)> = users
            .iter()
            .map(|u| {
                (
                    u.name.as_str(),
                    u.access_keys.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("dave", vec!["OZDAVE1", "OZDAVE2"]),
                ("erin", vec!["OZERIN1"])
            ]
        );
        assert_eq!(
            om.s3_secret("OZERIN1").await.expect("secret"),
            ("erin".to_string(), "secret-of-OZERIN1".to_string())
        );
        assert!(matches!(
            om.create_s3_key("dave").await,
            Err(OmError::LimitExceeded(_))
        ));
        let read = om.own_file().begin_read().expect("read");
        assert!(matches!(
            read.open_table(OLD_USERS),
            Err(TableError::TableDoesNotExist(_))
        ));
        let count = COUNTS
            .get(&om.store, &USER_COUNT.to_string())
            .await
            .expect("count")
            .map(|r| r.value);
        assert_eq!(count, Some(2));
    }
    // Rolled back to an older om, which re-creates the old tables and
    // takes a new user there (and holds an older view of erin's key),
    // then upgraded again: the new user joins, the store's rows win,
    // and the count is counted again.
    {
        let db = Database::open(dir.path().join("om.redb")).expect("file");
        let txn = db.begin_write().expect("write");
        {
            let mut users = txn.open_table(OLD_USERS).expect("table");
            let mut keys = txn.open_table(OLD_ACCESS_KEYS).expect("table");
            for (user, key, secret) in [("frank", "OZFRANK1", "f"), ("erin", "OZERIN1", "stale")] {
                users.insert(user, 40).expect("user");
                let record = pb::S3AccessKeyRecord {
                    access_key: key.into(),
                    user: user.into(),
                    secret_key: secret.into(),
                    created_unix_ms: 40,
                };
                keys.insert(key, record.encode_to_vec().as_slice())
                    .expect("key");
            }
        }
        txn.commit().expect("commit");
    }
    let om = OzoneManager::open(OmConfig::new(dir.path()))
        .await
        .expect("open the om");
    assert_eq!(
        om.s3_secret("OZERIN1").await.expect("secret").1,
        "secret-of-OZERIN1"
    );
    assert_eq!(om.s3_secret("OZFRANK1").await.expect("secret").1, "f");
    let count = COUNTS
        .get(&om.store, &USER_COUNT.to_string())
        .await
        .expect("count")
        .map(|r| r.value);
    assert_eq!(count, Some(3));
}

#[tokio::test]
async fn bucket_acls_are_stored_with_the_owner() {
    for b in BACKENDS {
        bucket_acls_are_stored_with_the_owner_on(TestOm::start(b).await).await;
    }
}

async fn bucket_acls_are_stored_with_the_owner_on(om: TestOm) {
    let b = om
        .create_bucket_as("b1", None, None, "alice", CannedAcl::Private)
        .await
        .expect("the om call");
    assert_eq!((b.owner.as_str(), b.acl), ("alice", CannedAcl::Private));
    om.set_bucket_acl("b1", CannedAcl::PublicRead)
        .await
        .expect("the om call");
    let b = om.get_bucket("b1").await.expect("the om call");
    assert_eq!((b.owner.as_str(), b.acl), ("alice", CannedAcl::PublicRead));
    assert!(matches!(
        om.set_bucket_acl("nope", CannedAcl::PublicRead).await,
        Err(OmError::BucketNotFound(_))
    ));
}
