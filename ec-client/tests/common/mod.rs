//! Shared set-up for the ec-client integration tests: a minicluster, a
//! deterministic data generator, and a bucket with small cells so that
//! every layout boundary is reachable with little data.

#![allow(dead_code)]

use ec_client::{BucketOptions, Client, ClientConfig, EcReplicationConfig, ReplicationConfig};
use minicluster::{MiniCluster, MiniClusterConfig};

/// Cell size used by most tests: small, but larger than bytesPerChecksum
/// windows we set (1 KiB), so checksum widening is exercised.
pub const CELL: u64 = 4096;

/// rs-3-2 with [`CELL`]-byte cells.
pub fn rs32() -> EcReplicationConfig {
    format!("rs-3-2-{}k", CELL / 1024)
        .parse()
        .expect("valid config")
}

/// Stripe size of [`rs32`].
pub const STRIPE: u64 = 3 * CELL;

/// Deterministic, non-repeating-looking bytes (splitmix64 of the offset).
pub fn data(len: u64, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xDEAD_BEEF;
    while (out.len() as u64) < len {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        for b in z.to_le_bytes() {
            if (out.len() as u64) < len {
                out.push(b);
            }
        }
    }
    out
}

/// Client config for tests: 1 KiB bytesPerChecksum so windows are smaller than cells.
pub fn test_config() -> ClientConfig {
    ClientConfig::default().with_bytes_per_checksum(1024)
}

/// A five-datanode cluster and a client on it.
pub async fn cluster() -> (MiniCluster, Client) {
    let cluster = MiniCluster::start(MiniClusterConfig::default())
        .await
        .expect("minicluster starts");
    let client = cluster
        .client_with(test_config())
        .await
        .expect("client connects");
    (cluster, client)
}

/// Creates `name` with rs-3-2-4k and `block_size`.
pub async fn ec_bucket(client: &Client, name: &str, block_size: u64) {
    client
        .create_bucket(
            name,
            BucketOptions {
                replication: Some(ReplicationConfig::Ec(rs32())),
                block_size: Some(block_size),
            },
        )
        .await
        .expect("bucket created");
}
