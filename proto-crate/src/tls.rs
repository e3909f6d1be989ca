//! TLS on every gRPC channel: the cluster's trust root and a process's own
//! certificate, loaded once from PEM files and turned into tonic's server and
//! client settings (rustls underneath).
//!
//! The model is Ozone's with its own CA (`hdds.grpc.tls.enabled`): one
//! cluster CA signs every service certificate; clients trust that CA; the om
//! and datanodes ask connecting peers for a certificate too, and accept a
//! connection without one (a client reading keys has none), so a handler can
//! tell a cluster member (a verified certificate, [`peer_is_verified`]) from
//! anyone else. The om answers `RegisterDatanode`, `Heartbeat` and
//! `BlockReport` — which hand out block-token secrets — only to a verified
//! peer: mutual TLS between datanodes and the om.
//!
//! Server names: a client checks the server's certificate against the host
//! of the address it dials (`HOST:PORT`), an IP address or a DNS name, as
//! RFC 6125 says; certificates therefore name every address a service is
//! reached by (`cargo xtask minicluster --tls` names `localhost`,
//! `127.0.0.1` and `::1`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// Why TLS settings could not be loaded or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file named on the command line or in the configuration.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file held no certificate or key of the kind expected, or a
    /// malformed one.
    #[error("{what}: {message}")]
    Pem {
        /// Which file or item (`CA certificate /x/ca.pem`).
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// A certificate and a key were needed together and only one was given.
    #[error("a TLS certificate and its private key go together: {0}")]
    Incomplete(&'static str),
    /// A server needs its own certificate and key.
    #[error("serving TLS needs this process's certificate and key (--tls-cert, --tls-key)")]
    NoIdentity,
    /// The address could not be made into an endpoint.
    #[error("address `{address}`: {message}")]
    Address {
        /// `HOST:PORT` as given.
        address: String,
        /// What tonic said.
        message: String,
    },
}

/// The `--tls-ca`, `--tls-cert` and `--tls-key` flags every binary takes
/// (om, datanode, s3-gateway, ozone, xtask). `--tls-ca` turns TLS on; the
/// certificate and key are this process's own (a server's identity, a
/// client's certificate for mutual TLS).
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct TlsArgs {
    /// PEM file of the cluster's CA: turns TLS on for every gRPC channel
    /// (servers and clients trust only certificates it signed).
    #[cfg_attr(feature = "cli", arg(long, value_name = "PEM"))]
    pub tls_ca: Option<PathBuf>,
    /// PEM file of this process's certificate (signed by the CA; with
    /// `--tls-key`). Servers need one; a client that has one presents it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PEM", requires = "tls_ca"))]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the private key of `--tls-cert` (PKCS#8, PKCS#1 or SEC1).
    #[cfg_attr(feature = "cli", arg(long, value_name = "PEM", requires = "tls_cert"))]
    pub tls_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The settings the flags name: `None` without `--tls-ca` (plaintext).
    ///
    /// # Errors
    /// [`TlsError`]: a file that cannot be read or holds no valid PEM
    /// certificate or key, a certificate without its key or the reverse, or
    /// a certificate without `--tls-ca`.
    pub fn load(&self) -> Result<Option<TlsConfig>, TlsError> {
        let identity = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            (None, None) => None,
            (Some(_), None) => return Err(TlsError::Incomplete("--tls-cert without --tls-key")),
            (None, Some(_)) => return Err(TlsError::Incomplete("--tls-key without --tls-cert")),
        };
        match &self.tls_ca {
            Some(ca) => TlsConfig::load(ca, identity).map(Some),
            None if identity.is_some() => Err(TlsError::Incomplete(
                "--tls-cert needs --tls-ca (the CA that signed it)",
            )),
            None => Ok(None),
        }
    }
}

/// A process's TLS settings: the CA it trusts and, optionally, its own
/// certificate chain and key. Cheap to clone (the PEM bytes are shared).
#[derive(Clone)]
pub struct TlsConfig {
    ca_pem: Arc<[u8]>,
    identity: Option<(Arc<[u8]>, Arc<[u8]>)>,
}

impl std::fmt::Debug for TlsConfig {
    /// Never prints the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field("ca_bytes", &self.ca_pem.len())
            .field("has_identity", &self.identity.is_some())
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Checks `pem` holds at least one well-formed certificate.
fn check_certificates(pem: &[u8], what: &str) -> Result<(), TlsError> {
    let mut n = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| TlsError::Pem {
            what: what.to_string(),
            message: e.to_string(),
        })?;
        n += 1;
    }
    if n == 0 {
        return Err(TlsError::Pem {
            what: what.to_string(),
            message: "no CERTIFICATE block".to_string(),
        });
    }
    Ok(())
}

impl TlsConfig {
    /// Settings from PEM text: `ca` (one or more CA certificates) and an
    /// optional identity (certificate chain, private key).
    ///
    /// # Errors
    /// [`TlsError::Pem`] when a certificate or the key is missing or malformed.
    pub fn from_pem(
        ca: impl Into<Vec<u8>>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self, TlsError> {
        let ca = ca.into();
        check_certificates(&ca, "CA certificate")?;
        if let Some((cert, key)) = &identity {
            check_certificates(cert, "certificate")?;
            PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Pem {
                what: "private key".to_string(),
                message: e.to_string(),
            })?;
        }
        Ok(Self {
            ca_pem: ca.into(),
            identity: identity.map(|(c, k)| (c.into(), k.into())),
        })
    }

    /// Settings from PEM files: the CA at `ca` and an optional (certificate,
    /// key) pair of files.
    ///
    /// # Errors
    /// [`TlsError::Read`] for a file that cannot be read; [`TlsError::Pem`]
    /// naming the file whose contents are not what they should be.
    pub fn load(ca: &Path, identity: Option<(&Path, &Path)>) -> Result<Self, TlsError> {
        let named = |e: TlsError, path: &Path| match e {
            TlsError::Pem { what, message } => TlsError::Pem {
                what: format!("{what} {}", path.display()),
                message,
            },
            other => other,
        };
        let ca_pem = read(ca)?;
        check_certificates(&ca_pem, "CA certificate").map_err(|e| named(e, ca))?;
        let identity = match identity {
            Some((cert, key)) => {
                let c = read(cert)?;
                check_certificates(&c, "certificate").map_err(|e| named(e, cert))?;
                let k = read(key)?;
                PrivateKeyDer::from_pem_slice(&k).map_err(|e| TlsError::Pem {
                    what: format!("private key {}", key.display()),
                    message: e.to_string(),
                })?;
                Some((c, k))
            }
            None => None,
        };
        Self::from_pem(ca_pem, identity)
    }

    /// Whether this process has a certificate of its own.
    #[must_use]
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// The CA certificates, PEM.
    #[must_use]
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca_pem
    }

    /// This process's (certificate chain, private key), PEM, if it has one.
    #[must_use]
    pub fn identity_pem(&self) -> Option<(&[u8], &[u8])> {
        self.identity.as_ref().map(|(c, k)| (&c[..], &k[..]))
    }

    /// These settings without this process's own certificate: what a
    /// plain client of the cluster holds.
    #[must_use]
    pub fn without_identity(&self) -> Self {
        Self {
            ca_pem: Arc::clone(&self.ca_pem),
            identity: None,
        }
    }

    /// A gRPC server's settings: this process's certificate, and client
    /// certificates asked for, verified against the CA when given, and
    /// optional (see [`peer_is_verified`]).
    ///
    /// # Errors
    /// [`TlsError::NoIdentity`] without a certificate and key.
    pub fn server(&self) -> Result<ServerTlsConfig, TlsError> {
        let (cert, key) = self.identity.as_ref().ok_or(TlsError::NoIdentity)?;
        Ok(ServerTlsConfig::new()
            .identity(Identity::from_pem(&cert[..], &key[..]))
            .client_ca_root(Certificate::from_pem(&self.ca_pem[..]))
            .client_auth_optional(true))
    }

    /// A gRPC client's settings: the CA as the only trust root, and this
    /// process's certificate presented when it has one.
    #[must_use]
    pub fn client(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&self.ca_pem[..]));
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(&cert[..], &key[..])),
            None => config,
        }
    }
}

impl TlsConfig {
    /// An HTTPS acceptor (the S3 gateway's): this process's certificate,
    /// no client certificates asked for, ALPN `h2` and `http/1.1`.
    ///
    /// # Errors
    /// [`TlsError::NoIdentity`] without a certificate and key;
    /// [`TlsError::Pem`] if rustls refuses the pair (a key that does not
    /// match the certificate, an unsupported key type).
    pub fn https_acceptor(&self) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
        let (cert, key) = self.identity.as_ref().ok_or(TlsError::NoIdentity)?;
        let pem = |e: &dyn std::fmt::Display| TlsError::Pem {
            what: "HTTPS certificate".to_string(),
            message: e.to_string(),
        };
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| pem(&e))?;
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| pem(&e))?;
        let mut config = tokio_rustls::rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| pem(&e))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
    }
}

/// The endpoint of the gRPC server at `address` (`HOST:PORT`):
/// `https://HOST:PORT` with `tls`'s client settings, else `http://HOST:PORT`.
/// No I/O happens here.
///
/// # Errors
/// [`TlsError::Address`] if `address` does not make a URI.
pub fn endpoint(address: &str, tls: Option<&TlsConfig>) -> Result<Endpoint, TlsError> {
    let bad = |e: &dyn std::fmt::Display| TlsError::Address {
        address: address.to_string(),
        message: e.to_string(),
    };
    match tls {
        None => Endpoint::from_shared(format!("http://{address}")).map_err(|e| bad(&e)),
        Some(t) => Endpoint::from_shared(format!("https://{address}"))
            .map_err(|e| bad(&e))?
            .tls_config(t.client())
            .map_err(|e| bad(&e)),
    }
}

/// Whether the peer of `request` presented a certificate the server verified
/// against the cluster CA (a server running with [`TlsConfig::server`]).
/// Always false on a plaintext connection.
#[must_use]
pub fn peer_is_verified<T>(request: &tonic::Request<T>) -> bool {
    request.peer_certs().is_some_and(|certs| !certs.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> TlsArgs {
        TlsArgs {
            tls_ca: ca.map(Path::to_path_buf),
            tls_cert: cert.map(Path::to_path_buf),
            tls_key: key.map(Path::to_path_buf),
        }
    }

    #[test]
    fn no_ca_is_plaintext_and_half_an_identity_is_refused() {
        let p = Path::new("/nonexistent/x.pem");
        assert!(matches!(args(None, None, None).load(), Ok(None)));
        for (a, want) in [
            (args(Some(p), Some(p), None), "--tls-cert without --tls-key"),
            (args(Some(p), None, Some(p)), "--tls-key without --tls-cert"),
            (args(None, Some(p), Some(p)), "--tls-cert needs --tls-ca"),
        ] {
            let e = a.load().expect_err("refused");
            assert!(matches!(e, TlsError::Incomplete(_)), "{e:?}");
            assert!(e.to_string().contains(want), "{e}");
        }
    }

    #[test]
    fn unreadable_and_malformed_files_are_named() {
        let dir = std::env::temp_dir().join(format!("tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let missing = dir.join("missing.pem");
        let e = args(Some(&missing), None, None)
            .load()
            .expect_err("missing CA");
        assert!(matches!(e, TlsError::Read { .. }), "{e:?}");
        assert!(e.to_string().contains("missing.pem"), "{e}");

        let garbage = dir.join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").expect("write");
        let e = args(Some(&garbage), None, None)
            .load()
            .expect_err("no certificate");
        assert!(matches!(e, TlsError::Pem { .. }), "{e:?}");
        assert!(e.to_string().contains("garbage.pem"), "{e}");
        assert!(e.to_string().contains("no CERTIFICATE block"), "{e}");

        let broken = dir.join("broken.pem");
        std::fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let e = TlsConfig::load(&broken, None).expect_err("bad base64");
        assert!(matches!(e, TlsError::Pem { .. }), "{e:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_server_needs_an_identity_and_addresses_pick_the_scheme() {
        // A syntactically valid PEM block is enough for the checks here;
        // handshakes with real certificates are tested over loopback.
        let pem = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let t = TlsConfig::from_pem(pem, None).expect("config");
        assert!(!t.has_identity());
        assert!(matches!(t.server(), Err(TlsError::NoIdentity)));
        assert!(matches!(t.https_acceptor(), Err(TlsError::NoIdentity)));
        let e =
            TlsConfig::from_pem(pem, Some((pem.into(), b"no key".to_vec()))).expect_err("no key");
        assert!(e.to_string().contains("private key"), "{e}");
        let plain = endpoint("127.0.0.1:9862", None).expect("plain");
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("127.0.0.1:9862", Some(&t)).expect("tls");
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert!(matches!(
            endpoint("bad host:1", None),
            Err(TlsError::Address { .. })
        ));
        assert!(!format!("{t:?}").contains("AAAA"), "Debug prints no PEM");
    }
}
