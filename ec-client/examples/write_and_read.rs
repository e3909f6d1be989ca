//! Write a key and read it back three ways (sequential, positioned,
//! vectored). Starts a minicluster of its own, so it runs anywhere:
//!
//! ```sh
//! cargo run --release -p ec-client --example write_and_read
//! ```
//!
//! Against a running cluster, connect to its om instead
//! (`Client::connect("HOST:PORT", ClientConfig::default())`).

use ec_client::{Client, ClientConfig, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig};
use tokio::io::AsyncReadExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cluster = MiniCluster::start(MiniClusterConfig::default()).await?;
    let client = Client::connect(&cluster.om_address(), ClientConfig::default()).await?;
    client.create_bucket("photos", Default::default()).await?;

    // An EC key (the bucket's default, rs-3-2-1024k): 5 MiB is one full
    // stripe of three 1 MiB cells and a partial one.
    let data: Vec<u8> = (0..5 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut w = client.create_key("photos", "cat.raw", None).await?;
    w.write(&data).await?;
    let info = w.close().await?;
    println!(
        "wrote {} bytes as {} in {} block group(s)",
        info.length,
        info.replication,
        info.block_groups.len()
    );

    // Sequential: AsyncRead, with read-ahead.
    let mut r = client.open_key("photos", "cat.raw").await?;
    let mut all = Vec::new();
    r.read_to_end(&mut all).await?;
    assert_eq!(all, data);

    // Positioned: `&self`, no cursor, safe from many tasks at once.
    let mut buf = vec![0u8; 4096];
    r.read_exact_at(3 << 20, &mut buf).await?;
    assert_eq!(buf, data[3 << 20..(3 << 20) + 4096]);

    // Vectored: many ranges in one call, merged and fetched in parallel.
    let parts = r.read_ranges(&[0..16, 1 << 20..(1 << 20) + 16]).await?;
    assert_eq!(&parts[1][..], &data[1 << 20..(1 << 20) + 16]);

    // A replicated key (three copies) in the same bucket.
    let rep = ReplicationConfig::Replicated { factor: 3 };
    client
        .put_key("photos", "small.txt", Some(rep), b"three copies")
        .await?;
    println!("read back every byte; {:?}", client.metrics().rpcs_total);
    cluster.shutdown().await;
    Ok(())
}
