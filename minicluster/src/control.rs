//! The minicluster's control service: stop and start its datanodes from
//! another process (`cargo xtask dn stop|start N`).
//!
//! Started by [`ControlServer::start`] on a cluster shared behind a mutex;
//! serves until [`ControlServer::shutdown`] or drop. The mutex is held for
//! the whole stop or restart of one datanode (bounded by the datanode's
//! 5-second graceful shutdown).

use std::net::SocketAddr;
use std::sync::Arc;

use proto_crate::ServingTask;
use proto_crate::wire::admin as pb;
use proto_crate::wire::admin::mini_cluster_control_client::MiniClusterControlClient;
use proto_crate::wire::admin::mini_cluster_control_server::{
    MiniClusterControl, MiniClusterControlServer,
};
use tokio::sync::Mutex;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use crate::MiniCluster;

struct ControlService {
    cluster: Arc<Mutex<MiniCluster>>,
}

#[tonic::async_trait]
impl MiniClusterControl for ControlService {
    async fn stop_datanode(
        &self,
        req: Request<pb::DatanodeRequest>,
    ) -> Result<Response<pb::DatanodeResponse>, Status> {
        let mut cluster = self.cluster.lock().await;
        let dn = cluster
            .datanode_mut(req.into_inner().index as usize)
            .map_err(|e| Status::not_found(e.to_string()))?;
        dn.stop().await;
        Ok(Response::new(pb::DatanodeResponse {
            address: dn.address(),
            running: dn.is_running(),
        }))
    }

    async fn start_datanode(
        &self,
        req: Request<pb::DatanodeRequest>,
    ) -> Result<Response<pb::DatanodeResponse>, Status> {
        let mut cluster = self.cluster.lock().await;
        let dn = cluster
            .datanode_mut(req.into_inner().index as usize)
            .map_err(|e| Status::not_found(e.to_string()))?;
        dn.restart()
            .await
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(pb::DatanodeResponse {
            address: dn.address(),
            running: dn.is_running(),
        }))
    }
}

/// A running control server.
#[derive(Debug)]
pub struct ControlServer {
    address: SocketAddr,
    serving: ServingTask<Result<(), tonic::transport::Error>>,
}

impl ControlServer {
    /// Binds `listen` and serves control of `cluster`.
    ///
    /// # Errors
    /// Bind errors.
    pub async fn start(
        listen: SocketAddr,
        cluster: Arc<Mutex<MiniCluster>>,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let address = listener.local_addr()?;
        let svc = MiniClusterControlServer::new(ControlService { cluster });
        let serving = ServingTask::spawn(|stop| {
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    TcpIncoming::from(listener).with_nodelay(Some(true)),
                    stop.wait(),
                )
        });
        Ok(Self { address, serving })
    }

    /// `HOST:PORT` served on.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Stops serving and waits for the task (5 s grace, then abort).
    pub async fn shutdown(mut self) {
        self.serving.stop(std::time::Duration::from_secs(5)).await;
    }
}

/// Client of a minicluster's control service.
#[derive(Debug, Clone)]
pub struct ControlClient {
    inner: MiniClusterControlClient<Channel>,
}

impl ControlClient {
    /// Connects to the control service at `address` (`HOST:PORT`).
    ///
    /// # Errors
    /// The connection error.
    pub async fn connect(address: &str) -> Result<Self, tonic::transport::Error> {
        Ok(Self {
            inner: MiniClusterControlClient::connect(format!("http://{address}")).await?,
        })
    }

    /// Stops datanode `index`; returns its address.
    ///
    /// # Errors
    /// `NOT_FOUND` for an unknown index.
    pub async fn stop(&mut self, index: u32) -> Result<String, Status> {
        Ok(self
            .inner
            .stop_datanode(pb::DatanodeRequest { index })
            .await?
            .into_inner()
            .address)
    }

    /// Restarts datanode `index` on its port and data dir; returns its address.
    ///
    /// # Errors
    /// `NOT_FOUND` for an unknown index; `INTERNAL` if it cannot start.
    pub async fn start(&mut self, index: u32) -> Result<String, Status> {
        Ok(self
            .inner
            .start_datanode(pb::DatanodeRequest { index })
            .await?
            .into_inner()
            .address)
    }
}
