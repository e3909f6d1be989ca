//! [`EtcdConfig`]: how the store reaches etcd — members, namespace,
//! deadlines, TLS and etcd's user authentication — and the channels built
//! from it.
//!
//! The channels are tonic's, built here rather than by `etcd-client`, so
//! that TLS runs on the workspace's one rustls provider (aws-lc-rs, through
//! tonic's `tls-aws-lc`); `etcd-client`'s own TLS would add `ring`.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

use crate::StoreError;

/// TLS to etcd's client port: the CA that signed the members' certificates
/// (etcd's `--trusted-ca-file` on their side is the CA of ours) and, for a
/// cluster started with `--client-cert-auth`, this client's certificate.
#[derive(Clone)]
#[non_exhaustive]
pub struct EtcdTls {
    /// CA certificates, PEM: the only roots the members' certificates are
    /// checked against.
    pub ca_pem: Vec<u8>,
    /// This client's (certificate chain, private key), PEM, if it presents
    /// one.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl EtcdTls {
    /// Trusts the CA certificates in `ca_pem`; presents no certificate.
    #[must_use]
    pub fn new(ca_pem: impl Into<Vec<u8>>) -> Self {
        Self {
            ca_pem: ca_pem.into(),
            identity: None,
        }
    }

    /// Presents `cert_pem` (leaf first) with its private key `key_pem`.
    #[must_use]
    pub fn with_identity(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }
}

impl std::fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints the key.
        f.debug_struct("EtcdTls")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("identity", &self.identity.is_some())
            .finish()
    }
}

/// How to reach etcd.
#[derive(Clone)]
#[non_exhaustive]
pub struct EtcdConfig {
    /// Client URLs of the members: `http://HOST:PORT`, or `https://` with
    /// [`tls`](Self::tls). The client balances calls over them and moves
    /// past a member that does not answer.
    pub endpoints: Vec<String>,
    /// Prefix of every key this store writes (default `/ozone/`; at most
    /// [`MAX_NAMESPACE_BYTES`](crate::MAX_NAMESPACE_BYTES)).
    pub namespace: Vec<u8>,
    /// Deadline of one call (default 5 s).
    pub timeout: Duration,
    /// Deadline of connecting to a member (default 3 s).
    pub connect_timeout: Duration,
    /// TLS to the members (`None`: plaintext).
    pub tls: Option<EtcdTls>,
    /// etcd user and password, for a cluster with authentication enabled
    /// (`etcdctl auth enable`). The user's role needs read-write on the
    /// namespace (elections live there too); [`reclaim_space`](crate::MetaStore::reclaim_space)
    /// (defragmentation, alarms) needs etcd's `root` role.
    pub user: Option<(String, String)>,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never prints the password.
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("namespace", &String::from_utf8_lossy(&self.namespace))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls", &self.tls)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .finish()
    }
}

impl EtcdConfig {
    /// `endpoints` with the default namespace and deadlines, plaintext,
    /// without a user.
    #[must_use]
    pub fn new(endpoints: Vec<String>) -> Self {
        Self {
            endpoints,
            namespace: b"/ozone/".to_vec(),
            timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            tls: None,
            user: None,
        }
    }

    /// Sets the key prefix (for several clusters, or tests, on one etcd).
    #[must_use]
    pub fn with_namespace(mut self, namespace: impl Into<Vec<u8>>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// Talks TLS to the members (their endpoints are `https://`).
    #[must_use]
    pub fn with_tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Authenticates as etcd user `name`.
    #[must_use]
    pub fn with_user(mut self, name: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((name.into(), password.into()));
        self
    }

    /// The tonic endpoint of member `url`, checked against the TLS setting.
    fn endpoint(
        &self,
        url: &str,
        request_timeout: Option<Duration>,
    ) -> Result<Endpoint, StoreError> {
        let invalid = |reason: String| StoreError::InvalidEndpoint {
            endpoint: url.to_string(),
            reason,
        };
        let scheme = if self.tls.is_some() {
            "https://"
        } else {
            "http://"
        };
        if !url.starts_with(scheme) {
            return Err(invalid(format!(
                "expected {scheme}HOST:PORT ({})",
                if self.tls.is_some() {
                    "TLS is on"
                } else {
                    "TLS is off"
                }
            )));
        }
        let mut endpoint = Endpoint::from_shared(url.to_string())
            .map_err(|e| invalid(e.to_string()))?
            .connect_timeout(self.connect_timeout);
        match request_timeout {
            Some(t) => endpoint = endpoint.timeout(t),
            // Election calls have no deadline (a campaign waits as long as
            // another candidate leads), so a member that stops answering
            // without closing the connection (frozen, partitioned) is found
            // by HTTP/2 pings instead: the call then fails and is made again
            // elsewhere, rather than waiting for good.
            None => {
                endpoint = endpoint
                    .http2_keep_alive_interval(ELECTION_PING)
                    .keep_alive_timeout(ELECTION_PING_TIMEOUT)
                    .keep_alive_while_idle(false);
            }
        }
        if let Some(tls) = &self.tls {
            let mut config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&tls.ca_pem));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(cert, key));
            }
            endpoint = endpoint
                .tls_config(config)
                .map_err(|e| invalid(e.to_string()))?;
        }
        Ok(endpoint)
    }
}

/// Interval of the HTTP/2 pings on election channels while a call is open.
/// It must exceed etcd's `--grpc-keepalive-min-time` (5 s by default): a
/// client pinging more often is sent GOAWAY `too_many_pings` and cut off.
/// (etcd refuses pings on a connection with no call open at any interval,
/// so none are sent then.)
const ELECTION_PING: Duration = Duration::from_secs(10);
/// How long a ping may go unanswered before the connection counts as dead.
const ELECTION_PING_TIMEOUT: Duration = Duration::from_secs(5);

/// A client of the members at `endpoints` (all of the config's, or one of
/// them) with `config`'s TLS and user, each request bounded by
/// `request_timeout` (`None`: unbounded, for elections). Authenticates
/// before returning if the config names a user.
pub(crate) async fn connect_client(
    config: &EtcdConfig,
    endpoints: &[String],
    request_timeout: Option<Duration>,
) -> Result<Client, StoreError> {
    if endpoints.is_empty() {
        return Err(StoreError::InvalidEndpoint {
            endpoint: String::new(),
            reason: "no etcd endpoints".into(),
        });
    }
    let endpoints = endpoints
        .iter()
        .map(|url| config.endpoint(url, request_timeout))
        .collect::<Result<Vec<_>, _>>()?;
    let channel = tonic::transport::Channel::balance_list(endpoints.into_iter());
    let mut options = ConnectOptions::new();
    if let Some((name, password)) = &config.user {
        options = options.with_user(name.clone(), password.clone());
    }
    let authenticate = Client::from_channel(etcd_client::Channel::Tonic(channel), Some(options));
    // Authentication is a call: bound it like one.
    let deadline = request_timeout.unwrap_or(config.timeout);
    tokio::time::timeout(deadline, authenticate)
        .await
        .map_err(|_| StoreError::Timeout(deadline))?
        .map_err(StoreError::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_must_match_the_tls_setting() {
        let plain = EtcdConfig::new(vec![]);
        assert!(plain.endpoint("http://127.0.0.1:2379", None).is_ok());
        assert!(matches!(
            plain.endpoint("https://127.0.0.1:2379", None),
            Err(StoreError::InvalidEndpoint { .. })
        ));
        assert!(matches!(
            plain.endpoint("127.0.0.1:2379", None),
            Err(StoreError::InvalidEndpoint { .. })
        ));
        let ca = minicluster::tls::ThrowawayCa::new("test CA").expect("CA");
        let tls = plain.with_tls(EtcdTls::new(ca.pem().as_bytes().to_vec()));
        assert!(tls.endpoint("https://127.0.0.1:2379", None).is_ok());
        assert!(matches!(
            tls.endpoint("http://127.0.0.1:2379", None),
            Err(StoreError::InvalidEndpoint { .. })
        ));
    }

    #[test]
    fn debug_output_hides_secrets() {
        let c = EtcdConfig::new(vec![]).with_user("om", "hunter2").with_tls(
            EtcdTls::new(b"ca".to_vec()).with_identity(b"cert".to_vec(), b"KEY".to_vec()),
        );
        let shown = format!("{c:?}");
        assert_eq!(
            shown,
            "EtcdConfig { endpoints: [], namespace: \"/ozone/\", timeout: 5s, \
             connect_timeout: 3s, tls: Some(EtcdTls { ca_pem_bytes: 2, identity: true }), \
             user: Some(\"om\") }"
        );
    }
}
