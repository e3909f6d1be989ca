//! A throwaway certificate authority for clusters run with TLS (`cargo xtask
//! minicluster --tls`, [`MiniClusterConfig::with_tls`](crate::MiniClusterConfig::with_tls),
//! the process cluster): a CA and the certificates it signs, made with rcgen
//! and written as PEM files into the cluster's data dir.
//!
//! Certificates have one of three [`Usage`]s: a cluster service's (the om
//! and datanodes: it serves, and a datanode presents it to the om, which
//! takes datanode calls only from a certificate naming the datanode's host),
//! an HTTPS server's (the S3 gateway: it cannot authenticate as a client, so
//! it can never speak for a datanode or an admin), and an admin's (a client
//! certificate naming no host: it can call admin RPCs but not register a
//! datanode). Service and HTTPS certificates name `localhost`, `127.0.0.1`
//! and `::1`, the addresses a loopback cluster is dialled at. On one machine
//! every datanode shares the host, so one service certificate serves them
//! all; on several hosts each gets its own.

use std::path::{Path, PathBuf};

use ec_client::TlsConfig;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use serde::{Deserialize, Serialize};

use crate::MiniClusterError;

/// TLS of a cluster in `cluster.json`: where its CA certificate is, for
/// clients (`ozone --tls-ca`, [`ec_client::ClientConfig::with_tls`],
/// `aws --ca-bundle`), and an admin credential (`ozone --tls-cert
/// --tls-key`) for the admin RPCs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TlsInfo {
    /// Absolute path of the CA certificate (PEM).
    pub ca: String,
    /// Absolute path of the admin's client certificate (PEM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_cert: Option<String>,
    /// Absolute path of its private key (PEM, mode 0600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_key: Option<String>,
}

/// What a certificate may be used for (its extended key usages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A cluster service (om, datanode): serverAuth and clientAuth.
    Service,
    /// An HTTPS server (the S3 gateway): serverAuth only.
    HttpsServer,
    /// An admin's client certificate: clientAuth only.
    Admin,
}

/// The names every service certificate carries.
pub const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// A CA that exists for one cluster: its key lives only in memory, so once
/// the process ends nothing more can be signed by it.
pub struct ThrowawayCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl std::fmt::Debug for ThrowawayCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThrowawayCa").finish_non_exhaustive()
    }
}

/// The PEM files of one certificate the CA issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedFiles {
    /// The CA certificate (what clients trust).
    pub ca: PathBuf,
    /// The certificate.
    pub cert: PathBuf,
    /// Its private key (PKCS#8).
    pub key: PathBuf,
}

fn tls_error(what: &str) -> impl Fn(rcgen::Error) -> MiniClusterError + '_ {
    move |e| MiniClusterError::Io {
        context: format!("making {what}"),
        source: std::io::Error::other(e),
    }
}

impl ThrowawayCa {
    /// A new CA whose certificate's common name is `name`.
    ///
    /// # Errors
    /// [`MiniClusterError::Io`] if key generation or signing fails.
    pub fn new(name: &str) -> Result<Self, MiniClusterError> {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(tls_error("the CA's parameters"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(tls_error("the CA's key"))?;
        let cert = params
            .self_signed(&key)
            .map_err(tls_error("the CA certificate"))?;
        Ok(Self {
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA certificate, PEM.
    #[must_use]
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// A new (certificate, private key) pair, PEM, for `names` (DNS names
    /// or IP addresses), used as `usage` says.
    ///
    /// # Errors
    /// [`MiniClusterError::Io`] if a name is not a valid DNS name or IP
    /// address, or key generation or signing fails.
    pub fn issue(
        &self,
        names: &[&str],
        usage: Usage,
    ) -> Result<(String, String), MiniClusterError> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
        let mut params =
            CertificateParams::new(names.clone()).map_err(tls_error("certificate parameters"))?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match usage {
            Usage::Service => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Usage::HttpsServer => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Admin => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        let key = KeyPair::generate().map_err(tls_error("a certificate key"))?;
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(tls_error("a certificate"))?;
        Ok((cert.pem(), key.serialize_pem()))
    }

    /// [`issue`](Self::issue)s a loopback service certificate and writes it
    /// under `dir` as `STEM.pem` and `STEM.key` (mode 0600), beside the CA
    /// as `ca.pem`.
    ///
    /// # Errors
    /// As [`issue`](Self::issue); I/O errors writing the files.
    pub fn write_loopback(&self, dir: &Path, stem: &str) -> Result<IssuedFiles, MiniClusterError> {
        self.write(dir, stem, &LOOPBACK_NAMES, Usage::Service)
    }

    /// [`issue`](Self::issue)s a certificate for `names` and `usage` and
    /// writes it as [`write_loopback`](Self::write_loopback) does.
    ///
    /// # Errors
    /// As [`issue`](Self::issue); I/O errors writing the files.
    pub fn write(
        &self,
        dir: &Path,
        stem: &str,
        names: &[&str],
        usage: Usage,
    ) -> Result<IssuedFiles, MiniClusterError> {
        std::fs::create_dir_all(dir).map_err(crate::io(format!("creating {}", dir.display())))?;
        let (cert, key) = self.issue(names, usage)?;
        let files = IssuedFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{stem}.pem")),
            key: dir.join(format!("{stem}.key")),
        };
        write(&files.ca, self.pem.as_bytes(), 0o644)?;
        write(&files.cert, cert.as_bytes(), 0o644)?;
        write(&files.key, key.as_bytes(), 0o600)?;
        Ok(files)
    }

    /// The settings of a process holding a new loopback service
    /// certificate of this CA (in memory; nothing is written).
    ///
    /// # Errors
    /// As [`issue`](Self::issue).
    pub fn loopback_config(&self) -> Result<TlsConfig, MiniClusterError> {
        let (cert, key) = self.issue(&LOOPBACK_NAMES, Usage::Service)?;
        TlsConfig::from_pem(self.pem.clone(), Some((cert.into(), key.into()))).map_err(|e| {
            MiniClusterError::Io {
                context: "loading a certificate just made".to_string(),
                source: std::io::Error::other(e),
            }
        })
    }
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), MiniClusterError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .map_err(crate::io(format!("writing {}", path.display())))?;
    f.write_all(bytes)
        .map_err(crate::io(format!("writing {}", path.display())))
}
