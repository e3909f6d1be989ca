//! The cluster id: a name made once with the metadata store and the same on
//! every om that shares it (Ozone's clusterID, written when SCM is
//! formatted). Datanodes carry the id of the cluster they joined in every
//! registration, heartbeat and block report, and an om of another cluster
//! refuses them: a datanode given the addresses of two separate oms would
//! otherwise be filled by both, and each om's orphan sweep would log the
//! other's replicas for deletion.

use meta_store::{MetaStore, Table, transact};
use proto_crate::DatanodeDetails;

use crate::OmError;

/// The one row `id` → the cluster id.
const CLUSTER: Table<String, String> = Table::new("cluster");
/// The row's key.
const ID: &str = "id";

/// The cluster id stored in `store`, made (`CID-` and 32 random hex
/// digits) and stored if there is none yet, in one `transact` body, so
/// oms opening one store at once agree on one id.
///
/// # Errors
/// Store errors.
pub(crate) async fn load_or_create(store: &MetaStore) -> Result<String, OmError> {
    let id = ID.to_string();
    let id = &id;
    let got = transact(store, |tx| {
        Box::pin(async move {
            if let Some(existing) = CLUSTER.get_in(&tx, id).await? {
                return Ok::<_, OmError>(existing);
            }
            let made = format!("CID-{:032x}", rand::random::<u128>());
            CLUSTER.put_in(&tx, id, &made);
            Ok(made)
        })
    })
    .await?;
    Ok(got.value)
}

/// Whether datanode `d`, which says it has joined cluster `theirs` (empty:
/// none yet), may talk to an om of cluster `ours`.
///
/// # Errors
/// [`OmError::PermissionDenied`] naming both ids when they differ.
pub(crate) fn check(ours: &str, theirs: &str, d: &DatanodeDetails) -> Result<(), OmError> {
    if theirs.is_empty() || theirs == ours {
        return Ok(());
    }
    Err(OmError::PermissionDenied(format!(
        "datanode {d} belongs to cluster {theirs} (its data dir's cluster.id); this om \
         serves cluster {ours}: a datanode joins another cluster only on a new data dir"
    )))
}

impl crate::OzoneManager {
    /// [`check`] against this om's cluster, counting refusals.
    ///
    /// # Errors
    /// As [`check`].
    pub(crate) fn check_cluster(&self, theirs: &str, d: &DatanodeDetails) -> Result<(), OmError> {
        check(self.cluster_id(), theirs, d).inspect_err(|_| {
            self.other_cluster_refusals.send_modify(|n| *n += 1);
        })
    }

    /// A receiver of the number of registrations, heartbeats and block
    /// reports refused because the datanode belongs to another cluster
    /// (to wait for refusals without polling).
    #[must_use]
    pub fn watch_other_cluster_refusals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.other_cluster_refusals.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_oms::{BACKENDS, store_on};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_id_per_store_made_once() {
        for backend in BACKENDS {
            let (store, _guard) = store_on(backend).await;
            let (a, b) = tokio::join!(load_or_create(&store), load_or_create(&store));
            let (a, b) = (a.expect("id"), b.expect("id"));
            assert_eq!(a, b, "{backend:?}: two oms opening at once agree");
            assert!(a.starts_with("CID-") && a.len() == 36, "{a}");
            assert_eq!(load_or_create(&store).await.expect("id"), a, "{backend:?}");
        }
        let (other, _guard) = store_on(BACKENDS[0]).await;
        let third = load_or_create(&other).await.expect("id");
        let d = DatanodeDetails {
            uuid: proto_crate::DatanodeId::random(),
            address: "127.0.0.1:1".into(),
        };
        check(&third, "", &d).expect("a datanode that joined nothing yet");
        check(&third, &third, &d).expect("the same cluster");
        let e = check(&third, "CID-other", &d).expect_err("another cluster");
        assert!(e.to_string().contains("CID-other"), "{e}");
    }

    const STALE: std::time::Duration = std::time::Duration::from_millis(600);
    const DEAD: std::time::Duration = std::time::Duration::from_millis(1200);
    const HEARTBEAT: std::time::Duration = std::time::Duration::from_millis(100);

    async fn serve(om: crate::OzoneManager) -> crate::OmServer {
        crate::OmServer::start(
            "127.0.0.1:0".parse().expect("addr"),
            std::sync::Arc::new(om),
        )
        .await
        .expect("om serves")
    }

    /// Waits until `om` lists datanode `address` as HEALTHY.
    async fn wait_healthy(om: &crate::OmServer, address: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        // Liveness changes only when a registration or heartbeat arrives.
        let mut heard = om.om().watch_heartbeats();
        loop {
            let statuses = om.om().datanode_statuses();
            if statuses
                .iter()
                .any(|s| s.details.address == address && s.state == crate::NodeState::Healthy)
            {
                return;
            }
            let next = tokio::time::timeout_at(deadline, heard.changed()).await;
            assert!(
                matches!(next, Ok(Ok(()))),
                "{address} is not healthy on {}: {statuses:?}",
                om.address()
            );
        }
    }

    /// What datanode `address` answers GetBlock of a block it does not
    /// hold, called with om `om`'s service token.
    async fn token_check(address: &str, om: &crate::OmServer) -> proto_crate::ResultCode {
        let token = om.om().service_token().expect("mint").expect("security on");
        let block = proto_crate::BlockId {
            container_id: 1,
            local_id: 1,
            replica_index: None,
        };
        match block_stream::XceiverClientManager::direct(address)
            .expect("client")
            .with_fixed_token(Some(&token))
            .get_block(block)
            .await
        {
            Err(block_stream::BlockStreamError::Datanode { code, .. }) => code,
            other => panic!("expected a datanode's refusal, got {other:?}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_datanode_reports_to_every_om_of_its_cluster_and_no_other() {
        let (store, _kept) = store_on(crate::test_oms::Backend::Redb).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = |name: &str| {
            crate::OmConfig::new(dir.path().join(name))
                .with_security(crate::BlockTokenConfig::default())
                .with_liveness(STALE, DEAD)
        };
        let open_on = |name: &str| crate::OzoneManager::open_on(config(name), Some(store.clone()));
        let a = serve(open_on("a").await.expect("open a")).await;
        let b = serve(open_on("b").await.expect("open b")).await;
        let other = serve(
            crate::OzoneManager::open(config("other"))
                .await
                .expect("open"),
        )
        .await;
        assert_eq!(
            a.om().cluster_id(),
            b.om().cluster_id(),
            "one store, one cluster"
        );
        assert_ne!(a.om().cluster_id(), other.om().cluster_id());

        // An om that takes connections and never answers (a stopped
        // process): it must hold up neither heartbeats nor reports to b.
        let hung = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let hung_address = hung.local_addr().expect("addr").to_string();
        let _hung = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((connection, _)) = hung.accept().await {
                held.push(connection);
            }
        });
        let oms = format!(
            "{},{hung_address},{},{}",
            a.address(),
            b.address(),
            other.address()
        );
        let dn = datanode::Datanode::start(
            datanode::DatanodeConfig::new(
                "127.0.0.1:0".parse().expect("addr"),
                dir.path().join("dn"),
            )
            .with_om(oms)
            .with_security(true)
            .with_heartbeat_interval(HEARTBEAT),
        )
        .await
        .expect("datanode starts");
        let address = dn.address().to_string();
        wait_healthy(&a, &address).await;
        wait_healthy(&b, &address).await;
        // Both oms sign with the keys of their store; the other cluster's
        // om is refused, and its keys are not taken.
        use proto_crate::ResultCode;
        assert_eq!(
            token_check(&address, &a).await,
            ResultCode::ContainerNotFound
        );
        assert_eq!(
            token_check(&address, &b).await,
            ResultCode::ContainerNotFound
        );
        // Refused at least three times (registration, heartbeats, reports):
        // and still recorded nowhere there.
        let mut refusals = other.om().watch_other_cluster_refusals();
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            refusals.wait_for(|n| *n >= 3),
        )
        .await
        .expect("refusals within 10 s")
        .expect("om alive");
        assert!(
            other.om().datanode_statuses().is_empty(),
            "another cluster's om took it"
        );
        assert_eq!(
            token_check(&address, &other).await,
            ResultCode::BlockTokenVerificationFailed
        );

        // Both oms of the cluster get block reports.
        let uuid = dn.details().uuid.clone();
        for om in [&a, &b] {
            let mut reports = om.om().watch_block_reports();
            tokio::time::timeout(
                std::time::Duration::from_secs(10),
                reports.wait_for(|_| om.om().block_report(&uuid).is_some()),
            )
            .await
            .unwrap_or_else(|_| panic!("no block report on {} in 10 s", om.address()))
            .expect("om alive");
        }

        // a goes; heartbeats to b go on: 20 of them arrive within 10 s
        // (2 s at the 100 ms interval), though a refuses connections and the
        // hung om holds each heartbeat for 2 s (a loop over the oms in turn
        // would need 40 s), and b never calls the datanode stale.
        a.shutdown().await;
        let mut heard = b.om().watch_heartbeats();
        let from = *heard.borrow_and_update();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while *heard.borrow() < from + 20 {
            let next = tokio::time::timeout_at(deadline, heard.changed()).await;
            assert!(
                matches!(next, Ok(Ok(()))),
                "b heard fewer than 20 heartbeats in 10 s"
            );
            let on_b = b.om().datanode_statuses();
            assert!(
                on_b.iter().all(|s| s.state == crate::NodeState::Healthy),
                "{on_b:?}"
            );
        }
        assert_eq!(
            token_check(&address, &b).await,
            ResultCode::ContainerNotFound
        );
    }
}
