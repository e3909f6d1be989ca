//! The minicluster's S3 gateway (feature `s3`, on by default): crates that
//! test only the client and the servers build the minicluster without it.

use std::net::SocketAddr;

use ec_client::ClientConfig;

use crate::{MiniCluster, MiniClusterError, S3_ACCESS_KEY, S3_SECRET_KEY, S3Info, io};

impl MiniCluster {
    /// Starts an S3 gateway over this cluster on 127.0.0.1:`port` (0 picks a
    /// free port), signed with [`S3_ACCESS_KEY`] / [`S3_SECRET_KEY`] unless
    /// `auth` is false. Returns its address.
    ///
    /// # Errors
    /// Client connection or bind errors.
    pub async fn start_s3_gateway(
        &mut self,
        port: u16,
        auth: bool,
    ) -> Result<SocketAddr, MiniClusterError> {
        // With TLS the gateway presents its own client certificate: the om
        // tells S3 secrets only to a peer the cluster CA vouches for.
        let client = match self.tls() {
            Some(t) => {
                self.client_with(ClientConfig::default().with_tls(Some(t.s3_client.clone())))
                    .await?
            }
            None => self.client().await?,
        };
        let mut config = s3_gateway::GatewayConfig::new(
            ([127, 0, 0, 1], port).into(),
            S3_ACCESS_KEY,
            S3_SECRET_KEY,
        )
        .with_metrics_listen(([127, 0, 0, 1], 0).into());
        if !auth {
            config = config.without_auth();
        }
        if let Some(t) = self.tls() {
            config = config.with_https(t.https.clone());
        }
        let gw = s3_gateway::S3Gateway::start(client, config)
            .await
            .map_err(io("binding the s3 gateway"))?;
        let address = gw.address();
        self.s3 = Some(gw);
        Ok(address)
    }

    /// The S3 gateway's counters, when one runs.
    #[must_use]
    pub fn s3_metrics(&self) -> Option<s3_gateway::GatewaySnapshot> {
        self.s3.as_ref().map(|g| g.metrics().snapshot())
    }

    pub(crate) fn s3_metrics_url(&self) -> Option<String> {
        self.s3
            .as_ref()
            .and_then(s3_gateway::S3Gateway::metrics_url)
    }

    pub(crate) fn s3_info(&self) -> Option<S3Info> {
        self.s3.as_ref().map(|g| S3Info {
            endpoint: g.endpoint(),
            access_key: S3_ACCESS_KEY.to_string(),
            secret_key: S3_SECRET_KEY.to_string(),
        })
    }
}
