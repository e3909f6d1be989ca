//! Serving an [`OzoneManager`] over gRPC on a listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use proto_crate::wire::admin::om_admin_service_server::OmAdminServiceServer;
use proto_crate::wire::om::ozone_manager_service_server::OzoneManagerServiceServer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;

use crate::replication::OmAdminGrpc;
use crate::{OmGrpcService, OzoneManager};

/// A running om gRPC server.
///
/// Started by [`OmServer::start`]; serves until [`OmServer::shutdown`]
/// (graceful, bounded by 5 s, then aborted) or until dropped (the shutdown
/// signal fires and the serving task winds down by itself).
#[derive(Debug)]
pub struct OmServer {
    address: SocketAddr,
    om: Arc<OzoneManager>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl OmServer {
    /// Binds `listen` (port 0 picks a free port) and serves `om`.
    ///
    /// # Errors
    /// Bind errors.
    pub async fn start(listen: SocketAddr, om: Arc<OzoneManager>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let mut address = listener.local_addr()?;
        if address.ip().is_unspecified() {
            address.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        let (tx, rx) = oneshot::channel::<()>();
        let svc = OzoneManagerServiceServer::new(OmGrpcService::new(Arc::clone(&om)))
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024);
        let admin = OmAdminServiceServer::new(OmAdminGrpc::new(Arc::clone(&om)));
        let task = tokio::spawn(
            Server::builder()
                .add_service(svc)
                .add_service(admin)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                }),
        );
        tracing::info!(%address, "om serving");
        Ok(Self {
            address,
            om,
            shutdown: Some(tx),
            task: Some(task),
        })
    }

    /// `HOST:PORT` the om serves on.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The in-process om behind the server.
    #[must_use]
    pub fn om(&self) -> &Arc<OzoneManager> {
        &self.om
    }

    /// Stops serving and waits for the task (5 s grace, then abort).
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(Duration::from_secs(5), &mut task)
                .await
                .is_err()
        {
            task.abort();
        }
    }
}

impl Drop for OmServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}
