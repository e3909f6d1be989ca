//! What `cluster.json` says of a running cluster: the addresses of its om,
//! datanodes, control service and S3 gateway, its `/metrics` URLs, and its
//! security (block tokens, the TLS CA). Written by `cargo xtask minicluster`
//! and the process cluster; read by `ozone`, `cargo xtask` and scripts.

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::tls::TlsInfo;
use crate::{MiniCluster, MiniClusterError, io};

/// Addresses of a running cluster, as written to `cluster.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ClusterInfo {
    /// `HOST:PORT` of the om; with several, every om's, comma-separated
    /// (what `--om` takes).
    pub om: String,
    /// Each om's `HOST:PORT`, when a process cluster runs several (all
    /// serve; one runs the background services); absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub oms: Vec<String>,
    /// Datanodes in cluster order (the N of `cargo xtask dn ... N`).
    pub datanodes: Vec<DatanodeInfo>,
    /// `HOST:PORT` of the control service (stop/start datanodes), when served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// The S3 gateway, when one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Info>,
    /// The `/metrics` URLs (Prometheus text format) of each process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsInfo>,
    /// Whether the om hands out block tokens and datanodes require them
    /// (security on). Absent in files of older versions: read as false.
    #[serde(default)]
    pub block_tokens: bool,
    /// TLS on every gRPC channel (and HTTPS on the gateway), when on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsInfo>,
    /// Process ids, when the cluster runs as separate processes (`cargo
    /// xtask cluster --processes`); absent for an in-process minicluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<ProcessIds>,
}

/// Process ids of a cluster of separate processes, in `cluster.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessIds {
    /// Each om's, in start order.
    pub oms: Vec<u32>,
    /// Each datanode's, in cluster order.
    pub datanodes: Vec<u32>,
    /// The S3 gateway's, when one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<u32>,
    /// Each local etcd member's, when the oms keep their metadata on etcd.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd: Vec<u32>,
}

/// Where each process of a cluster serves `/metrics`, in `cluster.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct MetricsInfo {
    /// The om's.
    pub om: String,
    /// Each datanode's, in cluster order.
    pub datanodes: Vec<String>,
    /// The S3 gateway's, when one runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<String>,
}

/// The S3 gateway of a cluster in `cluster.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct S3Info {
    /// `http://HOST:PORT`, or `https://HOST:PORT` when the cluster runs
    /// with TLS (clients trust [`ClusterInfo::tls`]'s CA: `aws --ca-bundle`).
    pub endpoint: String,
    /// Access key to sign with.
    pub access_key: String,
    /// Secret key to sign with.
    pub secret_key: String,
}

/// Access key of the minicluster's S3 gateway.
pub const S3_ACCESS_KEY: &str = "minicluster";
/// Secret key of the minicluster's S3 gateway.
pub const S3_SECRET_KEY: &str = "minicluster-secret";

/// One datanode in `cluster.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct DatanodeInfo {
    /// Uuid.
    pub id: String,
    /// `HOST:PORT`.
    pub address: String,
}

impl MiniCluster {
    /// Writes `info` (see [`info`](Self::info)) as pretty JSON to `path`,
    /// creating parent dirs.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_cluster_json(info: &ClusterInfo, path: &Path) -> Result<(), MiniClusterError> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        let json = serde_json::to_string_pretty(info)
            .map_err(|e| io("encoding cluster.json")(std::io::Error::other(e)))?;
        std::fs::write(path, json).map_err(io(format!("writing {}", path.display())))
    }
}
