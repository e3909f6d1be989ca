//! [`LocalEtcd`]: etcd members started as processes on loopback, for tests
//! and local clusters. Runs the `etcd` binary of the system package
//! (Debian: `etcd-server`), or the one `ETCD_BIN` names.
//!
//! Each member listens on two ports of 127.0.0.1 (client and peer), found by
//! binding port 0 and releasing them all just before the members bind them; its data and
//! its log (`member-N.log`) live in a directory of the caller's. Members are
//! killed when the handle drops.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// Errors of starting and stopping local etcd members.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalEtcdError {
    /// The etcd binary could not be run.
    #[error("cannot run {binary:?} (install Debian's etcd-server, or set ETCD_BIN): {source}")]
    Spawn {
        /// The binary tried.
        binary: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A member did not serve within the deadline, or exited.
    #[error("etcd member {member} did not start: {reason}; its log ends:\n{log}")]
    NotReady {
        /// Member number.
        member: usize,
        /// What was seen.
        reason: String,
        /// The last lines of its log.
        log: String,
    },
    /// Files or ports of the members.
    #[error("local etcd: {0}")]
    Io(#[from] std::io::Error),
    /// No member with that number.
    #[error("no etcd member {0}")]
    NoMember(usize),
    /// Setting up the members (users, roles) failed.
    #[error("local etcd set-up: {0}")]
    Store(#[from] crate::StoreError),
}

/// How long a member may take to serve after it starts.
const READY_DEADLINE: Duration = Duration::from_secs(30);

struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// PEM files of local members' TLS.
#[derive(Debug, Clone)]
pub struct LocalEtcdTls {
    /// The CA certificate: members trust only certificates it signed, on
    /// the client port and between members.
    pub ca: PathBuf,
    /// Every member's certificate (for 127.0.0.1; serverAuth and
    /// clientAuth: it is also each member's client certificate to its peers).
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
}

/// Settings of local members beyond etcd's defaults.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct LocalEtcdOptions {
    /// Each member's backend quota, bytes (`--quota-backend-bytes`; `None`:
    /// etcd's 2 GiB). Tests of a full store set it small.
    pub quota_backend_bytes: Option<u64>,
    /// TLS on the client and peer ports, with client certificates required
    /// on both (`--client-cert-auth`, `--peer-client-cert-auth`).
    pub tls: Option<LocalEtcdTls>,
    /// How long an idle auth token lives (`--auth-token-ttl`, whole
    /// seconds; etcd's default 300 s).
    pub auth_token_ttl: Option<Duration>,
}

impl LocalEtcdOptions {
    /// Turns TLS on with the files of `tls`.
    #[must_use]
    pub fn with_tls(mut self, tls: LocalEtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Sets how long an idle auth token lives.
    #[must_use]
    pub fn with_auth_token_ttl(mut self, ttl: Duration) -> Self {
        self.auth_token_ttl = Some(ttl);
        self
    }

    /// Sets each member's backend quota, bytes.
    #[must_use]
    pub fn with_quota_backend_bytes(mut self, bytes: u64) -> Self {
        self.quota_backend_bytes = Some(bytes);
        self
    }
}

/// A local etcd cluster of one or more members on loopback.
pub struct LocalEtcd {
    binary: String,
    initial_cluster: String,
    options: LocalEtcdOptions,
    members: Vec<Member>,
}

impl std::fmt::Debug for LocalEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEtcd")
            .field("endpoints", &self.endpoints())
            .finish_non_exhaustive()
    }
}

/// Whether a probe's answer shows the member serves: an answer, or an
/// authentication refusal (with auth on, the probe has no user: etcd says
/// "user name is empty", which it only says once it has read its data).
fn serving<T>(answer: Result<T, crate::StoreError>) -> bool {
    match answer {
        Ok(_) => true,
        Err(crate::StoreError::Etcd(etcd_client::Error::GRpcStatus(s))) => {
            s.message().contains("user name is empty")
        }
        Err(_) => false,
    }
}

/// A port of 127.0.0.1 that nothing listens on: bound on port 0 and held
/// (so that the next pick cannot get it too) until the caller drops it.
fn free_port(held: &mut Vec<std::net::TcpListener>) -> std::io::Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = l.local_addr()?.port();
    held.push(l);
    Ok(port)
}

impl LocalEtcd {
    /// Starts `members` (at least 1) etcd members as one new cluster, with
    /// their data under `dir`, and waits until every one serves.
    ///
    /// # Errors
    /// [`LocalEtcdError::Spawn`] if the binary cannot run;
    /// [`LocalEtcdError::NotReady`] if a member exits or does not serve
    /// within 30 s (its log's tail is in the error).
    pub async fn start(dir: &Path, members: usize) -> Result<Self, LocalEtcdError> {
        Self::start_with(dir, members, LocalEtcdOptions::default()).await
    }

    /// [`start`](Self::start) with `options`.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn start_with(
        dir: &Path,
        members: usize,
        options: LocalEtcdOptions,
    ) -> Result<Self, LocalEtcdError> {
        let binary = std::env::var("ETCD_BIN").unwrap_or_else(|_| "etcd".into());
        let mut list = Vec::new();
        // Every port stays bound until all are picked, then is released
        // just before the members bind them.
        let mut held = Vec::new();
        let scheme = if options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        for i in 0..members.max(1) {
            let data_dir = dir.join(format!("member-{i}"));
            std::fs::create_dir_all(&data_dir)?;
            list.push(Member {
                name: format!("m{i}"),
                client_url: format!("{scheme}://127.0.0.1:{}", free_port(&mut held)?),
                peer_url: format!("{scheme}://127.0.0.1:{}", free_port(&mut held)?),
                log: dir.join(format!("member-{i}.log")),
                data_dir,
                child: None,
            });
        }
        let initial_cluster = list
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        drop(held);
        let mut etcd = Self {
            binary,
            initial_cluster,
            options,
            members: list,
        };
        for i in 0..etcd.members.len() {
            etcd.spawn(i)?;
        }
        for i in 0..etcd.members.len() {
            etcd.wait_ready(i).await?;
        }
        Ok(etcd)
    }

    /// Client URLs of every member, running or not.
    #[must_use]
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// A store config for these members: their endpoints and, with TLS,
    /// their CA and the members' certificate as the client's own (the
    /// default namespace; no user).
    ///
    /// # Errors
    /// [`LocalEtcdError::Io`] if a TLS file cannot be read.
    pub fn config(&self) -> Result<crate::EtcdConfig, LocalEtcdError> {
        self.config_for(self.endpoints())
    }

    fn config_for(&self, endpoints: Vec<String>) -> Result<crate::EtcdConfig, LocalEtcdError> {
        let config = crate::EtcdConfig::new(endpoints);
        Ok(match &self.options.tls {
            None => config,
            Some(tls) => config.with_tls(
                crate::EtcdTls::new(std::fs::read(&tls.ca)?)
                    .with_identity(std::fs::read(&tls.cert)?, std::fs::read(&tls.key)?),
            ),
        })
    }

    /// Turns etcd's authentication on, as `etcdctl user add root`, `user
    /// grant-role root root` and `auth enable` would, and first adds each
    /// `(name, password, prefix)` of `users`: a user whose role of the same
    /// name may read and write the keys that start with `prefix`, nothing
    /// else.
    ///
    /// # Errors
    /// [`LocalEtcdError::Store`] if a member refuses (a user or role that
    /// exists) or cannot be reached; [`LocalEtcdError::Io`] for TLS files.
    pub async fn enable_auth(
        &self,
        root_password: &str,
        users: &[(&str, &str, &[u8])],
    ) -> Result<(), LocalEtcdError> {
        let config = self.config()?;
        let mut c =
            crate::etcd_config::connect_client(&config, &config.endpoints, Some(config.timeout))
                .await?;
        let e = crate::StoreError::from;
        for (name, password, prefix) in users {
            c.role_add(*name).await.map_err(e)?;
            let perm = etcd_client::Permission::read_write(prefix.to_vec()).with_prefix();
            c.role_grant_permission(*name, perm).await.map_err(e)?;
            c.user_add(*name, *password, None).await.map_err(e)?;
            c.user_grant_role(*name, *name).await.map_err(e)?;
        }
        c.role_add("root").await.map_err(e)?;
        c.user_add("root", root_password, None).await.map_err(e)?;
        c.user_grant_role("root", "root").await.map_err(e)?;
        c.auth_enable().await.map_err(e)?;
        Ok(())
    }

    /// Process ids of the running members.
    #[must_use]
    pub fn pids(&self) -> Vec<u32> {
        self.members
            .iter()
            .filter_map(|m| m.child.as_ref().and_then(Child::id))
            .collect()
    }

    fn spawn(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        let m = self.members.get_mut(i).ok_or(LocalEtcdError::NoMember(i))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)?;
        let mut command = Command::new(&self.binary);
        if let Some(quota) = self.options.quota_backend_bytes {
            command.arg("--quota-backend-bytes").arg(quota.to_string());
        }
        if let Some(ttl) = self.options.auth_token_ttl {
            command
                .arg("--auth-token-ttl")
                .arg(ttl.as_secs().max(1).to_string());
        }
        if let Some(tls) = &self.options.tls {
            for side in ["", "peer-"] {
                command
                    .arg(format!("--{side}cert-file"))
                    .arg(&tls.cert)
                    .arg(format!("--{side}key-file"))
                    .arg(&tls.key)
                    .arg(format!("--{side}trusted-ca-file"))
                    .arg(&tls.ca)
                    .arg(format!("--{side}client-cert-auth"));
            }
        }
        let child = command
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data_dir)
            .arg("--listen-client-urls")
            .arg(&m.client_url)
            .arg("--advertise-client-urls")
            .arg(&m.client_url)
            .arg("--listen-peer-urls")
            .arg(&m.peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&m.peer_url)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg("ozone-meta")
            .arg("--logger")
            .arg("zap")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| LocalEtcdError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        m.child = Some(child);
        Ok(())
    }

    async fn wait_ready(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        let started = Instant::now();
        let url = self
            .members
            .get(i)
            .ok_or(LocalEtcdError::NoMember(i))?
            .client_url
            .clone();
        loop {
            let m = self.members.get_mut(i).ok_or(LocalEtcdError::NoMember(i))?;
            if let Some(child) = m.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                return Err(self.not_ready(i, format!("it exited with {status}")));
            }
            // A linearizable read needs a leader: the member serves the cluster.
            let probe = self.config_for(vec![url.clone()]).map(|mut c| {
                c.timeout = Duration::from_secs(2);
                c.connect_timeout = Duration::from_secs(1);
                c
            });
            if let Ok(config) = probe
                && let Ok(store) = crate::EtcdStore::connect(&config).await
                && serving(store.get(b"ready-probe").await)
            {
                return Ok(());
            }
            if started.elapsed() > READY_DEADLINE {
                return Err(self.not_ready(i, format!("no answer at {url} within 30 s")));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn not_ready(&self, i: usize, reason: String) -> LocalEtcdError {
        let log = self
            .members
            .get(i)
            .and_then(|m| std::fs::read_to_string(&m.log).ok())
            .map(|s| {
                let lines: Vec<&str> = s.lines().collect();
                lines[lines.len().saturating_sub(20)..].join("\n")
            })
            .unwrap_or_default();
        LocalEtcdError::NotReady {
            member: i,
            reason,
            log,
        }
    }

    /// SIGKILLs member `i` (no clean shutdown; its data stays).
    ///
    /// # Errors
    /// [`LocalEtcdError::NoMember`]; [`LocalEtcdError::Io`] if the kill fails.
    pub async fn kill(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        let m = self.members.get_mut(i).ok_or(LocalEtcdError::NoMember(i))?;
        if let Some(mut child) = m.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Starts member `i` again on its data (after [`kill`](Self::kill)) and
    /// waits until it serves.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub async fn restart(&mut self, i: usize) -> Result<(), LocalEtcdError> {
        self.kill(i).await?;
        self.spawn(i)?;
        self.wait_ready(i).await
    }
}
