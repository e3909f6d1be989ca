//! One Ozone bucket through `object_store`, as DataFusion or Polars would
//! use it: put, conditional update, ranged get, listing, multipart.
//!
//! ```sh
//! cargo run --release -p ozone-object-store --example object_store
//! ```

use futures::TryStreamExt;
use minicluster::{MiniCluster, MiniClusterConfig};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, WriteMultipart};
use ozone_object_store::OzoneStore;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = MiniCluster::start(MiniClusterConfig::default()).await?;
    let client = cluster.client().await?;
    client.create_bucket("lake", Default::default()).await?;
    let store = OzoneStore::new(client, "lake");

    let path = Path::from("sales/2026/part-0.csv");
    let v1 = store.put(&path, "id,amount\n1,10\n".into()).await?;
    // Update only if nobody committed since v1: the om checks the generation.
    let update = PutOptions::from(PutMode::Update(v1.into()));
    store
        .put_opts(&path, "id,amount\n1,10\n2,20\n".into(), update)
        .await?;
    let head = store.get_range(&path, 0..9).await?;
    println!("first bytes: {:?}", String::from_utf8_lossy(&head));

    // A large object through the multipart API: 5 MiB parts, bounded memory.
    let big = Path::from("sales/2026/part-1.bin");
    let mut upload = WriteMultipart::new(store.put_multipart(&big).await?);
    for _ in 0..3 {
        upload.write(&vec![7u8; 4 << 20]);
    }
    upload.finish().await?;

    let listed: Vec<_> = store
        .list(Some(&Path::from("sales")))
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await?;
    println!("listed: {listed:?}");
    let dirs = store
        .list_with_delimiter(Some(&Path::from("sales")))
        .await?;
    println!("directories under sales/: {:?}", dirs.common_prefixes);
    cluster.shutdown().await;
    Ok(())
}
