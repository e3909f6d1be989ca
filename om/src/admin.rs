//! The om's admin service (`OmAdminService`) and its client: spare
//! replicas, the ReplicationManager's status, decommission, and S3 users.
//! With TLS on, every call that changes something or reveals a secret needs
//! an admin credential (a client certificate the cluster CA signed).

use std::sync::Arc;

use proto_crate::ReplicaIndex;
use proto_crate::wire::admin as admin_pb;
use proto_crate::wire::admin::om_admin_service_server::OmAdminService;
use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use crate::{OmError, OzoneManager, S3Credentials, S3User, add_replica};

/// Longest an om holds a RepairStatus call waiting for the ReplicationManager's passes
/// ([`OmAdminClient::repair_status_after`]).
pub const MAX_REPAIR_STATUS_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `OmAdminService`: spare replicas, repair status, decommission, S3 users.
#[derive(Debug, Clone)]
pub struct OmAdminGrpc {
    om: Arc<OzoneManager>,
}

impl OmAdminGrpc {
    /// Serves `om`.
    #[must_use]
    pub fn new(om: Arc<OzoneManager>) -> Self {
        Self { om }
    }

    /// With TLS on, a call that changes the cluster (`AddReplica`,
    /// `Decommission`, `CreateUser`, `RevokeKey`) or lists its users
    /// (`ListUsers`) needs an admin credential: a client certificate the
    /// cluster CA signed (`cluster.json`'s `tls.admin_cert`). Without TLS
    /// every caller passes (README: "Security").
    fn require_admin<T>(&self, request: &Request<T>, call: &str) -> Result<(), Status> {
        if self.om.config().tls.is_none() || proto_crate::tls::peer_is_verified(request) {
            return Ok(());
        }
        Err(Status::from(OmError::PermissionDenied(format!(
            "{call} needs an admin credential: a client certificate the cluster CA signed \
             (ozone --tls-cert/--tls-key; a minicluster's cluster.json names one)"
        ))))
    }
}

#[tonic::async_trait]
impl OmAdminService for OmAdminGrpc {
    async fn add_replica(
        &self,
        req: Request<admin_pb::AddReplicaRequest>,
    ) -> Result<Response<admin_pb::AddReplicaResponse>, Status> {
        self.require_admin(&req, "AddReplica")?;
        let r = req.into_inner();
        let length = add_replica(
            &self.om,
            &r.bucket,
            &r.key,
            r.group as usize,
            ReplicaIndex::from_wire(r.replica_index),
            &r.target_datanode,
        )
        .await?;
        Ok(Response::new(admin_pb::AddReplicaResponse { length }))
    }

    async fn repair_status(
        &self,
        req: Request<admin_pb::RepairStatusRequest>,
    ) -> Result<Response<admin_pb::RepairStatusResponse>, Status> {
        self.om
            .lead
            .require("the ReplicationManager's status")
            .await?;
        let req = req.into_inner();
        if req.min_passes > 0 {
            // Waits on the passes as they end, at most the asked time (bounded).
            let wait = std::time::Duration::from_millis(u64::from(req.wait_ms))
                .min(MAX_REPAIR_STATUS_WAIT);
            let mut passes = self.om.watch_repair_passes();
            let _ = tokio::time::timeout(wait, passes.wait_for(|n| *n >= req.min_passes)).await;
        }
        Ok(Response::new(self.om.repair_status().into()))
    }

    async fn decommission(
        &self,
        req: Request<admin_pb::DecommissionRequest>,
    ) -> Result<Response<admin_pb::DecommissionResponse>, Status> {
        self.require_admin(&req, "Decommission")?;
        let uuid = req.into_inner().datanode_uuid;
        let uuid: proto_crate::DatanodeId = uuid
            .parse()
            .map_err(|e| OmError::InvalidArgument(format!("`{uuid}` is not a datanode id: {e}")))?;
        let state = self.om.decommission(&uuid).await?;
        Ok(Response::new(admin_pb::DecommissionResponse {
            op_state: state.to_string(),
        }))
    }

    async fn create_user(
        &self,
        req: Request<admin_pb::CreateUserRequest>,
    ) -> Result<Response<admin_pb::CreateUserResponse>, Status> {
        self.require_admin(&req, "CreateUser")?;
        let name = req.into_inner().name;
        let c = self.om.create_s3_key(&name).await?;
        Ok(Response::new(admin_pb::CreateUserResponse {
            user: c.user,
            access_key: c.access_key,
            secret_key: c.secret_key,
        }))
    }

    async fn list_users(
        &self,
        req: Request<admin_pb::ListUsersRequest>,
    ) -> Result<Response<admin_pb::ListUsersResponse>, Status> {
        self.require_admin(&req, "ListUsers")?;
        let users = self.om.list_s3_users().await?;
        Ok(Response::new(admin_pb::ListUsersResponse {
            users: users
                .into_iter()
                .map(|u| admin_pb::S3UserInfo {
                    name: u.name,
                    created_unix_ms: u.created_unix_ms,
                    access_keys: u.access_keys,
                })
                .collect(),
        }))
    }

    async fn revoke_key(
        &self,
        req: Request<admin_pb::RevokeKeyRequest>,
    ) -> Result<Response<admin_pb::RevokeKeyResponse>, Status> {
        self.require_admin(&req, "RevokeKey")?;
        let key = req.into_inner().access_key;
        let user = self.om.revoke_s3_key(&key).await?;
        Ok(Response::new(admin_pb::RevokeKeyResponse { user }))
    }
}

/// A failed call of the om's admin service, worded for a person: the call,
/// the gRPC status code and the om's message (not the raw status).
#[derive(Debug, thiserror::Error)]
#[error("om {op} failed ({code}): {message}")]
pub struct AdminCallError {
    /// The admin RPC (`AddReplica`, `Decommission`, `RepairStatus`).
    pub op: &'static str,
    /// The gRPC status code.
    pub code: tonic::Code,
    /// The om's error code ([`OmErrorCode::of`](proto_crate::OmErrorCode::of):
    /// `NOT_LEADER` from an om that does not run the background services,
    /// `UNAVAILABLE` for no answer).
    pub om_code: proto_crate::OmErrorCode,
    /// The om's message.
    pub message: String,
}

impl AdminCallError {
    fn of(op: &'static str) -> impl FnOnce(Status) -> Self {
        move |s| Self {
            op,
            code: s.code(),
            om_code: proto_crate::OmErrorCode::of(&s),
            message: s.message().to_string(),
        }
    }
}

/// Client of the om's admin service (used by `cargo xtask key add-replica`).
#[derive(Debug, Clone)]
pub struct OmAdminClient {
    inner: proto_crate::wire::admin::om_admin_service_client::OmAdminServiceClient<Channel>,
}

impl OmAdminClient {
    /// Connects to the om at `address` (`HOST:PORT`), over TLS with `tls`.
    ///
    /// # Errors
    /// [`OmError::Unreachable`](crate::OmError::Unreachable) naming the om
    /// and why (a malformed address, no connection, a TLS handshake refused).
    pub async fn connect(
        address: &str,
        tls: Option<&proto_crate::tls::TlsConfig>,
    ) -> Result<Self, crate::OmError> {
        let channel = crate::nodes::om_channel(address, tls).await?;
        Ok(Self {
            inner: proto_crate::wire::admin::om_admin_service_client::OmAdminServiceClient::new(
                channel,
            ),
        })
    }

    /// Starts decommissioning datanode `uuid`; returns its state after the call.
    ///
    /// # Errors
    /// The om's refusal (an unknown datanode).
    pub async fn decommission(
        &mut self,
        uuid: &str,
    ) -> Result<crate::OperationalState, AdminCallError> {
        let state = self
            .inner
            .decommission(admin_pb::DecommissionRequest {
                datanode_uuid: uuid.to_string(),
            })
            .await
            .map_err(AdminCallError::of("Decommission"))?
            .into_inner()
            .op_state;
        state
            .parse()
            .map_err(|e: String| AdminCallError::of("Decommission")(Status::internal(e)))
    }

    /// The om's ReplicationManager status.
    ///
    /// # Errors
    /// The call's failure.
    pub async fn repair_status(&mut self) -> Result<crate::RepairStatus, AdminCallError> {
        self.repair_status_after(0, std::time::Duration::ZERO).await
    }

    /// The om's ReplicationManager status once it has made at least `passes` passes since
    /// the om started, or once `wait` (at most [`MAX_REPAIR_STATUS_WAIT`], 60 s) has passed,
    /// whichever is first: the om waits on its passes as they end. Check
    /// [`RepairStatus::passes`](crate::RepairStatus::passes) for which.
    ///
    /// # Errors
    /// The call's failure (`NOT_LEADER` from an om that does not run the services).
    pub async fn repair_status_after(
        &mut self,
        passes: u64,
        wait: std::time::Duration,
    ) -> Result<crate::RepairStatus, AdminCallError> {
        let wait_ms = u32::try_from(wait.min(MAX_REPAIR_STATUS_WAIT).as_millis()).unwrap_or(0);
        let mut request = tonic::Request::new(admin_pb::RepairStatusRequest {
            min_passes: passes,
            wait_ms,
        });
        // The call outlives the om's wait.
        request.set_timeout(wait + std::time::Duration::from_secs(10));
        Ok(self
            .inner
            .repair_status(request)
            .await
            .map_err(AdminCallError::of("RepairStatus"))?
            .into_inner()
            .into())
    }

    /// Asks the om to copy replica `replica_index` (`None` for a replicated key) of group
    /// `group` of `bucket/key` to datanode `target` (uuid); returns the bytes copied.
    ///
    /// # Errors
    /// The om's refusal or the copy's failure.
    pub async fn add_replica(
        &mut self,
        bucket: &str,
        key: &str,
        group: u32,
        replica_index: Option<ReplicaIndex>,
        target: &str,
    ) -> Result<u64, AdminCallError> {
        Ok(self
            .inner
            .add_replica(admin_pb::AddReplicaRequest {
                bucket: bucket.to_string(),
                key: key.to_string(),
                group,
                replica_index: ReplicaIndex::to_wire(replica_index),
                target_datanode: target.to_string(),
            })
            .await
            .map_err(AdminCallError::of("AddReplica"))?
            .into_inner()
            .length)
    }

    /// Issues a new S3 access key pair for `user`, creating the user if
    /// needed (at most [`MAX_ACCESS_KEYS_PER_USER`](crate::MAX_ACCESS_KEYS_PER_USER)
    /// keys per user).
    ///
    /// # Errors
    /// The om's refusal: `LIMIT_EXCEEDED`, `INVALID_ARGUMENT` for a bad name,
    /// `PERMISSION_DENIED` without an admin credential under TLS.
    pub async fn create_user(&mut self, user: &str) -> Result<S3Credentials, AdminCallError> {
        let r = self
            .inner
            .create_user(admin_pb::CreateUserRequest {
                name: user.to_string(),
            })
            .await
            .map_err(AdminCallError::of("CreateUser"))?
            .into_inner();
        Ok(S3Credentials {
            user: r.user,
            access_key: r.access_key,
            secret_key: r.secret_key,
        })
    }

    /// Every S3 user with its active access keys (no secrets), by name.
    ///
    /// # Errors
    /// The call's failure.
    pub async fn list_users(&mut self) -> Result<Vec<S3User>, AdminCallError> {
        Ok(self
            .inner
            .list_users(admin_pb::ListUsersRequest {})
            .await
            .map_err(AdminCallError::of("ListUsers"))?
            .into_inner()
            .users
            .into_iter()
            .map(|u| S3User {
                name: u.name,
                created_unix_ms: u.created_unix_ms,
                access_keys: u.access_keys,
            })
            .collect())
    }

    /// Revokes `access_key`; returns the user it belonged to.
    ///
    /// # Errors
    /// The om's refusal: `ACCESS_KEY_NOT_FOUND` (status `NotFound`).
    pub async fn revoke_key(&mut self, access_key: &str) -> Result<String, AdminCallError> {
        Ok(self
            .inner
            .revoke_key(admin_pb::RevokeKeyRequest {
                access_key: access_key.to_string(),
            })
            .await
            .map_err(AdminCallError::of("RevokeKey"))?
            .into_inner()
            .user)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    /// A RepairStatus call asked for passes is held until the ReplicationManager has made
    /// them (it answers at the pass's end, not at a poll), or until its wait runs out.
    #[tokio::test]
    async fn a_repair_status_waits_for_the_passes_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let om = OzoneManager::open(
            crate::OmConfig::new(dir.path()).with_service_interval(Duration::from_millis(200)),
        )
        .await
        .expect("om");
        let server = crate::OmServer::start("127.0.0.1:0".parse().expect("addr"), Arc::new(om))
            .await
            .expect("serve");
        let mut admin = OmAdminClient::connect(&server.address().to_string(), None)
            .await
            .expect("connect");
        let now = admin.repair_status().await.expect("status").passes;
        let after = admin
            .repair_status_after(now + 2, Duration::from_secs(30))
            .await
            .expect("status");
        assert!(after.passes >= now + 2, "{} after {now}", after.passes);
        let started = Instant::now();
        admin
            .repair_status_after(u64::MAX, Duration::from_millis(300))
            .await
            .expect("answered once the wait ran out");
        assert!(started.elapsed() >= Duration::from_millis(300), "it waited");
        server.shutdown().await;
    }
}
