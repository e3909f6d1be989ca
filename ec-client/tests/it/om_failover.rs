//! A client given several om addresses (`HOST:PORT,HOST:PORT`): it connects
//! to the first that answers and fails over along the list when an om goes
//! away — reads after any transport failure, changes only when the
//! connection was refused. Two real oms on loopback, each with its own
//! metadata, so where a call landed is visible.

use std::sync::Arc;

use ec_client::{BucketOptions, Client, ClientConfig, ClientError};
use om::{OmConfig, OmServer, OzoneManager};

async fn om(dir: &std::path::Path) -> OmServer {
    let om = OzoneManager::open(OmConfig::new(dir))
        .await
        .expect("om opens");
    OmServer::start("127.0.0.1:0".parse().expect("addr"), Arc::new(om))
        .await
        .expect("om serves")
}

/// An address nothing listens on (bound, then released).
fn refused() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

async fn names(om: &OmServer) -> Vec<String> {
    let buckets = om.om().list_buckets().await.expect("list");
    buckets.into_iter().map(|b| b.name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_skips_a_dead_om_and_fails_over_when_its_om_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = om(&dir.path().join("a")).await;
    let b = om(&dir.path().join("b")).await;
    let (a_addr, b_addr) = (a.address().to_string(), b.address().to_string());

    // The first address refuses: the client connects to the second.
    let list = format!("{}, {a_addr}", refused());
    let c = Client::connect(&list, ClientConfig::default())
        .await
        .expect("connect");
    c.create_bucket("first", BucketOptions::default())
        .await
        .expect("create");
    assert_eq!(names(&a).await, ["first"]);

    // Two clients connected to a, b second in their list; a goes away.
    let list = format!("{a_addr},{b_addr}");
    let writer = Client::connect(&list, ClientConfig::default())
        .await
        .expect("connect");
    let reader = Client::connect(&list, ClientConfig::default())
        .await
        .expect("connect");
    assert_eq!(reader.list_buckets().await.expect("list on a").len(), 1);
    let a_om = Arc::clone(a.om());
    let a_socket = a.address();
    a.shutdown().await;
    // Shut down means its port refuses connections.
    assert!(
        std::net::TcpStream::connect(a_socket).is_err(),
        "a still accepts"
    );
    // A change whose connection to a is refused never left: it goes to b.
    writer
        .create_bucket("second", BucketOptions::default())
        .await
        .expect("create fails over to b");
    assert_eq!(names(&b).await, ["second"]);
    let on_a: Vec<String> = a_om
        .list_buckets()
        .await
        .expect("list")
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(on_a, ["first"]);
    // A read moves to b too, and stays there.
    let listed = reader.list_buckets().await.expect("list fails over to b");
    assert_eq!(
        listed.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        ["second"]
    );
    reader.bucket("second").await.expect("get on b");

    // With every om gone, the call fails with the last om's error.
    b.shutdown().await;
    let e = writer
        .create_bucket("third", BucketOptions::default())
        .await
        .expect_err("no om is up");
    assert!(matches!(e, ClientError::Om { .. }), "{e:?}");
}

#[tokio::test]
async fn bad_om_lists_are_refused_and_an_all_dead_list_names_every_address() {
    for bad in [
        "",
        "127.0.0.1:1,",
        "127.0.0.1:9862,127.0.0.1:9862",
        "a:1,http://b:2",
    ] {
        let e = Client::connect(bad, ClientConfig::default())
            .await
            .err()
            .unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(
            matches!(e, ClientError::InvalidArgument(_)),
            "{bad:?}: {e:?}"
        );
    }
    let (x, y) = (refused(), refused());
    let e = Client::connect(&format!("{x},{y}"), ClientConfig::default())
        .await
        .expect_err("nothing listens");
    match e {
        ClientError::Connect { address, message } => {
            assert_eq!(address, format!("{x},{y}"));
            assert!(message.contains(&x) && message.contains(&y), "{message}");
        }
        e => panic!("{e:?}"),
    }
}

/// A TCP relay in front of an om that can be frozen: while frozen it passes
/// no byte either way but keeps every connection open, as a stopped om
/// process or a partitioned host does (no reset, no answer).
struct FreezableRelay {
    address: std::net::SocketAddr,
    frozen: tokio::sync::watch::Sender<bool>,
}

impl FreezableRelay {
    async fn start(to: std::net::SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr");
        let (frozen, _) = tokio::sync::watch::channel(false);
        let watch = frozen.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(to).await else {
                    continue;
                };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                tokio::spawn(pump(ri, wo, watch.subscribe()));
                tokio::spawn(pump(ro, wi, watch.subscribe()));
            }
        });
        Self { address, frozen }
    }

    fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    fn thaw(&self) {
        self.frozen.send_replace(false);
    }
}

/// Copies `from` to `to`, holding each chunk while the relay is frozen.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut frozen: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.wait_for(|f| !*f).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// An om that stops answering without closing its connections (a frozen
/// process, a partitioned host): a read gives up on it after its share of
/// the om deadline and is answered by the next om, and later calls go
/// there first; a change sent to it is not resent (it may have been
/// applied) and times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_moves_past_an_om_that_stopped_answering() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = om(&dir.path().join("a")).await;
    let b = om(&dir.path().join("b")).await;
    b.om()
        .create_bucket("on-b", None, None)
        .await
        .expect("bucket on b");
    let relay = FreezableRelay::start(a.address()).await;
    let list = format!("{},{}", relay.address, b.address());
    let config = ClientConfig::default().with_om_timeout(std::time::Duration::from_secs(4));
    let c = Client::connect(&list, config.clone())
        .await
        .expect("connect");
    c.create_bucket("on-a", BucketOptions::default())
        .await
        .expect("create through the relay");
    assert_eq!(names(&a).await, ["on-a"]);
    let changer = Client::connect(&list, config).await.expect("connect");
    assert_eq!(changer.list_buckets().await.expect("list on a").len(), 1);

    relay.freeze();
    let e = changer
        .create_bucket("lost", BucketOptions::default())
        .await
        .expect_err("a frozen om answers no change");
    assert!(matches!(e, ClientError::OmTimeout { .. }), "{e:?}");
    let listed = c.list_buckets().await.expect("the read moves on to b");
    assert_eq!(
        listed.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        ["on-b"]
    );
    // The next call starts at b: a change lands there at once.
    c.create_bucket("second", BucketOptions::default())
        .await
        .expect("create on b");
    assert_eq!(names(&b).await, ["on-b", "second"]);
}

/// An om that is slow, not gone: the read is sent on to the next om after
/// its share of the deadline, but the slow om is still listened to, so when
/// the next om fails the slow one's late answer is taken (giving up on it
/// at its share failed the read). The slow om answers only once the next
/// one has been tried and has dropped the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_oms_late_answer_still_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = om(&dir.path().join("a")).await;
    a.om()
        .create_bucket("on-a", None, None)
        .await
        .expect("bucket on a");
    let relay = FreezableRelay::start(a.address()).await;
    // b accepts and hangs up at once, and says when it was tried.
    let b = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let b_address = b.local_addr().expect("addr");
    let tried = std::sync::Arc::new(tokio::sync::Notify::new());
    let told = std::sync::Arc::clone(&tried);
    tokio::spawn(async move {
        while let Ok((conn, _)) = b.accept().await {
            drop(conn);
            told.notify_one();
        }
    });
    let list = format!("{},{b_address}", relay.address);
    let config = ClientConfig::default().with_om_timeout(std::time::Duration::from_secs(4));
    let c = Client::connect(&list, config).await.expect("connect");
    assert_eq!(c.list_buckets().await.expect("list").len(), 1);
    relay.freeze();
    let listing = tokio::spawn(async move { c.list_buckets().await });
    tried.notified().await;
    relay.thaw();
    let listed = listing.await.expect("task").expect("a's late answer");
    assert_eq!(
        listed.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        ["on-a"]
    );
}
