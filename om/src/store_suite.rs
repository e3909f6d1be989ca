//! The om's key, bucket, session, multipart and deletion operations on each metadata store
//! back end (redb, the om's own file; etcd, a real member): the same calls, the same answers,
//! the same exact counts. Each test runs on both.

use std::collections::BTreeMap;

use proto_crate::{BlockGroup, WriteCondition};

use crate::test_oms::{BACKENDS, TestOm};
use crate::{OmError, OzoneManager, UploadsMarker};

/// Replicas of one rs-3-2 group.
const REPLICAS: u64 = 5;

async fn started(backend: crate::test_oms::Backend) -> TestOm {
    let om = TestOm::start(backend).await;
    crate::test_oms::register_five(&om).await;
    om.create_bucket("b", None, None).await.expect("bucket");
    om
}

/// Writes `key` as one group of `len` bytes, provided `condition` holds.
async fn put(
    om: &OzoneManager,
    key: &str,
    len: u64,
    condition: Option<WriteCondition>,
) -> Result<proto_crate::KeyInfo, OmError> {
    let s = om.open_key("b", key, None).await?;
    let g = om.allocate_block_group(s.session_id, &[]).await?;
    om.commit_key_if(
        s.session_id,
        &[BlockGroup { length: len, ..g }],
        len,
        BTreeMap::new(),
        condition,
    )
    .await
}

#[tokio::test]
async fn keys_commit_list_rename_and_delete_on_each_store() {
    for b in BACKENDS {
        let om = started(b).await;
        let k1 = put(&om, "a/1", 10, Some(WriteCondition::NotExists))
            .await
            .expect("create");
        assert!(matches!(
            put(&om, "a/1", 10, Some(WriteCondition::NotExists)).await,
            Err(OmError::ConditionFailed { .. })
        ));
        let k1b = put(
            &om,
            "a/1",
            20,
            Some(WriteCondition::Generation(k1.generation)),
        )
        .await
        .expect("update on the generation read");
        assert!(k1b.generation > k1.generation);
        assert_eq!(
            om.lookup_key("b", "a/1").await.expect("lookup"),
            k1b,
            "lookup answers what the commit did, generation included"
        );
        for name in ["a/2", "a/3", "b/1"] {
            put(&om, name, 1, None).await.expect("put");
        }
        let names =
            |keys: Vec<proto_crate::KeyInfo>| keys.into_iter().map(|k| k.name).collect::<Vec<_>>();
        assert_eq!(
            names(om.list_keys("b", "a/", "", 0).await.expect("list")),
            ["a/1", "a/2", "a/3"]
        );
        assert_eq!(
            names(om.list_keys("b", "a/", "a/1", 1).await.expect("list")),
            ["a/2"]
        );
        let renamed = om
            .rename_key("b", "a/2", "c/2", None)
            .await
            .expect("rename");
        assert!(renamed.generation > k1b.generation);
        assert_eq!(om.lookup_key("b", "c/2").await.expect("renamed"), renamed);
        om.delete_key_if("b", "a/3", Some(WriteCondition::NotExists))
            .await
            .expect_err("the key exists");
        om.delete_key("b", "a/3").await.expect("delete");
        assert!(matches!(
            om.delete_bucket("b").await,
            Err(OmError::BucketNotEmpty(_))
        ));
        // Staged: the group of the refused conditional write, the first a/1, and a/3.
        assert_eq!(om.pending_deletions().await.expect("pending"), 3 * REPLICAS);
        assert_eq!(
            om.expand_staged_deletions().await.expect("expand"),
            3 * REPLICAS
        );
        assert_eq!(om.staged_deletions().await.expect("staged"), 0);
        assert_eq!(om.pending_deletions().await.expect("pending"), 3 * REPLICAS);
        let restarted = om.restart().await;
        assert_eq!(
            restarted
                .lookup_key("b", "a/1")
                .await
                .expect("after a restart"),
            k1b
        );
    }
}

#[tokio::test]
async fn multipart_uploads_complete_once_on_each_store() {
    for b in BACKENDS {
        let om = started(b).await;
        let id = om
            .initiate_multipart_upload("b", "mp", None, BTreeMap::new())
            .await
            .expect("initiate");
        for n in 1..=3 {
            crate::test_oms::commit_part(&om, &id, n, 10, &format!("e{n}")).await;
        }
        let (uploads, more) = om
            .list_multipart_uploads("b", "", &UploadsMarker::default(), 10)
            .await
            .expect("uploads");
        assert_eq!((uploads.len(), more), (1, false));
        let listed = [(1, "e1".to_string()), (3, "e3".to_string())];
        let key = om
            .complete_multipart_upload(&id, &listed, 0, BTreeMap::new())
            .await
            .expect("complete");
        assert_eq!(key.length, 20);
        assert_eq!(
            om.complete_multipart_upload(&id, &listed, 0, BTreeMap::new())
                .await
                .expect("a retry gets the same key"),
            key
        );
        assert!(matches!(
            om.list_parts(&id, 0, 10).await,
            Err(OmError::NoSuchUpload(_))
        ));
        assert_eq!(
            om.pending_deletions().await.expect("pending"),
            REPLICAS,
            "part 2, left out"
        );
        om.expand_staged_deletions().await.expect("expand");
        assert_eq!(om.staged_deletions().await.expect("staged"), 0);
        assert_eq!(om.pending_deletions().await.expect("pending"), REPLICAS);
    }
}

#[tokio::test]
async fn open_writes_resume_after_a_restart_on_each_store() {
    for b in BACKENDS {
        let om = started(b).await;
        let s = om.open_key("b", "w", None).await.expect("open");
        let g = om
            .allocate_block_group(s.session_id, &[])
            .await
            .expect("allocate");
        let om = om.restart().await;
        assert_eq!(om.open_sessions().await.expect("count"), 1);
        om.commit_key(
            s.session_id,
            &[BlockGroup { length: 4, ..g }],
            4,
            BTreeMap::new(),
        )
        .await
        .expect("the resumed session commits");
        assert_eq!(om.lookup_key("b", "w").await.expect("key").length, 4);
        assert_eq!(om.pending_deletions().await.expect("pending"), 0);
    }
}
