//! [`ProcessCluster`]: an om, N datanodes and optionally an S3 gateway as
//! separate OS processes (the `om`, `datanode` and `s3-gateway` binaries):
//! for crash and restart tests that an in-process cluster cannot stand for
//! (a SIGKILL stops a process between any two instructions, with its page
//! cache writes done or not and its database transactions committed or
//! not), and for `cargo xtask cluster --processes`.
//!
//! Each process listens on 127.0.0.1; the first start picks a free port
//! (port 0) and every restart binds the same port again, so clients and
//! datanodes find a restarted om where it was. A process's stdout and
//! stderr go to `BASE/logs/<name>.log` (appended across restarts); the
//! harness learns the address from the `serving on HOST:PORT` line.

mod managed;

use std::path::{Path, PathBuf};
use std::time::Duration;

use managed::Managed;

/// Why a process of the cluster could not be found, started or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessError {
    /// A binary is not where it was looked for.
    #[error(
        "the `{name}` binary is not at {}; build it first (`cargo build -p om -p datanode`, \
         which `cargo test` at the workspace root does) or set {env}",
        path.display()
    )]
    BinaryNotFound {
        /// `om` or `datanode`.
        name: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The environment variable that overrides the path.
        env: &'static str,
    },
    /// The options ask for something the cluster cannot be started with.
    #[error("invalid cluster options: {0}")]
    InvalidOptions(String),
    /// The local etcd members could not be started, stopped or asked.
    #[error("etcd: {0}")]
    Etcd(String),
    /// Spawning, waiting on or killing a process failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A process exited (or closed its stdout) before it said it was serving.
    #[error("{name} did not start: {why} (log: {})", log.display())]
    DidNotStart {
        /// Process name, e.g. `dn3`.
        name: String,
        /// What happened.
        why: String,
        /// Its log file.
        log: PathBuf,
    },
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProcessError {
    let context = context.into();
    move |source| ProcessError::Io { context, source }
}

/// Paths of the `om`, `datanode` and `s3-gateway` executables.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The om.
    pub om: PathBuf,
    /// The datanode.
    pub datanode: PathBuf,
    /// The S3 gateway, when it was found (only
    /// [`ProcessCluster::start_gateway`] needs it).
    pub s3_gateway: Option<PathBuf>,
}

impl Binaries {
    /// `$OZONE_OM_BIN`, `$OZONE_DATANODE_BIN` and `$OZONE_S3_GATEWAY_BIN`
    /// when set, otherwise the
    /// binaries next to the running executable's profile directory
    /// (`target/<profile>/`, also when running from `target/<profile>/deps/`).
    ///
    /// # Errors
    /// [`ProcessError::BinaryNotFound`] for a missing one.
    pub fn locate() -> Result<Self, ProcessError> {
        let exe = std::env::current_exe().map_err(io("locating the running executable"))?;
        let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        if dir.file_name().is_some_and(|n| n == "deps") {
            dir.pop();
        }
        let find = |name: &'static str, env: &'static str| {
            let path = std::env::var_os(env).map_or_else(|| dir.join(name), PathBuf::from);
            if path.is_file() {
                Ok(path)
            } else {
                Err(ProcessError::BinaryNotFound { name, path, env })
            }
        };
        Ok(Self {
            om: find("om", "OZONE_OM_BIN")?,
            datanode: find("datanode", "OZONE_DATANODE_BIN")?,
            s3_gateway: find("s3-gateway", "OZONE_S3_GATEWAY_BIN").ok(),
        })
    }
}

/// Liveness and service timings given to the om and datanode processes.
#[derive(Debug, Clone, Copy)]
pub struct ProcessTimings {
    /// Datanode heartbeat interval.
    pub heartbeat: Duration,
    /// Silence after which the om marks a datanode STALE.
    pub stale_after: Duration,
    /// Silence after which the om marks a datanode DEAD.
    pub dead_after: Duration,
    /// The om's background services' period.
    pub service_interval: Duration,
    /// The background services' lease in etcd (`--lead-ttl`, whole
    /// seconds): with several oms, another om takes the services over at
    /// most this long after their om dies.
    pub lead_ttl: Duration,
    /// How long the om waits before freeing an overwritten key's blocks.
    pub deletion_grace: Duration,
}

impl ProcessTimings {
    /// Timings of a cluster to use, not a test: heartbeat 3 s, services
    /// every 5 s and deletion grace 60 s (the binaries' defaults), and a
    /// datanode STALE after 90 s and DEAD after 10 min (longer than the om
    /// binary's defaults, 30 s and 90 s).
    #[must_use]
    pub fn service() -> Self {
        Self {
            heartbeat: Duration::from_secs(3),
            stale_after: Duration::from_secs(90),
            dead_after: Duration::from_secs(600),
            service_interval: Duration::from_secs(5),
            lead_ttl: Duration::from_secs(10),
            deletion_grace: Duration::from_secs(60),
        }
    }
}

impl Default for ProcessTimings {
    /// Short enough for tests: heartbeat 200 ms, stale 2 s, dead 4 s,
    /// services every 500 ms, deletion grace 1 s.
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(200),
            stale_after: Duration::from_secs(2),
            dead_after: Duration::from_secs(4),
            service_interval: Duration::from_millis(500),
            lead_ttl: meta_store::MIN_TTL,
            deletion_grace: Duration::from_secs(1),
        }
    }
}

/// Longest wait for a process's `serving on` line.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Tries of a start before it counts as failed.
pub const START_ATTEMPTS: u32 = 3;

/// Security and test hooks a [`ProcessCluster`] runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessOptions {
    /// TLS on every gRPC channel (default off).
    pub tls: bool,
    /// Block tokens (`--security` on the om and the datanodes; default on,
    /// as in the minicluster). Off only for benchmarks that measure the
    /// data path without them.
    pub block_tokens: bool,
    /// The datanodes' fault-injection RPCs (`--enable-fault-injection`;
    /// default off): what `bench pread`'s degraded rows use to fail a
    /// datanode's reads.
    pub fault_injection: bool,
    /// Local etcd members to keep the om's metadata on (`--etcd`; default
    /// 0: the om's own `om.redb`). Started under `base/etcd`.
    pub etcd_members: usize,
    /// Om processes (default 1). More than one needs etcd: every om
    /// serves, and the one that wins the election runs the background
    /// services, which move to another when it dies.
    pub oms: usize,
}

impl Default for ProcessOptions {
    fn default() -> Self {
        Self {
            tls: false,
            block_tokens: true,
            fault_injection: false,
            etcd_members: 0,
            oms: 1,
        }
    }
}

/// The certificates of a process cluster with TLS, under `BASE/tls/`.
#[derive(Debug, Clone)]
pub struct ProcessTls {
    /// The CA, and the loopback certificate the om and datanodes serve with.
    pub cluster: crate::tls::IssuedFiles,
    /// The gateway's HTTPS certificate (serverAuth only).
    pub s3: crate::tls::IssuedFiles,
    /// The gateway's client certificate towards the om (`--om-cert`).
    pub s3_client: crate::tls::IssuedFiles,
    /// The admin credential (clientAuth only, naming no host).
    pub admin: crate::tls::IssuedFiles,
}

/// Process ids of a running [`ProcessCluster`] (`cluster.json`'s `pids`).
pub use crate::cluster_info::ProcessIds;

/// How long [`ProcessCluster::stop_all`] waits for a process after SIGTERM.
pub const STOP_GRACE: Duration = Duration::from_secs(15);

/// Oms, datanodes and optionally an S3 gateway (and local etcd members)
/// running as processes under one base directory.
#[derive(Debug)]
pub struct ProcessCluster {
    base: PathBuf,
    /// The oms, in start order (one unless on etcd).
    oms: Vec<Managed>,
    /// Lines the oms printed after serving (an om that starts running the background
    /// services says so): what the waits on the oms wake at.
    om_said: tokio::sync::watch::Sender<u64>,
    /// The etcd members the oms keep their metadata on, when asked for.
    etcd: Option<meta_store::local_etcd::LocalEtcd>,
    datanodes: Vec<Managed>,
    gateway: Option<Managed>,
    /// The certificates, when TLS is on.
    tls: Option<ProcessTls>,
}

impl ProcessCluster {
    /// Starts the om, then `datanodes` datanodes registered with it, under
    /// `base` (`base/om`, `base/dn<i>`, `base/logs`; further oms in
    /// `base/om<i>`, etcd in `base/etcd`).
    ///
    /// # Errors
    /// I/O errors creating directories; [`ProcessError::DidNotStart`].
    pub async fn start(
        bins: &Binaries,
        base: &Path,
        datanodes: usize,
        timings: ProcessTimings,
    ) -> Result<Self, ProcessError> {
        Self::start_with(bins, base, datanodes, timings, ProcessOptions::default()).await
    }

    /// [`start`](Self::start), with what `options` asks for. With TLS, a
    /// throwaway CA and one loopback certificate are written under
    /// `base/tls/` and every process gets `--tls-ca`, `--tls-cert` and
    /// `--tls-key` (the datanodes register over mutual TLS); with block
    /// tokens, the om and every datanode get `--security`; with fault
    /// injection, every datanode gets `--enable-fault-injection`; with etcd
    /// members, the oms get `--etcd` and `--lead-ttl`, and every datanode
    /// (and the gateway) every om's address.
    ///
    /// # Errors
    /// As [`start`](Self::start); [`ProcessError::Io`] if the certificates
    /// cannot be made or written; [`ProcessError::InvalidOptions`] for no
    /// om, or several without etcd; [`ProcessError::Etcd`] when the members
    /// do not start.
    pub async fn start_with(
        bins: &Binaries,
        base: &Path,
        datanodes: usize,
        timings: ProcessTimings,
        options: ProcessOptions,
    ) -> Result<Self, ProcessError> {
        let ProcessOptions {
            tls,
            block_tokens,
            fault_injection,
            etcd_members,
            oms,
        } = options;
        if oms == 0 || (oms > 1 && etcd_members == 0) {
            return Err(ProcessError::InvalidOptions(format!(
                "{oms} oms with {etcd_members} etcd members: one om, or several on etcd"
            )));
        }
        let security_flag = block_tokens.then(|| "--security".to_string());
        let fault_flag = fault_injection.then(|| "--enable-fault-injection".to_string());
        let logs = base.join("logs");
        std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;
        let secs = |d: Duration| format!("{}", d.as_secs_f64());
        let tls = if tls {
            let dir = base.join("tls");
            let made = crate::tls::ThrowawayCa::new("ozone-ec-rs process cluster CA")
                .and_then(|ca| {
                    use crate::tls::{LOOPBACK_NAMES, Usage};
                    Ok(ProcessTls {
                        cluster: ca.write_loopback(&dir, "cluster")?,
                        s3: ca.write(&dir, "s3", &LOOPBACK_NAMES, Usage::HttpsServer)?,
                        s3_client: ca.write(
                            &dir,
                            "s3-client",
                            &[proto_crate::tls::S3_GATEWAY_NAME],
                            Usage::Admin,
                        )?,
                        admin: ca.write(&dir, "admin", &["admin"], Usage::Admin)?,
                    })
                })
                .map_err(|e| io("making the cluster's certificates")(std::io::Error::other(e)))?;
            Some(made)
        } else {
            None
        };
        let tls_args: Vec<String> = tls
            .iter()
            .map(|t| &t.cluster)
            .flat_map(|t| {
                [
                    "--tls-ca".to_string(),
                    t.ca.display().to_string(),
                    "--tls-cert".to_string(),
                    t.cert.display().to_string(),
                    "--tls-key".to_string(),
                    t.key.display().to_string(),
                ]
            })
            .collect();
        let etcd = if etcd_members > 0 {
            Some(
                meta_store::local_etcd::LocalEtcd::start(&base.join("etcd"), etcd_members)
                    .await
                    .map_err(|e| ProcessError::Etcd(e.to_string()))?,
            )
        } else {
            None
        };
        let etcd_args: Vec<String> = etcd
            .iter()
            .flat_map(|e| {
                [
                    "--etcd".to_string(),
                    e.endpoints().join(","),
                    "--lead-ttl".to_string(),
                    timings
                        .lead_ttl
                        .as_secs()
                        .max(meta_store::MIN_TTL.as_secs())
                        .to_string(),
                ]
            })
            .collect();
        let om_args: Vec<String> = vec![
            "--stale-after".into(),
            secs(timings.stale_after),
            "--dead-after".into(),
            secs(timings.dead_after),
            "--service-interval".into(),
            secs(timings.service_interval),
            "--deletion-grace".into(),
            secs(timings.deletion_grace),
        ]
        .into_iter()
        .chain(security_flag.clone())
        .chain(tls_args.iter().cloned())
        .chain(etcd_args)
        .collect();
        let mut cluster = Self {
            base: base.to_path_buf(),
            oms: Vec::with_capacity(oms),
            om_said: tokio::sync::watch::Sender::new(0),
            etcd,
            datanodes: Vec::with_capacity(datanodes),
            gateway: None,
            tls,
        };
        for i in 0..oms {
            // The first keeps the names of a one-om cluster.
            let name = if i == 0 {
                "om".to_string()
            } else {
                format!("om{i}")
            };
            let mut om = Managed::new(
                name.clone(),
                bins.om.clone(),
                om_args.clone(),
                Some(base.join(&name)),
                logs.join(format!("{name}.log")),
            )
            .counting_into(cluster.om_said.clone());
            om.start().await?;
            cluster.oms.push(om);
        }
        let om_address = cluster.om_address();
        for i in 0..datanodes {
            let mut dn = Managed::new(
                format!("dn{i}"),
                bins.datanode.clone(),
                vec![
                    "--om".into(),
                    om_address.clone(),
                    "--heartbeat-interval".into(),
                    secs(timings.heartbeat),
                ]
                .into_iter()
                .chain(security_flag.clone())
                .chain(fault_flag.clone())
                .chain(tls_args.iter().cloned())
                .collect(),
                Some(base.join(format!("dn{i}"))),
                logs.join(format!("dn{i}.log")),
            );
            dn.start().await?;
            cluster.datanodes.push(dn);
        }
        Ok(cluster)
    }

    /// Starts the `s3-gateway` binary over this cluster on 127.0.0.1:`port`
    /// (0: any free port) with `access_key`/`secret_key` as its
    /// administrator, serving `/metrics` on a free port; with TLS it serves
    /// HTTPS and presents its own client certificate to the om. Returns the
    /// endpoint (`http(s)://HOST:PORT`).
    ///
    /// # Errors
    /// [`ProcessError::BinaryNotFound`] when `bins` has no gateway;
    /// [`ProcessError::DidNotStart`].
    pub async fn start_gateway(
        &mut self,
        bins: &Binaries,
        port: u16,
        access_key: &str,
        secret_key: &str,
    ) -> Result<String, ProcessError> {
        let program = bins
            .s3_gateway
            .clone()
            .ok_or_else(|| ProcessError::BinaryNotFound {
                name: "s3-gateway",
                path: bins.om.with_file_name("s3-gateway"),
                env: "OZONE_S3_GATEWAY_BIN",
            })?;
        let mut args = vec![
            "--om".to_string(),
            self.om_address(),
            "--access-key".into(),
            access_key.into(),
            "--secret-key".into(),
            secret_key.into(),
            "--metrics-listen".into(),
            "127.0.0.1:0".into(),
        ];
        if let Some(t) = &self.tls {
            for (flag, path) in [
                ("--tls-ca", &t.s3.ca),
                ("--tls-cert", &t.s3.cert),
                ("--tls-key", &t.s3.key),
                ("--om-cert", &t.s3_client.cert),
                ("--om-key", &t.s3_client.key),
            ] {
                args.push(flag.into());
                args.push(path.display().to_string());
            }
        }
        let mut gw = Managed::new(
            "s3".into(),
            program,
            args,
            None,
            self.base.join("logs").join("s3.log"),
        );
        if port != 0 {
            gw.address = Some(([127, 0, 0, 1], port).into());
        }
        gw.start().await?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let endpoint = format!(
            "{scheme}://{}",
            gw.address.map(|a| a.to_string()).unwrap_or_default()
        );
        self.gateway = Some(gw);
        Ok(endpoint)
    }

    /// The certificates, when the cluster runs with TLS.
    #[must_use]
    pub fn tls(&self) -> Option<&ProcessTls> {
        self.tls.as_ref()
    }

    /// `HOST:PORT` of each datanode, in cluster order (empty for one that
    /// never served).
    #[must_use]
    pub fn datanode_addresses(&self) -> Vec<String> {
        self.datanodes
            .iter()
            .map(|d| d.address.map(|a| a.to_string()).unwrap_or_default())
            .collect()
    }

    /// The ids of the running processes.
    #[must_use]
    pub fn pids(&self) -> ProcessIds {
        ProcessIds {
            oms: self.oms.iter().filter_map(Managed::pid).collect(),
            datanodes: self.datanodes.iter().filter_map(Managed::pid).collect(),
            s3: self.gateway.as_ref().and_then(Managed::pid),
            etcd: self
                .etcd
                .as_ref()
                .map(meta_store::local_etcd::LocalEtcd::pids)
                .unwrap_or_default(),
        }
    }

    /// Stops every process gracefully: the gateway, the datanodes, then the
    /// oms (the one running the background services last, so that they
    /// do not move on the way out), each with SIGTERM and [`STOP_GRACE`] to finish before a
    /// SIGKILL; then the etcd members.
    ///
    /// # Errors
    /// Signal or wait failures.
    pub async fn stop_all(&mut self) -> Result<(), ProcessError> {
        if let Some(g) = &mut self.gateway {
            g.stop(STOP_GRACE).await?;
        }
        for d in &mut self.datanodes {
            d.stop(STOP_GRACE).await?;
        }
        // Unknown (etcd unreachable): the first om goes last.
        let leader = self.leading_om().await.ok().flatten().unwrap_or(0);
        for (i, om) in self.oms.iter_mut().enumerate() {
            if i != leader {
                om.stop(STOP_GRACE).await?;
            }
        }
        if let Some(om) = self.oms.get_mut(leader) {
            om.stop(STOP_GRACE).await?;
        }
        // Members are killed as they drop.
        self.etcd = None;
        Ok(())
    }

    /// Every om's `HOST:PORT`, comma-separated in start order (what
    /// clients, datanodes and the gateway are given as `--om`).
    #[must_use]
    pub fn om_address(&self) -> String {
        self.om_addresses().join(",")
    }

    /// Each om's `HOST:PORT`, in start order.
    #[must_use]
    pub fn om_addresses(&self) -> Vec<String> {
        self.oms
            .iter()
            .map(|o| o.address.map(|a| a.to_string()).unwrap_or_default())
            .collect()
    }

    /// Which om runs the background services now (its index), asked of etcd;
    /// `Some(0)` for a cluster without etcd, whose one om always serves;
    /// `None` while no om leads (a hand-over).
    ///
    /// # Errors
    /// [`ProcessError::Etcd`] when etcd cannot be asked.
    pub async fn leading_om(&self) -> Result<Option<usize>, ProcessError> {
        let Some(etcd) = &self.etcd else {
            return Ok(Some(0));
        };
        let failed = |e: &dyn std::fmt::Display| ProcessError::Etcd(e.to_string());
        let config = etcd.config().map_err(|e| failed(&e))?;
        let store = meta_store::EtcdStore::connect(&config)
            .await
            .map_err(|e| failed(&e))?;
        let leader = meta_store::MetaStore::Etcd(store)
            .leader(om::OM_ELECTION)
            .await
            .map_err(|e| failed(&e))?;
        Ok(leader.and_then(|l| self.om_addresses().iter().position(|a| *a == l)))
    }

    /// Waits until an om that `accept`s (by index) leads the metadata store's background
    /// services (a hand-over from a killed om takes up to its lease) and returns its index,
    /// at most `within`. It asks etcd now and again whenever an om prints a line (an om that
    /// starts running the services prints `om running the background services`).
    ///
    /// # Errors
    /// [`ProcessError::Etcd`] when etcd cannot be asked, or no such om leads by then.
    pub async fn wait_for_leading_om(
        &self,
        within: Duration,
        accept: impl Fn(usize) -> bool,
    ) -> Result<usize, ProcessError> {
        let until = tokio::time::Instant::now() + within;
        let mut said = self.om_said.subscribe();
        loop {
            said.borrow_and_update();
            if let Some(i) = self.leading_om().await?
                && accept(i)
            {
                return Ok(i);
            }
            if tokio::time::timeout_at(until, said.changed())
                .await
                .is_err()
            {
                return Err(ProcessError::Etcd(format!(
                    "no om leads the background services after {within:?}"
                )));
            }
        }
    }

    /// Waits until om `i`'s ReplicationManager has made at least `passes` passes since that
    /// om started (it runs only on the om that leads the background services), at most
    /// `within`, and returns its status. The om holds the call until its passes reach the
    /// count ([`om::OmAdminClient::repair_status_after`]); a call refused (`NOT_LEADER`: the
    /// lead still settling) is made again when an om next prints a line.
    ///
    /// # Errors
    /// [`ProcessError::Etcd`] naming the om's last answer when it has not by then.
    pub async fn wait_for_repair_passes(
        &self,
        i: usize,
        passes: u64,
        within: Duration,
    ) -> Result<om::RepairStatus, ProcessError> {
        let address = self.om_addresses().get(i).cloned().unwrap_or_default();
        // With TLS, admin calls present the admin certificate.
        let tls = self
            .tls
            .as_ref()
            .map(|t| {
                proto_crate::tls::TlsConfig::load(
                    &t.admin.ca,
                    Some((t.admin.cert.as_path(), t.admin.key.as_path())),
                )
                .map_err(|e| io("loading the admin certificate")(std::io::Error::other(e)))
            })
            .transpose()?;
        let until = tokio::time::Instant::now() + within;
        let mut said = self.om_said.subscribe();
        loop {
            said.borrow_and_update();
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            let last = match om::OmAdminClient::connect(&address, tls.as_ref()).await {
                Ok(mut admin) => match admin.repair_status_after(passes, left).await {
                    Ok(status) if status.passes >= passes => return Ok(status),
                    Ok(status) => format!("{} passes", status.passes),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            let failed = || {
                ProcessError::Etcd(format!(
                    "om {address} made no {passes} repair passes within {within:?}: {last}"
                ))
            };
            if tokio::time::Instant::now() >= until {
                return Err(failed());
            }
            if tokio::time::timeout_at(until, said.changed())
                .await
                .is_err()
            {
                return Err(failed());
            }
        }
    }

    /// What a client of this cluster trusts (the CA only), when it runs
    /// with TLS.
    ///
    /// # Errors
    /// [`ProcessError::Io`] if the CA file cannot be read back.
    pub fn client_tls(&self) -> Result<Option<ec_client::TlsConfig>, ProcessError> {
        self.tls
            .as_ref()
            .map(|t| {
                ec_client::TlsConfig::load(&t.cluster.ca, None)
                    .map_err(|e| io("loading the cluster CA")(std::io::Error::other(e)))
            })
            .transpose()
    }

    /// Number of datanodes.
    #[must_use]
    pub fn datanode_count(&self) -> usize {
        self.datanodes.len()
    }

    /// Data directory of datanode `i`.
    #[must_use]
    pub fn datanode_dir(&self, i: usize) -> Option<&Path> {
        self.datanodes.get(i).and_then(|d| d.data_dir.as_deref())
    }

    /// The base directory (data dirs and `logs/`).
    #[must_use]
    pub fn base_dir(&self) -> &Path {
        &self.base
    }

    fn target(&mut self, target: Target) -> Option<&mut Managed> {
        match target {
            Target::Om => self.oms.first_mut(),
            Target::OmAt(i) => self.oms.get_mut(i),
            Target::Datanode(i) => self.datanodes.get_mut(i),
            Target::Etcd(_) => None,
        }
    }

    /// SIGKILLs `target` (no-op if it is not running).
    ///
    /// # Errors
    /// Signal or wait failures; [`ProcessError::Etcd`] for an etcd member.
    pub async fn kill(&mut self, target: Target) -> Result<(), ProcessError> {
        if let (Target::Etcd(i), Some(etcd)) = (target, &mut self.etcd) {
            return etcd
                .kill(i)
                .await
                .map_err(|e| ProcessError::Etcd(e.to_string()));
        }
        match self.target(target) {
            Some(p) => p.kill().await,
            None => Ok(()),
        }
    }

    /// Starts `target` again on its port, with its data dir as the crash
    /// left it, and waits until it serves.
    ///
    /// # Errors
    /// [`ProcessError::DidNotStart`] (a process that needs manual repair
    /// after a crash fails here).
    pub async fn restart(&mut self, target: Target) -> Result<(), ProcessError> {
        if let (Target::Etcd(i), Some(etcd)) = (target, &mut self.etcd) {
            return etcd
                .restart(i)
                .await
                .map_err(|e| ProcessError::Etcd(e.to_string()));
        }
        match self.target(target) {
            Some(p) => {
                p.kill().await?;
                p.start().await
            }
            None => Ok(()),
        }
    }

    /// How many times `target` was started.
    #[must_use]
    pub fn starts(&self, target: Target) -> u32 {
        match target {
            Target::Om => self.oms.first().map_or(0, |o| o.starts),
            Target::OmAt(i) => self.oms.get(i).map_or(0, |o| o.starts),
            Target::Datanode(i) => self.datanodes.get(i).map_or(0, |d| d.starts),
            Target::Etcd(_) => 0,
        }
    }

    /// What the datanodes' start-up recovery reclaimed over all their
    /// starts, counted from the messages it logs
    /// ([`datanode::RECOVERY_ORPHAN_LOG`], [`datanode::RECOVERY_TAIL_LOG`]).
    ///
    /// # Errors
    /// I/O errors reading the logs.
    pub fn datanode_recoveries(&self) -> Result<LoggedRecoveries, ProcessError> {
        let mut r = LoggedRecoveries::default();
        for d in &self.datanodes {
            let text = std::fs::read_to_string(&d.log)
                .map_err(io(format!("reading {}", d.log.display())))?;
            for line in text.lines() {
                r.orphans_removed += u64::from(line.contains(datanode::RECOVERY_ORPHAN_LOG));
                r.tails_truncated += u64::from(line.contains(datanode::RECOVERY_TAIL_LOG));
            }
        }
        Ok(r)
    }

    /// SIGKILLs every process.
    ///
    /// # Errors
    /// Signal or wait failures.
    pub async fn kill_all(&mut self) -> Result<(), ProcessError> {
        if let Some(g) = &mut self.gateway {
            g.kill().await?;
        }
        for d in &mut self.datanodes {
            d.kill().await?;
        }
        for om in &mut self.oms {
            om.kill().await?;
        }
        self.etcd = None;
        Ok(())
    }
}

/// Block files the datanodes reclaimed at their starts (see
/// [`ProcessCluster::datanode_recoveries`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoggedRecoveries {
    /// Files with no committed metadata, removed.
    pub orphans_removed: u64,
    /// Files truncated to their committed length.
    pub tails_truncated: u64,
}

/// A process of a [`ProcessCluster`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The (first) om.
    Om,
    /// Om `i` (from 0, in start order), of a cluster of several.
    OmAt(usize),
    /// Datanode `i` (from 0).
    Datanode(usize),
    /// Etcd member `i` (from 0), of a cluster on etcd.
    Etcd(usize),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Om | Self::OmAt(0) => write!(f, "om"),
            Self::OmAt(i) => write!(f, "om{i}"),
            Self::Datanode(i) => write!(f, "dn{i}"),
            Self::Etcd(i) => write!(f, "etcd{i}"),
        }
    }
}
