//! etcd over TLS with client certificates, and with etcd's user
//! authentication: three real members with TLS on their client and peer
//! ports; a user confined to its namespace; tokens that expire while idle.

use std::time::Duration;

use meta_store::local_etcd::{LocalEtcd, LocalEtcdOptions, LocalEtcdTls};
use meta_store::{EtcdConfig, EtcdStore, EtcdTls, MetaStore, StoreError, Txn};
use minicluster::tls::ThrowawayCa;

fn tls_files(dir: &std::path::Path) -> (ThrowawayCa, LocalEtcdTls) {
    let ca = ThrowawayCa::new("etcd test CA").expect("CA");
    let files = ca.write_loopback(dir, "etcd").expect("certificate");
    let tls = LocalEtcdTls {
        ca: files.ca,
        cert: files.cert,
        key: files.key,
    };
    (ca, tls)
}

async fn store(config: EtcdConfig) -> MetaStore {
    MetaStore::Etcd(EtcdStore::connect(&config).await.expect("connect"))
}

fn quick(mut config: EtcdConfig) -> EtcdConfig {
    config.timeout = Duration::from_secs(1);
    config.connect_timeout = Duration::from_millis(500);
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_client_certificates_serves_and_refuses_strangers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca, tls) = tls_files(&dir.path().join("tls"));
    let options = LocalEtcdOptions::default().with_tls(tls);
    // Three members: their peer traffic is TLS too.
    let etcd = LocalEtcd::start_with(dir.path(), 3, options)
        .await
        .expect("etcd starts with TLS");
    let config = etcd.config().expect("config");
    assert!(config.endpoints.iter().all(|e| e.starts_with("https://")));
    let s = store(config.clone().with_namespace("/tls/")).await;
    assert!(
        s.commit(Txn::new().put("k", "v"))
            .await
            .expect("commit")
            .committed()
    );
    assert_eq!(
        s.get(b"k").await.expect("get").map(|e| e.value),
        Some(b"v".to_vec())
    );

    // Without a client certificate the members refuse the handshake.
    let ca_only = EtcdTls::new(ca.pem().as_bytes().to_vec());
    let anonymous = store(quick(
        EtcdConfig::new(config.endpoints.clone()).with_tls(ca_only),
    ))
    .await;
    assert!(anonymous.get(b"k").await.is_err());
    // A client that trusts another CA refuses the members.
    let (stranger, _) = tls_files(&dir.path().join("other"));
    let (cert, key) = stranger
        .issue(
            &minicluster::tls::LOOPBACK_NAMES,
            minicluster::tls::Usage::Service,
        )
        .expect("certificate");
    let wrong_ca = EtcdTls::new(stranger.pem().as_bytes().to_vec()).with_identity(cert, key);
    let misled = store(quick(
        EtcdConfig::new(config.endpoints.clone()).with_tls(wrong_ca),
    ))
    .await;
    assert!(misled.get(b"k").await.is_err());
    // Plaintext to a TLS member is refused before any call.
    let plain = EtcdConfig::new(config.endpoints.clone());
    assert!(matches!(
        EtcdStore::connect(&plain).await,
        Err(StoreError::InvalidEndpoint { .. })
    ));
}

/// One member with authentication on, tokens that expire after 1 s idle,
/// and the user `om` (password `om-secret`) confined to `/om/`.
async fn member_with_users(dir: &std::path::Path) -> LocalEtcd {
    let options = LocalEtcdOptions::default().with_auth_token_ttl(Duration::from_secs(1));
    let etcd = LocalEtcd::start_with(dir, 1, options)
        .await
        .expect("etcd starts");
    etcd.enable_auth("root-secret", &[("om", "om-secret", b"/om/")])
        .await
        .expect("auth on");
    etcd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_works_in_its_namespace_only_and_survives_token_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = member_with_users(dir.path()).await;
    let config = etcd.config().expect("config");

    let om = store(
        config
            .clone()
            .with_namespace("/om/")
            .with_user("om", "om-secret"),
    )
    .await;
    assert!(
        om.commit(Txn::new().put("k", "v"))
            .await
            .expect("commit")
            .committed()
    );
    let page = om.scan_prefix(b"k", 10).await.expect("scan");
    assert_eq!(page.entries.len(), 1);
    // Elections live under the namespace too, so the same role covers them.
    let leadership = om
        .campaign("services", "om-a", meta_store::MIN_TTL)
        .await
        .expect("campaign");
    assert_eq!(
        om.leader("services").await.expect("leader").as_deref(),
        Some("om-a")
    );
    leadership.resign().await.expect("resign");
    assert_eq!(om.leader("services").await.expect("leader"), None);

    // The token expires after a second idle; the store authenticates again.
    // (The sleeps below are the idle time under test: etcd gives no event
    // for a token's expiry, and 3 s is three times its 1 s TTL.)
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        om.get(b"k")
            .await
            .expect("get after expiry")
            .map(|e| e.value),
        Some(b"v".to_vec())
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        om.commit(Txn::new().put("k2", "v"))
            .await
            .expect("commit after expiry")
            .committed()
    );

    // Elections after the election client sat idle past the TTL: campaign,
    // leader and resign authenticate again; a resign frees the election.
    let leadership = om
        .campaign("services", "om-b", meta_store::MIN_TTL)
        .await
        .expect("campaign after expiry");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        om.leader("services").await.expect("leader").as_deref(),
        Some("om-b")
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    leadership.resign().await.expect("resign after expiry");
    assert_eq!(om.leader("services").await.expect("leader"), None);

    // A restarted member forgets every token: the store authenticates again.
    let mut etcd = etcd;
    etcd.restart(0).await.expect("restart with auth on");
    assert!(
        om.commit(Txn::new().put("k4", "v"))
            .await
            .expect("commit after restart")
            .committed()
    );

    // Outside its namespace, without a user, or with a wrong password: refused.
    let elsewhere = store(
        config
            .clone()
            .with_namespace("/other/")
            .with_user("om", "om-secret"),
    )
    .await;
    assert!(matches!(
        elsewhere.commit(Txn::new().put("k", "v")).await,
        Err(StoreError::Etcd(_))
    ));
    let nobody = store(config.clone().with_namespace("/om/")).await;
    assert!(matches!(nobody.get(b"k").await, Err(StoreError::Etcd(_))));
    assert!(matches!(
        EtcdStore::connect(&config.clone().with_user("om", "wrong")).await,
        Err(StoreError::Etcd(_))
    ));

    // Compaction is open to any user (etcd 3.4); defragmentation and
    // alarms are root's, so reclaiming space is an admin's call.
    let root = store(
        config
            .with_namespace("/om/")
            .with_user("root", "root-secret"),
    )
    .await;
    assert!(
        om.commit(Txn::new().put("k3", "v"))
            .await
            .expect("commit")
            .committed()
    );
    assert!(
        om.compact_history(0)
            .await
            .expect("the user compacts")
            .is_some()
    );
    assert!(matches!(om.reclaim_space().await, Err(StoreError::Etcd(_))));
    assert_eq!(root.reclaim_space().await.expect("root reclaims").len(), 1);
}

/// Eight calls that find the token expired at once renew it once between
/// them, and all succeed (a renewal each would have etcd check the password
/// eight times).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_find_the_token_expired_together_renew_it_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let etcd = member_with_users(dir.path()).await;
    let config = etcd
        .config()
        .expect("config")
        .with_namespace("/om/")
        .with_user("om", "om-secret");
    let raw = EtcdStore::connect(&config).await.expect("connect");
    let om = MetaStore::Etcd(raw.clone());
    assert!(
        om.commit(Txn::new().put("k", "v"))
            .await
            .expect("commit")
            .committed()
    );
    assert_eq!(raw.token_renewals(), 0);
    // Idle three times the token's 1 s TTL (etcd gives no event for it).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let om = om.clone();
            tokio::spawn(async move { om.get(b"k").await })
        })
        .collect();
    for c in calls {
        let got = c.await.expect("task").expect("get after expiry");
        assert_eq!(got.map(|e| e.value), Some(b"v".to_vec()));
    }
    assert_eq!(raw.token_renewals(), 1);
}
