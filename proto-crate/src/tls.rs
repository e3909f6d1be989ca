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
    /// A certificate was given without the CA that signed it.
    #[error("--tls-cert needs --tls-ca (the CA that signed it)")]
    NoCa,
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
            None if identity.is_some() => Err(TlsError::NoCa),
            None => Ok(None),
        }
    }
}

/// A process's TLS settings: the CA it trusts and, optionally, its own
/// certificate chain and key. Cheap to clone (the PEM bytes are shared).
#[derive(Clone)]
pub struct TlsConfig {
    ca_pem: Arc<[u8]>,
    identity: Option<PemIdentity>,
}

/// A certificate chain and its private key, PEM.
type PemIdentity = (Arc<[u8]>, Arc<[u8]>);

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

/// The certificates in `pem`, at least one.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |message: String| TlsError::Pem {
        what: what.to_string(),
        message,
    };
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no CERTIFICATE block".to_string()));
    }
    Ok(certs)
}

/// Checks `pem` holds CA certificates rustls can use as trust anchors.
fn check_ca(pem: &[u8], what: &str) -> Result<(), TlsError> {
    let mut roots = tokio_rustls::rustls::RootCertStore::empty();
    for cert in certificates(pem, what)? {
        roots.add(cert).map_err(|e| TlsError::Pem {
            what: what.to_string(),
            message: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(())
}

/// Checks `cert` and `key` parse and belong together.
fn check_identity(cert: &[u8], key: &[u8], what: &str) -> Result<(), TlsError> {
    let bad = |message: String| TlsError::Pem {
        what: what.to_string(),
        message,
    };
    let chain = certificates(cert, what)?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        bad(format!(
            "no usable private key ({e}): expected an unencrypted PKCS#8, PKCS#1 or SEC1 PEM block"
        ))
    })?;
    tokio_rustls::rustls::sign::CertifiedKey::from_der(chain, key, &provider())
        .map_err(|e| bad(format!("the private key does not fit the certificate: {e}")))?;
    Ok(())
}

/// The one crypto provider of the workspace (aws-lc-rs), named explicitly so
/// that no process-wide default is needed.
fn provider() -> tokio_rustls::rustls::crypto::CryptoProvider {
    tokio_rustls::rustls::crypto::aws_lc_rs::default_provider()
}

/// Longest a TLS handshake may take, on servers and clients alike: a peer
/// that stalls it holds a connection for at most this long.
pub const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl TlsConfig {
    /// Settings from PEM text: `ca` (one or more CA certificates) and an
    /// optional identity (certificate chain, leaf first, and its private key).
    /// Checked here, not at the first handshake: every CA certificate must
    /// be usable as a trust anchor, and the key must parse and be the
    /// certificate's.
    ///
    /// # Errors
    /// [`TlsError::Pem`] naming what is missing, malformed or mismatched.
    pub fn from_pem(
        ca: impl Into<Vec<u8>>,
        identity: Option<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Self, TlsError> {
        let ca = ca.into();
        check_ca(&ca, "CA certificate")?;
        if let Some((cert, key)) = &identity {
            check_identity(cert, key, "certificate and key")?;
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
        check_ca(&ca_pem, "CA certificate").map_err(|e| named(e, ca))?;
        let identity = match identity {
            Some((cert, key)) => {
                let (c, k) = (read(cert)?, read(key)?);
                check_identity(&c, &k, "certificate and key").map_err(|e| match e {
                    TlsError::Pem { what, message } => TlsError::Pem {
                        what: format!("{what} {} and {}", cert.display(), key.display()),
                        message,
                    },
                    other => other,
                })?;
                Some((c, k))
            }
            None => None,
        };
        Ok(Self {
            ca_pem: ca_pem.into(),
            identity: identity.map(|(c, k)| (c.into(), k.into())),
        })
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
            .client_auth_optional(true)
            .timeout(HANDSHAKE_TIMEOUT))
    }

    /// A gRPC client's settings: the CA as the only trust root, and this
    /// process's certificate presented when it has one.
    #[must_use]
    pub fn client(&self) -> ClientTlsConfig {
        let config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem[..]))
            .timeout(HANDSHAKE_TIMEOUT);
        match &self.identity {
            Some((cert, key)) => config.identity(Identity::from_pem(&cert[..], &key[..])),
            None => config,
        }
    }
}

impl TlsConfig {
    /// An HTTPS acceptor (the S3 gateway's): this process's certificate,
    /// no client certificates asked for, ALPN `http/1.1` only.
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
        let mut config =
            tokio_rustls::rustls::ServerConfig::builder_with_provider(Arc::new(provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| pem(&e))?
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .map_err(|e| pem(&e))?;
        // HTTP/1.1 only, the protocol of the S3 REST API's requests (Amazon S3 API
        // Reference, "Making requests"): the gateway serves nothing else.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
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

/// The DNS name an S3 gateway's client certificate carries (its only name):
/// the om tells S3 secrets to a peer whose certificate names it, and to no
/// other (not to a datanode's or an admin's).
pub const S3_GATEWAY_NAME: &str = "s3-gateway";

/// Whether the peer of `request` presented a certificate the server verified
/// against the cluster CA (a server running with [`TlsConfig::server`]:
/// rustls refuses the handshake of a peer whose certificate does not
/// verify, so any certificate seen here did). Always false on a plaintext
/// connection, and on a listener other than TCP (tonic records peer
/// certificates with TCP connection info only).
#[must_use]
pub fn peer_is_verified<T>(request: &tonic::Request<T>) -> bool {
    request.peer_certs().is_some_and(|certs| !certs.is_empty())
}

/// Whether the peer of `request` presented a verified certificate (see
/// [`peer_is_verified`]) that names the host of `address` (`HOST:PORT`; an
/// IP address or DNS name, matched as RFC 6125 says): how the om binds a
/// datanode's certificate to the address it registers. A certificate that
/// names other hosts cannot speak for a datanode on this one.
#[must_use]
pub fn peer_names_host<T>(request: &tonic::Request<T>, address: &str) -> bool {
    request
        .peer_certs()
        .is_some_and(|certs| certificate_names_host(&certs, address))
}

/// Whether the first of `chain` (a verified peer's certificates, leaf
/// first, as [`tonic::Request::peer_certs`] gives them) names the host of
/// `address`; see [`peer_names_host`]. False for an empty chain.
#[must_use]
pub fn certificate_names_host(chain: &[CertificateDer<'_>], address: &str) -> bool {
    let Some(leaf) = chain.first() else {
        return false;
    };
    let host = address
        .rsplit_once(':')
        .map_or(address, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    let Ok(name) = rustls_pki_types::ServerName::try_from(host) else {
        return false;
    };
    webpki::EndEntityCert::try_from(leaf)
        .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
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
        ] {
            let e = a.load().expect_err("refused");
            assert!(matches!(e, TlsError::Incomplete(_)), "{e:?}");
            assert!(e.to_string().contains(want), "{e}");
        }
        let e = args(None, Some(p), Some(p)).load().expect_err("no CA");
        assert!(matches!(e, TlsError::NoCa), "{e:?}");
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

    /// A CA, and a loopback certificate it signed with its key (PEM).
    fn ca_and_leaf() -> (String, String, String) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("key");
        let ca_pem = ca.self_signed(&ca_key).expect("CA").pem();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("params");
        let key = KeyPair::generate().expect("key");
        let cert = leaf.signed_by(&key, &issuer).expect("leaf");
        (ca_pem, cert.pem(), key.serialize_pem())
    }

    #[test]
    fn certificates_and_keys_are_checked_when_loaded() {
        let (ca, cert, key) = ca_and_leaf();
        let t = TlsConfig::from_pem(ca.clone(), None).expect("CA only");
        assert!(!t.has_identity());
        assert!(matches!(t.server(), Err(TlsError::NoIdentity)));
        assert!(matches!(t.https_acceptor(), Err(TlsError::NoIdentity)));
        let t = TlsConfig::from_pem(ca.clone(), Some((cert.clone().into(), key.clone().into())))
            .expect("with identity");
        assert!(t.server().is_ok());
        assert!(t.https_acceptor().is_ok());
        assert!(!format!("{t:?}").contains("PRIVATE"), "Debug prints no key");

        // Another key than the certificate's.
        let (_, _, other_key) = ca_and_leaf();
        let e = TlsConfig::from_pem(ca.clone(), Some((cert.clone().into(), other_key.into())))
            .expect_err("mismatched key");
        assert!(e.to_string().contains("does not fit"), "{e}");
        // No key at all.
        let e = TlsConfig::from_pem(ca.clone(), Some((cert.into(), b"no key".to_vec())))
            .expect_err("no key");
        assert!(e.to_string().contains("unencrypted PKCS#8"), "{e}");
        // A PEM block that is not a certificate rustls can anchor trust in.
        let fake = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = TlsConfig::from_pem(fake, None).expect_err("not a certificate");
        assert!(e.to_string().contains("not a usable CA certificate"), "{e}");
    }

    #[test]
    fn addresses_pick_the_scheme() {
        let (ca, _, _) = ca_and_leaf();
        let t = TlsConfig::from_pem(ca, None).expect("config");
        let plain = endpoint("127.0.0.1:9862", None).expect("plain");
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let tls = endpoint("127.0.0.1:9862", Some(&t)).expect("tls");
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        assert!(matches!(
            endpoint("bad host:1", None),
            Err(TlsError::Address { .. })
        ));
    }
}
