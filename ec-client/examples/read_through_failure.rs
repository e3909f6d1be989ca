//! Read an EC key while a datanode that holds one of its data cells is
//! down: the reader fails over and rebuilds the missing cells from parity,
//! and the client's counters show it.
//!
//! ```sh
//! cargo run --release -p ec-client --example read_through_failure
//! ```

use ec_client::{Client, ClientConfig, ReplicaIndex};
use minicluster::{MiniCluster, MiniClusterConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cluster = MiniCluster::start(MiniClusterConfig::default()).await?;
    let client = Client::connect(&cluster.om_address(), ClientConfig::default()).await?;
    client.create_bucket("b", Default::default()).await?;
    let data: Vec<u8> = (0..3 << 20).map(|i: u32| (i % 253) as u8).collect();
    let info = client.put_key("b", "k", None, &data).await?;

    // Stop the datanode that holds replica index 1 (a data cell).
    let first = ReplicaIndex::new(1).ok_or("index 1")?;
    let holder = info.block_groups[0]
        .pipeline
        .nodes_for(first)
        .next()
        .ok_or("a location of index 1")?
        .uuid
        .to_string();
    let index = cluster
        .datanode_by_uuid(&holder)
        .ok_or("the datanode is ours")?
        .index();
    cluster.datanode_mut(index)?.stop().await;
    println!("stopped datanode {index} ({holder}), which holds index 1");

    let r = client.open_key("b", "k").await?;
    let mut all = vec![0u8; data.len()];
    r.read_exact_at(0, &mut all).await?;
    assert_eq!(all, data);
    let ec = client.ec_metrics();
    println!(
        "read all {} bytes: {} failover(s), {} stripe(s) reconstructed",
        data.len(),
        ec.failovers,
        ec.stripes_reconstructed
    );
    cluster.shutdown().await;
    Ok(())
}
