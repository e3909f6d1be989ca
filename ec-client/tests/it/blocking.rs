//! The blocking facade (`ec_client::blocking`) from a plain thread: write
//! with `std::io::Write`, read with `Read + Seek` and `read_at`, and a
//! writer dropped without `close` (on a plain thread or inside async code)
//! committing nothing and leaving no session.

use std::io::{Read, Seek, SeekFrom, Write};
use std::time::Duration;

use ec_client::blocking::Client;
use ec_client::{ClientConfig, ClientError};
use minicluster::{MiniCluster, MiniClusterConfig};

#[test]
fn std_io_writes_and_reads_a_key_without_a_runtime_of_the_callers() {
    // The cluster runs on a runtime of the test's; the blocking client on its own.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let cluster = rt
        .block_on(MiniCluster::start(MiniClusterConfig::default()))
        .expect("cluster");
    let address = cluster.om_address();
    let src = minicluster::pattern::bytes(4, 0, (3 << 20) + 12345);

    let client = Client::connect(&address, ClientConfig::default()).expect("connect");
    client
        .create_bucket("b", Default::default())
        .expect("bucket");
    let mut w = client.create_key("b", "k", None).expect("create");
    for piece in src.chunks(100_000) {
        w.write_all(piece).expect("write");
    }
    w.flush().expect("flush");
    assert_eq!(w.len(), src.len() as u64);
    let info = w.close().expect("close");
    assert_eq!(info.length, src.len() as u64);

    let mut r = client.open_key("b", "k").expect("open");
    let mut all = Vec::new();
    r.read_to_end(&mut all).expect("read");
    assert_eq!(all, src);
    assert_eq!(r.seek(SeekFrom::Start(1 << 20)).expect("seek"), 1 << 20);
    let mut piece = vec![0u8; 1000];
    r.read_exact(&mut piece).expect("read after seek");
    assert_eq!(piece, src[1 << 20..(1 << 20) + 1000]);
    // Positioned reads leave the cursor where it was.
    let mut at = vec![0u8; 10];
    r.read_exact_at(&mut at, 5).expect("read_exact_at");
    assert_eq!(at, src[5..15]);
    assert_eq!(r.stream_position().expect("position"), (1 << 20) + 1000);
    assert_eq!(r.read_at(&mut at, src.len() as u64).expect("at the end"), 0);

    // A missing key: the io::Error of Read is not involved, the call says so.
    let missing = client.open_key("b", "nope").expect_err("missing");
    assert!(
        matches!(missing, ClientError::KeyNotFound { .. }),
        "{missing}"
    );

    // Dropped without close: nothing committed, the session aborted.
    let mut w = client.create_key("b", "dropped", None).expect("create");
    w.write_all(&src[..5000]).expect("write");
    drop(w);
    assert!(matches!(
        client.key_info("b", "dropped"),
        Err(ClientError::KeyNotFound { .. })
    ));
    assert!(
        rt.block_on(cluster.wait_for_no_open_sessions(Duration::from_secs(30))),
        "the dropped writer's session is aborted"
    );
    // A writer that outlives its client (the last holder of the runtime):
    // still aborted by its drop.
    let lone = Client::connect(&address, ClientConfig::default()).expect("connect");
    let mut w = lone.create_key("b", "orphan", None).expect("create");
    drop(lone);
    w.write_all(&src[..5000]).expect("write");
    drop(w);
    assert!(
        rt.block_on(cluster.wait_for_no_open_sessions(Duration::from_secs(30))),
        "the orphaned writer's session is aborted"
    );
    // Dropped inside async code, where blocking on its runtime would panic:
    // the abort is spawned there instead, and still ends the session.
    let mut w = client.create_key("b", "in-async", None).expect("create");
    w.write_all(&src[..5000]).expect("write");
    rt.block_on(async move { drop(w) });
    assert!(
        rt.block_on(cluster.wait_for_no_open_sessions(Duration::from_secs(30))),
        "the writer dropped in async code has its session aborted"
    );
    // The last holder of a blocking runtime dropped in async code: no
    // panic, and the abort still ends the session (it does not die with the
    // runtime it ran on).
    let lone = Client::connect(&address, ClientConfig::default()).expect("connect");
    let w = lone.create_key("b", "lone-in-async", None).expect("create");
    rt.block_on(async move {
        drop(lone);
        drop(w);
    });
    assert!(matches!(
        client.key_info("b", "lone-in-async"),
        Err(ClientError::KeyNotFound { .. })
    ));
    assert!(
        rt.block_on(cluster.wait_for_no_open_sessions(Duration::from_secs(30))),
        "the last holder's abort outlives its runtime's shutdown"
    );
    drop(client);
    rt.block_on(cluster.shutdown());
}
