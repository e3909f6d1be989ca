//! One process of a [`ProcessCluster`](super::ProcessCluster): its command
//! line, its log, and the child while it runs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use super::{ProcessError, START_ATTEMPTS, START_TIMEOUT, io};

/// One managed process: its command line, and the child while it runs.
#[derive(Debug)]
pub(super) struct Managed {
    pub(super) name: String,
    pub(super) program: PathBuf,
    /// Arguments other than `--listen` and `--data-dir`.
    pub(super) args: Vec<String>,
    /// Passed as `--data-dir` (the gateway has none).
    pub(super) data_dir: Option<PathBuf>,
    pub(super) log: PathBuf,
    pub(super) address: Option<SocketAddr>,
    pub(super) child: Option<Child>,
    pub(super) starts: u32,
    /// Lines of stdout after `serving on`, counted over every start (shared by the oms of
    /// a cluster, so that a waiter wakes at what any of them says).
    pub(super) said: tokio::sync::watch::Sender<u64>,
}

impl Managed {
    /// Starts the process (on its previous port, if it had one) and waits
    /// for its `serving on` line, at most [`START_TIMEOUT`]. A restart that
    /// fails (the old port taken for a moment by another socket) is tried
    /// again, [`START_ATTEMPTS`] times in all.
    pub(super) fn new(
        name: String,
        program: PathBuf,
        args: Vec<String>,
        data_dir: Option<PathBuf>,
        log: PathBuf,
    ) -> Self {
        Self {
            name,
            program,
            args,
            data_dir,
            log,
            address: None,
            child: None,
            starts: 0,
            said: tokio::sync::watch::Sender::new(0),
        }
    }

    /// Counts this process's stdout lines into `said` (shared with others).
    pub(super) fn counting_into(mut self, said: tokio::sync::watch::Sender<u64>) -> Self {
        self.said = said;
        self
    }

    pub(super) async fn start(&mut self) -> Result<(), ProcessError> {
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
        let mut command = Command::new(&self.program);
        command.arg("--listen").arg(&listen);
        if let Some(dir) = &self.data_dir {
            command.arg("--data-dir").arg(dir);
        }
        let child = command
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
            // `serving on HOST:PORT`, or the gateway's `… serving on http(s)://HOST:PORT`.
            if let Some(addr) = line.split("serving on ").nth(1).and_then(|a| {
                let a = a.trim();
                let a = a
                    .strip_prefix("https://")
                    .or_else(|| a.strip_prefix("http://"))
                    .unwrap_or(a);
                a.parse::<SocketAddr>().ok()
            }) {
                break addr;
            }
        };
        // Keep draining stdout into the log so the process never blocks on
        // a full pipe; the task ends when the process does.
        let said = self.said.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = log.write_all(line.as_bytes()).await;
                let _ = log.write_all(b"\n").await;
                said.send_modify(|n| *n += 1);
            }
        });
        self.address = Some(address);
        self.starts += 1;
        Ok(())
    }

    /// The running process's id.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// Asks the process to stop (SIGTERM: each binary then shuts down
    /// gracefully) and waits for it at most `grace`, then SIGKILLs it.
    pub(super) async fn stop(&mut self, grace: Duration) -> Result<(), ProcessError> {
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            // The process may have exited already (ESRCH): then the wait returns at once.
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            self.child = None;
            return Ok(());
        }
        tracing::warn!(process = %self.name, ?grace, "did not stop after SIGTERM; killing it");
        self.kill().await
    }

    /// Sends SIGKILL and reaps the process; a stopped one is left as is.
    pub(super) async fn kill(&mut self) -> Result<(), ProcessError> {
        if let Some(mut child) = self.child.take() {
            child
                .kill()
                .await
                .map_err(io(format!("killing {}", self.name)))?;
        }
        Ok(())
    }
}
