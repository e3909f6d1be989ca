//! [`ProcessCluster`]: an om and N datanodes as separate OS processes (the
//! `om` and `datanode` binaries), for crash and restart tests that an
//! in-process cluster cannot stand for: a SIGKILL stops a process between
//! any two instructions, with its page cache writes done or not and its
//! database transactions committed or not.
//!
//! Each process listens on 127.0.0.1; the first start picks a free port
//! (port 0) and every restart binds the same port again, so clients and
//! datanodes find a restarted om where it was. A process's stdout and
//! stderr go to `BASE/logs/<name>.log` (appended across restarts); the
//! harness learns the address from the `serving on HOST:PORT` line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

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

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ProcessError {
    let context = context.into();
    move |source| ProcessError::Io { context, source }
}

/// Paths of the `om` and `datanode` executables.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The om.
    pub om: PathBuf,
    /// The datanode.
    pub datanode: PathBuf,
}

impl Binaries {
    /// `$OZONE_OM_BIN` and `$OZONE_DATANODE_BIN` when set, otherwise the
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
    /// How long the om waits before freeing an overwritten key's blocks.
    pub deletion_grace: Duration,
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
            deletion_grace: Duration::from_secs(1),
        }
    }
}

/// Longest wait for a process's `serving on` line.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Tries of a start before it counts as failed.
pub const START_ATTEMPTS: u32 = 3;

/// One managed process: its command line, and the child while it runs.
#[derive(Debug)]
struct Managed {
    name: String,
    program: PathBuf,
    /// Arguments other than `--listen`.
    args: Vec<String>,
    data_dir: PathBuf,
    log: PathBuf,
    address: Option<SocketAddr>,
    child: Option<Child>,
    starts: u32,
}

impl Managed {
    /// Starts the process (on its previous port, if it had one) and waits
    /// for its `serving on` line, at most [`START_TIMEOUT`]. A restart that
    /// fails (the old port taken for a moment by another socket) is tried
    /// again, [`START_ATTEMPTS`] times in all.
    async fn start(&mut self) -> Result<(), ProcessError> {
        let mut attempt = 1;
        loop {
            let result = match tokio::time::timeout(START_TIMEOUT, self.start_once()).await {
                Ok(r) => r,
                Err(_) => Err(ProcessError::DidNotStart {
                    name: self.name.clone(),
                    why: format!("no `serving on` line within {START_TIMEOUT:?}"),
                    log: self.log.clone(),
                }),
            };
            match result {
                Err(ProcessError::DidNotStart { .. }) if attempt < START_ATTEMPTS => {
                    self.kill().await?;
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                r => return r,
            }
        }
    }

    async fn start_once(&mut self) -> Result<(), ProcessError> {
        let listen = self
            .address
            .map_or_else(|| "127.0.0.1:0".to_string(), |a| a.to_string());
        let mut log = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .await
            .map_err(io(format!("opening {}", self.log.display())))?;
        log.write_all(format!("=== start {} ===\n", self.starts + 1).as_bytes())
            .await
            .map_err(io("writing the log"))?;
        let stderr = log
            .try_clone()
            .await
            .map_err(io("duplicating the log handle"))?
            .into_std()
            .await;
        let child = Command::new(&self.program)
            .arg("--listen")
            .arg(&listen)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.args)
            .env("RUST_LOG", "info,s3s::ops=off")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("spawning {}", self.program.display())))?;
        // Held here until it serves: a timeout drops (and kills) it.
        let child = self.child.insert(child);
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| ProcessError::DidNotStart {
                name: self.name.clone(),
                why: "no stdout pipe".into(),
                log: self.log.clone(),
            })?;
        let mut lines = BufReader::new(stdout).lines();
        let address = loop {
            let line = lines
                .next_line()
                .await
                .map_err(io(format!("reading {}'s output", self.name)))?;
            let Some(line) = line else {
                let status = child.wait().await.map_err(io("waiting for the child"))?;
                self.child = None;
                return Err(ProcessError::DidNotStart {
                    name: self.name.clone(),
                    why: format!("exited with {status} before serving"),
                    log: self.log.clone(),
                });
            };
            log.write_all(line.as_bytes())
                .await
                .map_err(io("writing the log"))?;
            log.write_all(b"\n").await.map_err(io("writing the log"))?;
            if let Some(addr) = line
                .split("serving on ")
                .nth(1)
                .and_then(|a| a.trim().parse::<SocketAddr>().ok())
            {
                break addr;
            }
        };
        // Keep draining stdout into the log so the process never blocks on
        // a full pipe; the task ends when the process does.
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = log.write_all(line.as_bytes()).await;
                let _ = log.write_all(b"\n").await;
            }
        });
        self.address = Some(address);
        self.starts += 1;
        Ok(())
    }

    /// Sends SIGKILL and reaps the process; a stopped one is left as is.
    async fn kill(&mut self) -> Result<(), ProcessError> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .await
                .map_err(io(format!("killing {}", self.name)))?;
        }
        Ok(())
    }
}

/// An om and datanodes running as processes under one base directory.
#[derive(Debug)]
pub struct ProcessCluster {
    base: PathBuf,
    om: Managed,
    datanodes: Vec<Managed>,
    /// The CA and the certificate every process serves with, when TLS is on.
    tls: Option<crate::tls::IssuedFiles>,
}

impl ProcessCluster {
    /// Starts the om, then `datanodes` datanodes registered with it, under
    /// `base` (`base/om`, `base/dn<i>`, `base/logs`).
    ///
    /// # Errors
    /// I/O errors creating directories; [`ProcessError::DidNotStart`].
    pub async fn start(
        bins: &Binaries,
        base: &Path,
        datanodes: usize,
        timings: ProcessTimings,
    ) -> Result<Self, ProcessError> {
        Self::start_with_tls(bins, base, datanodes, timings, false).await
    }

    /// [`start`](Self::start), with TLS on every channel when `tls`: a
    /// throwaway CA and one loopback certificate are written under
    /// `base/tls/` and every process gets `--tls-ca`, `--tls-cert` and
    /// `--tls-key` (the datanodes register over mutual TLS).
    ///
    /// # Errors
    /// As [`start`](Self::start); [`ProcessError::Io`] if the certificates
    /// cannot be made or written.
    pub async fn start_with_tls(
        bins: &Binaries,
        base: &Path,
        datanodes: usize,
        timings: ProcessTimings,
        tls: bool,
    ) -> Result<Self, ProcessError> {
        let logs = base.join("logs");
        std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;
        let secs = |d: Duration| format!("{}", d.as_secs_f64());
        let tls = if tls {
            let made = crate::tls::ThrowawayCa::new("ozone-ec-rs process cluster CA")
                .and_then(|ca| ca.write_loopback(&base.join("tls"), "cluster"))
                .map_err(|e| io("making the cluster's certificates")(std::io::Error::other(e)))?;
            Some(made)
        } else {
            None
        };
        let tls_args: Vec<String> = tls
            .iter()
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
        let mut om = Managed {
            name: "om".into(),
            program: bins.om.clone(),
            args: vec![
                "--stale-after".into(),
                secs(timings.stale_after),
                "--dead-after".into(),
                secs(timings.dead_after),
                "--service-interval".into(),
                secs(timings.service_interval),
                "--deletion-grace".into(),
                secs(timings.deletion_grace),
                "--security".into(),
            ]
            .into_iter()
            .chain(tls_args.iter().cloned())
            .collect(),
            data_dir: base.join("om"),
            log: logs.join("om.log"),
            address: None,
            child: None,
            starts: 0,
        };
        om.start().await?;
        let om_address = om.address.map(|a| a.to_string()).unwrap_or_default();
        let mut cluster = Self {
            base: base.to_path_buf(),
            om,
            datanodes: Vec::with_capacity(datanodes),
            tls,
        };
        for i in 0..datanodes {
            let mut dn = Managed {
                name: format!("dn{i}"),
                program: bins.datanode.clone(),
                args: vec![
                    "--om".into(),
                    om_address.clone(),
                    "--heartbeat-interval".into(),
                    secs(timings.heartbeat),
                    "--security".into(),
                ]
                .into_iter()
                .chain(tls_args.iter().cloned())
                .collect(),
                data_dir: base.join(format!("dn{i}")),
                log: logs.join(format!("dn{i}.log")),
                address: None,
                child: None,
                starts: 0,
            };
            dn.start().await?;
            cluster.datanodes.push(dn);
        }
        Ok(cluster)
    }

    /// The om's `HOST:PORT`.
    #[must_use]
    pub fn om_address(&self) -> String {
        self.om.address.map(|a| a.to_string()).unwrap_or_default()
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
                ec_client::TlsConfig::load(&t.ca, None)
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
        self.datanodes.get(i).map(|d| d.data_dir.as_path())
    }

    /// The base directory (data dirs and `logs/`).
    #[must_use]
    pub fn base_dir(&self) -> &Path {
        &self.base
    }

    fn target(&mut self, target: Target) -> Option<&mut Managed> {
        match target {
            Target::Om => Some(&mut self.om),
            Target::Datanode(i) => self.datanodes.get_mut(i),
        }
    }

    /// SIGKILLs `target` (no-op if it is not running).
    ///
    /// # Errors
    /// Signal or wait failures.
    pub async fn kill(&mut self, target: Target) -> Result<(), ProcessError> {
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
            Target::Om => self.om.starts,
            Target::Datanode(i) => self.datanodes.get(i).map_or(0, |d| d.starts),
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
        for d in &mut self.datanodes {
            d.kill().await?;
        }
        self.om.kill().await
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
    /// The om.
    Om,
    /// Datanode `i` (from 0).
    Datanode(usize),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Om => write!(f, "om"),
            Self::Datanode(i) => write!(f, "dn{i}"),
        }
    }
}
