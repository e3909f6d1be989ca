//! TLS on every gRPC channel (`MiniClusterConfig::with_tls`, `cargo xtask
//! minicluster --tls`): keys round-trip with the om and datanodes serving
//! TLS and the datanodes registering over mutual TLS; a client that does not
//! trust the cluster CA, or speaks plaintext, gets nothing; the om answers
//! RegisterDatanode, Heartbeat and BlockReport (which hand out block-token
//! secrets) only to a peer presenting a certificate the CA signed.

use crate::common;

use block_stream::{XceiverClientManager, XceiverConfig};
use common::{CELL, data, ec_bucket, read_all, replicated_bucket, ri, test_config};
use ec_client::{ClientError, TlsConfig};
use minicluster::tls::ThrowawayCa;
use minicluster::{MiniCluster, MiniClusterConfig};
use proto_crate::wire::om as om_pb;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use proto_crate::{DatanodeDetails, DatanodeId, OmErrorCode};

async fn tls_cluster() -> MiniCluster {
    MiniCluster::start(MiniClusterConfig::default().with_tls(true))
        .await
        .expect("minicluster with TLS starts")
}

/// The cluster's CA and, with `member`, the cluster's own certificate.
fn cluster_tls(cluster: &MiniCluster, member: bool) -> TlsConfig {
    let t = &cluster.tls().expect("TLS on").member;
    if member {
        t.clone()
    } else {
        t.without_identity()
    }
}

async fn om_client(
    cluster: &MiniCluster,
    tls: Option<&TlsConfig>,
) -> Result<OzoneManagerServiceClient<tonic::transport::Channel>, String> {
    let endpoint =
        proto_crate::tls::endpoint(&cluster.om_address(), tls).map_err(|e| e.to_string())?;
    let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
    Ok(OzoneManagerServiceClient::new(channel))
}

fn heartbeat(d: &DatanodeDetails) -> om_pb::HeartbeatRequest {
    om_pb::HeartbeatRequest {
        datanode: Some(d.clone().into()),
        ..Default::default()
    }
}

/// A heartbeat for `d` sent over a channel presenting `tls`'s certificate.
async fn heartbeat_as(
    cluster: &MiniCluster,
    tls: &TlsConfig,
    d: &DatanodeDetails,
) -> Result<tonic::Response<om_pb::HeartbeatResponse>, String> {
    om_client(cluster, Some(tls))
        .await?
        .heartbeat(heartbeat(d))
        .await
        .map_err(|s| format!("{s:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_round_trip_with_tls_on_every_channel() {
    let cluster = tls_cluster().await;
    let info = cluster.info();
    let ca = info
        .tls
        .as_ref()
        .expect("cluster.json names the CA")
        .ca
        .clone();
    assert!(std::path::Path::new(&ca).is_absolute(), "{ca}");
    TlsConfig::load(std::path::Path::new(&ca), None).expect("the CA file loads");
    assert!(info.block_tokens, "block tokens stay on beside TLS");
    // Every datanode registered (over mutual TLS) and heartbeats.
    common::wait_statuses(&cluster, |s| {
        s.len() == 5 && s.iter().all(|s| s.state == om::NodeState::Healthy)
    })
    .await;

    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "ec", 1 << 20).await;
    replicated_bucket(&client, "rep", 1 << 20).await;
    let ec = data(3 * CELL * 2 + 5, 1);
    let rep = data(300_000, 2);
    let written = client.put_key("ec", "k", None, &ec).await.expect("EC put");
    client
        .put_key("rep", "k", None, &rep)
        .await
        .expect("replicated put");
    assert_eq!(read_all(&client, "ec", "k").await, ec);
    assert_eq!(read_all(&client, "rep", "k").await, rep);
    let m = client.metrics();
    assert_eq!(m.token_refreshes, 0);

    // The data path needs no client certificate: a raw GetBlock trusting the CA only.
    let g = &written.block_groups[0];
    let node = g.pipeline.nodes_for(ri(1)).next().expect("index 1");
    let dn = XceiverClientManager::direct_with(
        &node.address,
        XceiverConfig::default().with_tls(Some(cluster_tls(&cluster, false))),
    )
    .expect("client")
    .with_fixed_token(g.token.as_ref());
    let block = dn.get_block(g.block_id(ri(1))).await.expect("GetBlock");
    assert_eq!(
        block.size,
        CELL * 2 + 5,
        "index 1: two whole cells and the last stripe's 5 bytes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_must_trust_the_cluster_ca() {
    let cluster = tls_cluster().await;
    let client = cluster.client_with(test_config()).await.expect("client");
    ec_bucket(&client, "b", 1 << 20).await;
    let written = client
        .put_key("b", "k", None, &data(CELL + 5, 3))
        .await
        .expect("put");

    // Another CA's trust: the om's certificate is refused at the handshake.
    let other = ThrowawayCa::new("another CA").expect("CA");
    let other_trust = TlsConfig::from_pem(other.pem(), None).expect("CA config");
    match ec_client::Client::connect(
        &cluster.om_address(),
        test_config().with_tls(Some(other_trust.clone())),
    )
    .await
    {
        Err(ClientError::Connect { message, .. }) => assert!(
            message.to_lowercase().contains("certificate"),
            "the refusal names the certificate: {message}"
        ),
        other => panic!("expected a refused connection, got {other:?}"),
    }

    // Plaintext to a TLS om: no answer ever comes back.
    let plain = async {
        ec_client::Client::connect(&cluster.om_address(), test_config())
            .await?
            .list_buckets()
            .await
    }
    .await;
    assert!(plain.is_err(), "plaintext got an answer: {plain:?}");

    // The same at a datanode, with a valid block token in hand.
    let g = &written.block_groups[0];
    let node = g.pipeline.nodes_for(ri(1)).next().expect("index 1");
    for config in [
        XceiverConfig::default().with_tls(Some(other_trust.clone())),
        XceiverConfig::default(),
    ] {
        let r = XceiverClientManager::direct_with(&node.address, config)
            .expect("client")
            .with_fixed_token(g.token.as_ref())
            .get_block(g.block_id(ri(1)))
            .await;
        assert!(r.is_err(), "an untrusted channel read a block: {r:?}");
    }
    // The cluster's own trust works against the same datanode.
    XceiverClientManager::direct_with(
        &node.address,
        XceiverConfig::default().with_tls(Some(cluster_tls(&cluster, false))),
    )
    .expect("client")
    .with_fixed_token(g.token.as_ref())
    .get_block(g.block_id(ri(1)))
    .await
    .expect("GetBlock over the cluster's TLS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_om_hands_secrets_only_to_certified_datanodes() {
    let cluster = tls_cluster().await;
    let registered = DatanodeDetails {
        uuid: cluster.datanodes()[0].uuid().parse().expect("uuid"),
        address: cluster.datanodes()[0].address(),
    };
    let stranger = DatanodeDetails {
        uuid: DatanodeId::random(),
        address: "127.0.0.1:1".to_string(),
    };

    // Trusting the CA but presenting no certificate: refused, nothing handed out.
    let mut anonymous = om_client(&cluster, Some(&cluster_tls(&cluster, false)))
        .await
        .expect("a TLS channel without a client certificate");
    fn denied<T>(r: Result<T, tonic::Status>, call: &str) {
        let Err(status) = r else {
            panic!("{call} was answered");
        };
        assert_eq!(
            status.code(),
            tonic::Code::PermissionDenied,
            "{call}: {status:?}"
        );
        assert_eq!(
            OmErrorCode::of(&status),
            OmErrorCode::PermissionDenied,
            "{call}"
        );
        assert!(
            status.message().contains("certificate"),
            "{call}: {status:?}"
        );
    }
    denied(
        anonymous
            .register_datanode(om_pb::RegisterDatanodeRequest {
                datanode: Some(stranger.clone().into()),
                ..Default::default()
            })
            .await,
        "RegisterDatanode",
    );
    denied(
        anonymous.heartbeat(heartbeat(&registered)).await,
        "Heartbeat",
    );
    let page = om_pb::BlockReportPage {
        datanode: Some(registered.clone().into()),
        ..Default::default()
    };
    denied(
        anonymous
            .block_report(futures::stream::iter(vec![page]))
            .await,
        "BlockReport",
    );
    assert!(
        cluster.om().datanode(stranger.uuid.as_str()).is_none(),
        "the refused registration left no datanode behind"
    );
    // Client calls need no certificate.
    anonymous
        .list_datanodes(om_pb::ListDatanodesRequest {})
        .await
        .expect("ListDatanodes");

    // A certificate of another CA: the handshake itself fails.
    let other = ThrowawayCa::new("another CA").expect("CA");
    let mut forged = other.loopback_config().expect("certificate");
    forged = TlsConfig::from_pem(
        cluster_tls(&cluster, false).ca_pem().to_vec(),
        forged.identity_pem().map(|(c, k)| (c.to_vec(), k.to_vec())),
    )
    .expect("config");
    let refused = heartbeat_as(&cluster, &forged, &registered).await;
    assert!(
        refused.is_err(),
        "a foreign certificate got secrets: {refused:?}"
    );

    // The cluster's certificate: answered, with the block-token secrets.
    let mut member = om_client(&cluster, Some(&cluster_tls(&cluster, true)))
        .await
        .expect("member channel");
    let answer = member
        .heartbeat(heartbeat(&registered))
        .await
        .expect("a certified heartbeat is answered")
        .into_inner();
    assert!(!answer.block_token_secrets.is_empty());
}

/// A certificate's role decides what it may do: the admin credential cannot
/// speak for a datanode (it names no host), the gateway's HTTPS certificate
/// cannot authenticate a client at all, and only a certified client may
/// call the om's and datanodes' admin RPCs that change the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_roles_and_admin_credentials() {
    let cluster = tls_cluster().await;
    let t = cluster.tls().expect("TLS on");
    let admin = TlsConfig::load(&t.admin.ca, Some((&t.admin.cert, &t.admin.key))).expect("admin");
    let registered = DatanodeDetails {
        uuid: cluster.datanodes()[0].uuid().parse().expect("uuid"),
        address: cluster.datanodes()[0].address(),
    };

    // The admin credential is verified but names no datanode host.
    let status = om_client(&cluster, Some(&admin))
        .await
        .expect("admin channel")
        .heartbeat(heartbeat(&registered))
        .await
        .expect_err("an admin certificate heartbeats for a datanode");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(
        status.message().contains("does not name the host"),
        "{status:?}"
    );
    // The gateway's certificate (serverAuth only) fails as a client's.
    let gateway = TlsConfig::from_pem(
        t.https.ca_pem().to_vec(),
        t.https
            .identity_pem()
            .map(|(c, k)| (c.to_vec(), k.to_vec())),
    )
    .expect("gateway settings");
    let r = heartbeat_as(&cluster, &gateway, &registered).await;
    assert!(
        r.is_err(),
        "the gateway's certificate spoke for a datanode: {r:?}"
    );

    // Admin RPCs: refused without a client certificate, served with one.
    let ca_only = cluster_tls(&cluster, false);
    let mut anonymous = om::OmAdminClient::connect(&cluster.om_address(), Some(&ca_only))
        .await
        .expect("om admin channel");
    let e = anonymous
        .decommission(registered.uuid.as_str())
        .await
        .expect_err("decommission without a credential");
    assert_eq!(e.code, tonic::Code::PermissionDenied, "{e}");
    let e = anonymous
        .add_replica("none", "none", 0, None, registered.uuid.as_str())
        .await
        .expect_err("add-replica without a credential");
    assert_eq!(e.code, tonic::Code::PermissionDenied, "{e}");
    anonymous
        .repair_status()
        .await
        .expect("status is read-only");
    let mut certified = om::OmAdminClient::connect(&cluster.om_address(), Some(&admin))
        .await
        .expect("om admin channel");
    let e = certified
        .add_replica("none", "none", 0, None, registered.uuid.as_str())
        .await
        .expect_err("no such bucket");
    assert_eq!(
        e.code,
        tonic::Code::NotFound,
        "past the credential check: {e}"
    );

    // S3 users: managing them needs the admin credential, and so does reading
    // a secret (what the gateway's --om-cert is for).
    for e in [
        anonymous.create_user("mallory").await.map(|_| ()),
        anonymous.list_users().await.map(|_| ()),
        anonymous.revoke_key("OZANY").await.map(|_| ()),
    ] {
        let e = e.expect_err("a user call without a credential");
        assert_eq!(e.code, tonic::Code::PermissionDenied, "{e}");
    }
    let issued = certified.create_user("alice").await.expect("create user");
    let secret = |c: &TlsConfig| {
        let c = c.clone();
        let key = issued.access_key.clone();
        let cluster_om = cluster.om_address();
        async move {
            let endpoint = proto_crate::tls::endpoint(&cluster_om, Some(&c)).expect("endpoint");
            OzoneManagerServiceClient::new(endpoint.connect().await.expect("channel"))
                .get_s3_secret(om_pb::GetS3SecretRequest { access_key: key })
                .await
        }
    };
    let refused = secret(&ca_only)
        .await
        .expect_err("a secret without a credential");
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    // Only the gateway's certificate: not the admin's, not a datanode's.
    for other in [&admin, &t.member] {
        let refused = secret(other).await.expect_err("a secret to another role");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    }
    let told = secret(&t.s3_client)
        .await
        .expect("a secret to the gateway")
        .into_inner();
    assert_eq!(
        (told.user.as_str(), told.secret_key.as_str()),
        ("alice", issued.secret_key.as_str())
    );
    assert_eq!(
        certified.list_users().await.expect("list users")[0].access_keys,
        vec![issued.access_key.clone()]
    );

    let address = registered.address.as_str();
    let rule = datanode::FaultRule::new(
        datanode::RpcKind::GetBlock,
        datanode::FaultKind::Unavailable,
    )
    .expect("rule");
    let mut anonymous = datanode::DatanodeAdminClient::connect(address, Some(&ca_only))
        .await
        .expect("datanode admin channel");
    let e = anonymous
        .inject(rule.clone())
        .await
        .expect_err("no credential");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert_eq!(cluster.datanodes()[0].faults().rules().len(), 0);
    let mut certified = datanode::DatanodeAdminClient::connect(address, Some(&admin))
        .await
        .expect("datanode admin channel");
    certified
        .inject(rule)
        .await
        .expect("injected with the credential");
    assert_eq!(cluster.datanodes()[0].faults().rules().len(), 1);
    certified.clear().await.expect("cleared");
}
