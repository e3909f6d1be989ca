//! The datanode's admin service (fault injection) and a client for it. The
//! service is mounted only when the datanode is started with fault injection
//! enabled (`--enable-fault-injection`; the minicluster always enables it).

use std::sync::Arc;

use proto_crate::wire::admin as pb;
use proto_crate::wire::admin::datanode_admin_service_client::DatanodeAdminServiceClient;
use proto_crate::wire::admin::datanode_admin_service_server::DatanodeAdminService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::fault::{FaultInjector, FaultRule};

/// `DatanodeAdminService` over one datanode's [`FaultInjector`].
#[derive(Debug, Clone)]
pub struct DatanodeAdminGrpc {
    faults: Arc<FaultInjector>,
    /// Whether changing faults needs a client certificate (TLS on).
    certificate_required: bool,
}

impl DatanodeAdminGrpc {
    /// Serves `faults`; anyone who reaches the port may change them.
    #[must_use]
    pub fn new(faults: Arc<FaultInjector>) -> Self {
        Self {
            faults,
            certificate_required: false,
        }
    }

    /// The same service, letting only callers that present a client
    /// certificate the cluster CA signed inject or clear faults (the
    /// datanode runs with TLS).
    #[must_use]
    pub fn with_certificate_required(mut self, required: bool) -> Self {
        self.certificate_required = required;
        self
    }

    fn require_admin<T>(&self, request: &Request<T>, call: &str) -> Result<(), Status> {
        if !self.certificate_required || proto_crate::tls::peer_is_verified(request) {
            return Ok(());
        }
        Err(Status::permission_denied(format!(
            "{call} needs an admin credential: a client certificate the cluster CA signed"
        )))
    }
}

#[tonic::async_trait]
impl DatanodeAdminService for DatanodeAdminGrpc {
    async fn inject_fault(
        &self,
        req: Request<pb::InjectFaultRequest>,
    ) -> Result<Response<pb::InjectFaultResponse>, Status> {
        self.require_admin(&req, "InjectFault")?;
        let fault = req
            .into_inner()
            .fault
            .ok_or_else(|| Status::invalid_argument("fault missing"))?;
        let rule =
            FaultRule::try_from(fault).map_err(|e| Status::invalid_argument(e.to_string()))?;
        tracing::info!(?rule, "fault injected");
        self.faults.add(rule);
        Ok(Response::new(pb::InjectFaultResponse {}))
    }

    async fn clear_faults(
        &self,
        req: Request<pb::ClearFaultsRequest>,
    ) -> Result<Response<pb::ClearFaultsResponse>, Status> {
        self.require_admin(&req, "ClearFaults")?;
        self.faults.clear();
        Ok(Response::new(pb::ClearFaultsResponse {}))
    }

    async fn fault_stats(
        &self,
        _req: Request<pb::FaultStatsRequest>,
    ) -> Result<Response<pb::FaultStatsResponse>, Status> {
        Ok(Response::new(pb::FaultStatsResponse {
            injected_total: self.faults.injected(),
            active_rules: u32::try_from(self.faults.rules().len()).unwrap_or(u32::MAX),
        }))
    }
}

/// Client of a datanode's admin service (used by `cargo xtask dn fault|clear`).
#[derive(Debug, Clone)]
pub struct DatanodeAdminClient {
    inner: DatanodeAdminServiceClient<Channel>,
}

impl DatanodeAdminClient {
    /// Connects to the datanode at `address` (`HOST:PORT`), over TLS with `tls`.
    ///
    /// # Errors
    /// [`DatanodeError::InvalidArgument`](crate::DatanodeError::InvalidArgument)
    /// for a malformed address; [`DatanodeError::Io`](crate::DatanodeError::Io)
    /// when no connection (or TLS handshake) succeeds.
    pub async fn connect(
        address: &str,
        tls: Option<&proto_crate::tls::TlsConfig>,
    ) -> Result<Self, crate::DatanodeError> {
        let endpoint = proto_crate::tls::endpoint(address, tls)
            .map_err(|e| crate::DatanodeError::InvalidArgument(format!("datanode {e}")))?;
        let channel = endpoint.connect().await.map_err(|e| {
            crate::DatanodeError::io(
                format!("connecting to datanode {address}"),
                std::io::Error::other(e),
            )
        })?;
        Ok(Self {
            inner: DatanodeAdminServiceClient::new(channel),
        })
    }

    /// Adds `rule` on the datanode.
    ///
    /// # Errors
    /// `UNIMPLEMENTED` when the datanode runs without fault injection; the
    /// datanode's refusal of the rule.
    pub async fn inject(&mut self, rule: FaultRule) -> Result<(), Status> {
        self.inner
            .inject_fault(pb::InjectFaultRequest {
                fault: Some(rule.into()),
            })
            .await?;
        Ok(())
    }

    /// Removes every rule on the datanode.
    ///
    /// # Errors
    /// As [`inject`](Self::inject).
    pub async fn clear(&mut self) -> Result<(), Status> {
        self.inner.clear_faults(pb::ClearFaultsRequest {}).await?;
        Ok(())
    }

    /// (faults injected so far, rules in force).
    ///
    /// # Errors
    /// As [`inject`](Self::inject).
    pub async fn stats(&mut self) -> Result<(u64, u32), Status> {
        let r = self
            .inner
            .fault_stats(pb::FaultStatsRequest {})
            .await?
            .into_inner();
        Ok((r.injected_total, r.active_rules))
    }
}
