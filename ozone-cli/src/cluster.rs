//! Which cluster a command talks to: `--om HOST:PORT` (or `OZONE_OM_ADDRESS`),
//! else the om named in a minicluster's `cluster.json` — in `--data-dir DIR`,
//! or in `target/minicluster` of the current directory or a parent (where
//! `cargo xtask minicluster` writes it).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ec_client::{Client, ClientConfig, ClientError};
use minicluster::ClusterInfo;

/// Where `cargo xtask minicluster` keeps its data and `cluster.json`, relative
/// to the workspace root.
pub const DEFAULT_DATA_DIR: &str = "target/minicluster";

/// The cluster options every command takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Target {
    /// The om, HOST:PORT. Default: $OZONE_OM_ADDRESS, else the om in the
    /// minicluster's cluster.json.
    #[arg(
        long,
        global = true,
        env = "OZONE_OM_ADDRESS",
        value_name = "HOST:PORT"
    )]
    pub om: Option<String>,
    /// A minicluster's data directory (as given to `cargo xtask minicluster
    /// --data-dir`), whose cluster.json names the om. Default:
    /// target/minicluster in this directory or the nearest parent that has one.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Where an om address came from (error messages differ).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OmSource {
    /// `--om` or `OZONE_OM_ADDRESS`.
    Given,
    /// The `cluster.json` of this data directory.
    ClusterFile(PathBuf),
}

impl Target {
    /// A target with `--data-dir DIR` only.
    #[must_use]
    pub fn data_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            om: None,
            data_dir: Some(dir.into()),
        }
    }

    /// The minicluster data directory: `--data-dir`, else the nearest
    /// `target/minicluster` holding a `cluster.json` from the current
    /// directory up.
    ///
    /// # Errors
    /// When there is none, saying how to start one or pass `--om`.
    pub fn cluster_dir(&self) -> anyhow::Result<PathBuf> {
        if let Some(d) = &self.data_dir {
            return Ok(d.clone());
        }
        let cwd = std::env::current_dir().context("reading the current directory")?;
        for dir in cwd.ancestors() {
            let candidate = dir.join(DEFAULT_DATA_DIR);
            if candidate.join("cluster.json").is_file() {
                return Ok(candidate);
            }
        }
        bail!(
            "no running minicluster found (no {DEFAULT_DATA_DIR}/cluster.json here or in a parent \
             directory): start one with `cargo xtask minicluster`, or pass --om HOST:PORT \
             (or set OZONE_OM_ADDRESS)"
        )
    }

    /// The minicluster's `cluster.json`.
    ///
    /// # Errors
    /// A missing or unreadable file, worded for a person.
    pub fn cluster_info(&self) -> anyhow::Result<ClusterInfo> {
        let dir = self.cluster_dir()?;
        read_cluster_file(&dir)
    }

    /// The om address to use and where it came from.
    ///
    /// # Errors
    /// As [`cluster_info`](Self::cluster_info) when no `--om` is given.
    pub fn om_address(&self) -> anyhow::Result<(String, OmSource)> {
        if let Some(om) = &self.om {
            return Ok((om.clone(), OmSource::Given));
        }
        let dir = self.cluster_dir()?;
        Ok((read_cluster_file(&dir)?.om, OmSource::ClusterFile(dir)))
    }

    /// A client of the target's om.
    ///
    /// # Errors
    /// A bad address; an om that does not answer — for a minicluster's
    /// address, saying that the cluster is not running and how to start it.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let (om, source) = self.om_address()?;
        match Client::connect(&om, ClientConfig::default()).await {
            Ok(c) => Ok(c),
            Err(ClientError::Connect { message, .. }) => match source {
                OmSource::ClusterFile(dir) => bail!(
                    "the cluster in {} is not running (its om at {om} does not answer: \
                     {message}); start it with `cargo xtask minicluster --data-dir {}`",
                    dir.display(),
                    dir.display()
                ),
                OmSource::Given => bail!("the om at {om} does not answer: {message}"),
            },
            Err(e) => Err(e.into()),
        }
    }
}

/// Reads `dir/cluster.json`.
fn read_cluster_file(dir: &Path) -> anyhow::Result<ClusterInfo> {
    let path = dir.join("cluster.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is `cargo xtask minicluster --data-dir {}` running? or pass --om)",
            path.display(),
            dir.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}
