//! Finding a running cluster: `--om ADDR`, else `target/minicluster/cluster.json`.

use std::path::PathBuf;

use anyhow::Context;
use minicluster::ClusterInfo;

/// Default location of `cluster.json`.
pub(crate) fn default_path() -> PathBuf {
    crate::workspace_root().join("target/minicluster/cluster.json")
}

/// Reads `cluster.json` at `path`.
pub(crate) fn read(path: &std::path::Path) -> anyhow::Result<ClusterInfo> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (is `cargo xtask minicluster` running? or pass --om)",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// The om address: `explicit` if given, else the one in the default `cluster.json`.
pub(crate) fn om_address(explicit: Option<String>) -> anyhow::Result<String> {
    match explicit {
        Some(a) => Ok(a),
        None => Ok(read(&default_path())?.om),
    }
}
