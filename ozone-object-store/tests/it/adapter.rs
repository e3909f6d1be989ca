//! What the adapter promises beyond object_store's suite: exact datanode
//! traffic for heads and overlapping ranges, an upload that refuses to
//! complete with a hole, and upload ids that cannot write into another key.

use ec_client::{BucketOptions, RpcKind};
use minicluster::{MiniCluster, MiniClusterConfig};
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use ozone_object_store::{OzoneStore, OzoneStoreError};

async fn store(cluster: &MiniCluster, bucket: &str) -> OzoneStore {
    let client = cluster.client().await.expect("client");
    client
        .create_bucket(bucket, BucketOptions::default())
        .await
        .expect("bucket");
    OzoneStore::new(client, bucket)
}

/// The adapter's own error inside an object_store error.
fn ours(e: &object_store::Error) -> Option<&OzoneStoreError> {
    match e {
        object_store::Error::Generic { source, .. } => source.downcast_ref(),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_touch_no_datanode_and_overlapping_ranges_are_fetched_once() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let store = store(&cluster, "ranges").await;
    let data = minicluster::pattern::bytes(3, 0, 4 << 20);
    let path = Path::from("k");
    store.put(&path, data.clone().into()).await.expect("put");

    let before = store.client().metrics();
    let meta = store.head(&path).await.expect("head");
    assert_eq!(meta.size, 4 << 20);
    let after = store.client().metrics().since(&before);
    assert_eq!(after.rpcs(RpcKind::ReadChunk), 0, "{after:?}");
    assert_eq!(after.rpcs(RpcKind::GetBlock), 0, "{after:?}");

    // Two ranges sharing their middle half MiB: read once, as their union
    // (1.5 MiB, aligned to the 16 KiB checksum windows), and both answered.
    const MIB: u64 = 1 << 20;
    let ranges = [0..MIB, MIB / 2..MIB + MIB / 2];
    let before = store.client().metrics();
    let got = store.get_ranges(&path, &ranges).await.expect("ranges");
    let after = store.client().metrics().since(&before);
    for (r, b) in ranges.iter().zip(&got) {
        let (s, e) = (r.start as usize, r.end as usize);
        assert_eq!(&b[..], &data[s..e]);
    }
    assert_eq!(after.read_bytes, MIB + MIB / 2, "{after:?}");

    // A range starting past the end is refused; one running past it is cut.
    let err = store
        .get_ranges(&path, std::slice::from_ref(&((8 << 20)..(9 << 20))))
        .await
        .expect_err("past the end");
    assert!(
        matches!(
            ours(&err),
            Some(OzoneStoreError::RangeNotSatisfiable { .. })
        ),
        "{err}"
    );
    let tail = store
        .get_ranges(&path, std::slice::from_ref(&((4 << 20) - 10..(5 << 20))))
        .await
        .expect("cut at the end");
    assert_eq!(&tail[0][..], &data[(4 << 20) - 10..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_with_an_unfinished_part_does_not_complete() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let store = store(&cluster, "holes").await;
    let path = Path::from("object");
    let mut upload = store.put_multipart(&path).await.expect("upload");
    upload
        .put_part(vec![1u8; 1000].into())
        .await
        .expect("part 1");
    // Part 2 is started and dropped before it runs: completing now would
    // join parts 1 and 3 around a hole.
    drop(upload.put_part(vec![2u8; 1000].into()));
    upload
        .put_part(vec![3u8; 1000].into())
        .await
        .expect("part 3");
    let err = upload.complete().await.expect_err("a part is missing");
    assert!(
        matches!(ours(&err), Some(OzoneStoreError::PartMissing(2))),
        "{err}"
    );
    let missing = store.head(&path).await.expect_err("nothing committed");
    assert!(
        matches!(missing, object_store::Error::NotFound { .. }),
        "{missing}"
    );
    upload.abort().await.expect("abort");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_id_writes_only_into_its_own_key() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let store = store(&cluster, "ids").await;
    let a = Path::from("a");
    let b = Path::from("b");
    let id = store.create_multipart(&a).await.expect("upload of a");
    let err = store
        .put_part(&b, &id, 0, vec![0u8; 10].into())
        .await
        .expect_err("the upload is a's");
    assert!(
        matches!(ours(&err), Some(OzoneStoreError::UploadOfAnotherKey { .. })),
        "{err}"
    );
    let err = store
        .complete_multipart(&b, &id, Vec::new())
        .await
        .expect_err("the upload is a's");
    assert!(
        matches!(ours(&err), Some(OzoneStoreError::UploadOfAnotherKey { .. })),
        "{err}"
    );
    let part = store
        .put_part(&a, &id, 0, b"abc".to_vec().into())
        .await
        .expect("part of a");
    store
        .complete_multipart(&a, &id, vec![part])
        .await
        .expect("complete a");
    let got = store
        .get(&a)
        .await
        .expect("a")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(&got[..], b"abc");
    assert!(matches!(
        store.head(&b).await,
        Err(object_store::Error::NotFound { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_is_the_oms_rename_and_moves_no_bytes() {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("cluster");
    let store = store(&cluster, "renames").await;
    let (a, b) = (Path::from("dir/a"), Path::from("dir/b"));
    let data = minicluster::pattern::bytes(5, 0, 300_000);
    store.put(&a, data.clone().into()).await.expect("put");
    store
        .put(&b, b"other".to_vec().into())
        .await
        .expect("put b");

    let err = store
        .rename_if_not_exists(&a, &b)
        .await
        .expect_err("b exists");
    assert!(
        matches!(err, object_store::Error::AlreadyExists { .. }),
        "{err}"
    );
    let before = store.client().metrics();
    store.rename(&a, &b).await.expect("rename");
    let moved = store.client().metrics().since(&before);
    assert_eq!(moved.rpcs_total.values().sum::<u64>(), 0, "{moved:?}");
    let got = store
        .get(&b)
        .await
        .expect("b")
        .bytes()
        .await
        .expect("bytes");
    assert_eq!(&got[..], &data[..]);
    assert!(matches!(
        store.head(&a).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let err = store.rename(&a, &b).await.expect_err("a is gone");
    assert!(matches!(err, object_store::Error::NotFound { .. }), "{err}");
}
