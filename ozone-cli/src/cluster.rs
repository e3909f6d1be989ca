//! Which cluster a command talks to: `--om HOST:PORT` (or `OZONE_OM_ADDRESS`),
//! else the om named in a minicluster's `cluster.json` — in `--data-dir DIR`,
//! or in `target/minicluster` of the current directory or a parent (where
//! `cargo xtask minicluster` writes it). TLS: `--tls-ca PEM` (or
//! `OZONE_TLS_CA`), else the CA a minicluster's `cluster.json` names.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ec_client::{Client, ClientConfig, ClientError, TlsConfig};
use minicluster::ClusterInfo;

/// Where `cargo xtask minicluster` keeps its data and `cluster.json`, relative
/// to the workspace root.
pub const DEFAULT_DATA_DIR: &str = "target/minicluster";

/// The cluster options every command takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Target {
    /// The om, HOST:PORT, or several oms that share their metadata,
    /// HOST:PORT,HOST:PORT,... (key and bucket commands fail over along
    /// the list; admin commands ask the first that answers, the
    /// ReplicationManager's status the one running it). Default:
    /// $OZONE_OM_ADDRESS, else the om in the minicluster's cluster.json.
    #[arg(
        long,
        global = true,
        env = "OZONE_OM_ADDRESS",
        value_name = "HOST:PORT[,HOST:PORT...]"
    )]
    pub om: Option<String>,
    /// A minicluster's data directory (as given to `cargo xtask minicluster
    /// --data-dir`), whose cluster.json names the om. Default:
    /// target/minicluster in this directory or the nearest parent that has one.
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// PEM file of the cluster's CA: talk to the om and datanodes over TLS,
    /// trusting only certificates it signed. Default: $OZONE_TLS_CA, else
    /// the CA named in the minicluster's cluster.json (when the om comes
    /// from there), else plaintext.
    #[arg(long, global = true, env = "OZONE_TLS_CA", value_name = "PEM")]
    pub tls_ca: Option<PathBuf>,
    /// PEM file of a client certificate the cluster CA signed (with
    /// --tls-key): the admin credential that `dn decommission`, `key
    /// add-replica` and fault injection need on a TLS cluster. Default:
    /// $OZONE_TLS_CERT, else the admin certificate a minicluster's
    /// cluster.json names.
    #[arg(
        long,
        global = true,
        env = "OZONE_TLS_CERT",
        value_name = "PEM",
        requires = "tls_key"
    )]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of the private key of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "OZONE_TLS_KEY",
        value_name = "PEM",
        requires = "tls_cert"
    )]
    pub tls_key: Option<PathBuf>,
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
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
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
        let (om, source, _) = self.resolve()?;
        Ok((om, source))
    }

    /// The TLS settings to talk to the target with: `--tls-ca`, else the
    /// CA of the minicluster whose om is used, else none (plaintext).
    ///
    /// # Errors
    /// As [`om_address`](Self::om_address); a CA file that cannot be read
    /// or holds no certificate.
    pub fn tls(&self) -> anyhow::Result<Option<TlsConfig>> {
        Ok(self.resolve()?.2)
    }

    /// The om address, where it came from, and the TLS settings: the
    /// flags' files, else (for a minicluster's om) those cluster.json names.
    fn resolve(&self) -> anyhow::Result<(String, OmSource, Option<TlsConfig>)> {
        let given = (self.tls_cert.as_deref()).zip(self.tls_key.as_deref());
        let load = |ca: &Path, identity: Option<(&Path, &Path)>| {
            TlsConfig::load(ca, identity)
                .with_context(|| format!("loading the TLS files (CA {})", ca.display()))
        };
        if let Some(om) = &self.om {
            let tls = match &self.tls_ca {
                Some(ca) => Some(load(ca, given)?),
                None => None,
            };
            return Ok((om.clone(), OmSource::Given, tls));
        }
        let dir = self.cluster_dir()?;
        let info = read_cluster_file(&dir)?;
        let from_file = info.tls.as_ref();
        let ca = self
            .tls_ca
            .clone()
            .or_else(|| from_file.map(|t| PathBuf::from(&t.ca)));
        let admin = from_file.and_then(|t| {
            Some((
                PathBuf::from(t.admin_cert.as_ref()?),
                PathBuf::from(t.admin_key.as_ref()?),
            ))
        });
        let identity = given.or_else(|| admin.as_ref().map(|(c, k)| (c.as_path(), k.as_path())));
        let tls = match ca {
            Some(ca) => Some(load(&ca, identity)?),
            None => None,
        };
        Ok((info.om, OmSource::ClusterFile(dir), tls))
    }

    /// A client of the target's om admin service (TLS as [`tls`](Self::tls),
    /// presenting the admin certificate when there is one). Of a list of
    /// oms (one store on etcd, every om serving), the first that answers
    /// ([`serving_om`](Self::serving_om)).
    ///
    /// # Errors
    /// As [`tls`](Self::tls); no om of the list that answers.
    pub async fn om_admin(&self) -> anyhow::Result<om::OmAdminClient> {
        Ok(self.serving_om().await?.1)
    }

    /// The target's om (`HOST:PORT`) and an admin client of it: of a list, the
    /// first om that answers an admin call (RepairStatus, `NOT_LEADER`
    /// included: that om serves every other call).
    ///
    /// # Errors
    /// As [`tls`](Self::tls); no om of the list that answers (each named with
    /// why).
    pub async fn serving_om(&self) -> anyhow::Result<(String, om::OmAdminClient)> {
        self.find_om(false).await
    }

    /// The target's om (`HOST:PORT`) for calls that only the om running the
    /// background services answers (the ReplicationManager's status), and an
    /// admin client of it: of a list, the first om that answers an admin call
    /// (RepairStatus) with anything but `NOT_LEADER` or no answer.
    ///
    /// # Errors
    /// As [`tls`](Self::tls); no om of the list that leads (each named
    /// with why).
    pub async fn leading_om(&self) -> anyhow::Result<(String, om::OmAdminClient)> {
        self.find_om(true).await
    }

    /// The first om of the target's list that answers RepairStatus, taking a
    /// `NOT_LEADER` answer as one when `leading` is false.
    async fn find_om(&self, leading: bool) -> anyhow::Result<(String, om::OmAdminClient)> {
        let (list, _, tls) = self.resolve()?;
        let oms: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .collect();
        if let [om] = oms.as_slice() {
            let admin = om::OmAdminClient::connect(om, tls.as_ref())
                .await
                .with_context(|| format!("connecting to the om at {om}"))?;
            return Ok(((*om).to_string(), admin));
        }
        // Each om gets a bounded time: one that drops packets or is frozen
        // must not stall the command.
        const ASK: std::time::Duration = std::time::Duration::from_secs(5);
        let mut why = Vec::new();
        for om in oms {
            let connected = tokio::time::timeout(ASK, om::OmAdminClient::connect(om, tls.as_ref()));
            let mut admin = match connected.await {
                Ok(Ok(a)) => a,
                Ok(Err(e)) => {
                    why.push(format!("{om}: {e}"));
                    continue;
                }
                Err(_) => {
                    why.push(format!("{om}: no connection within {ASK:?}"));
                    continue;
                }
            };
            let Ok(answer) = tokio::time::timeout(ASK, admin.repair_status()).await else {
                why.push(format!("{om}: no answer within {ASK:?}"));
                continue;
            };
            match answer {
                Err(e)
                    if e.om_code == proto_crate::OmErrorCode::Unavailable
                        || (leading && e.om_code == proto_crate::OmErrorCode::NotLeader) =>
                {
                    why.push(format!("{om}: {}", e.message));
                }
                // It serves (a refusal of this call is the command's to report).
                _ => return Ok((om.to_string(), admin)),
            }
        }
        if leading {
            bail!(
                "no om of {list} runs the background services now: {}",
                why.join("; ")
            )
        }
        bail!("no om of {list} answers: {}", why.join("; "))
    }

    /// A client of the om admin service of the minicluster whose
    /// `cluster.json` is `info` (commands that name its datanodes by
    /// position), with its TLS files — or the flags' — when it runs TLS.
    /// Refuses a `--om` that names another om: the datanode ids would not
    /// be that om's.
    ///
    /// # Errors
    /// A `--om` other than `info.om`; as [`om_admin`](Self::om_admin).
    pub async fn minicluster_om_admin(
        &self,
        info: &ClusterInfo,
    ) -> anyhow::Result<om::OmAdminClient> {
        if let Some(om) = self
            .om
            .as_ref()
            .filter(|om| **om != info.om && !info.oms.contains(om))
        {
            bail!(
                "--om {om} is not the om of the minicluster whose datanodes are numbered here \
                 ({}); drop --om",
                info.om
            );
        }
        Self {
            om: None,
            ..self.clone()
        }
        .om_admin()
        .await
    }

    /// A client of the target's om.
    ///
    /// # Errors
    /// A bad address; an om that does not answer — for a minicluster's
    /// address, saying that the cluster is not running and how to start it.
    pub async fn client(&self) -> anyhow::Result<Client> {
        let (om, source, tls) = self.resolve()?;
        match Client::connect(&om, ClientConfig::default().with_tls(tls.clone())).await {
            Ok(c) => Ok(c),
            Err(ClientError::Connect { message, .. }) => match source {
                OmSource::ClusterFile(dir) => bail!(
                    "the cluster in {} is not running (its om at {om} does not answer: \
                     {message}); start it with `cargo xtask minicluster --data-dir {}`",
                    dir.display(),
                    dir.display()
                ),
                OmSource::Given if tls.is_none() => bail!(
                    "the om at {om} does not answer: {message} (if the cluster runs with TLS, \
                     pass --tls-ca PEM)"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_datanode_command_refuses_another_clusters_om() {
        let info = ClusterInfo {
            om: "127.0.0.1:41234".to_string(),
            oms: Vec::new(),
            datanodes: Vec::new(),
            control: None,
            s3: None,
            metrics: None,
            block_tokens: false,
            tls: None,
            pids: None,
        };
        let target = Target {
            om: Some("127.0.0.1:1".to_string()),
            ..Target::default()
        };
        let e = target
            .minicluster_om_admin(&info)
            .await
            .expect_err("another om");
        assert!(
            e.to_string().contains("is not the om of the minicluster"),
            "{e}"
        );
    }

    /// Of a list, an admin command asks each om in turn and names each one's failure.
    #[tokio::test]
    async fn an_admin_command_asks_each_om_of_a_list() {
        let target = Target {
            om: Some("127.0.0.1:1,127.0.0.1:2".to_string()),
            ..Target::default()
        };
        let e = target.om_admin().await.expect_err("none answers");
        let said = e.to_string();
        assert!(
            said.contains("no om of 127.0.0.1:1,127.0.0.1:2 answers")
                && said.contains("127.0.0.1:1:")
                && said.contains("127.0.0.1:2:"),
            "{said}"
        );
        let e = target.leading_om().await.expect_err("none answers");
        let said = e.to_string();
        assert!(
            said.contains("no om of 127.0.0.1:1,127.0.0.1:2 runs the background services now"),
            "{said}"
        );
    }
}
