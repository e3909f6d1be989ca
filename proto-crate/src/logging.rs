//! [`init_logging`]: the one logging set-up of every binary (om, datanode,
//! s3-gateway, ozone, xtask), as text or JSON lines ([`LogFormat`]), and
//! [`ShutdownSignals`], how every server binary learns to stop.

/// Installs a `tracing` subscriber that writes to stderr — stdout is left to
/// the program's own output, such as the `serving on HOST:PORT` line that
/// scripts and test harnesses read — with ANSI colours only when stderr is
/// a terminal. The filter comes from `RUST_LOG`, else `default_filter`
/// (an `EnvFilter` directive such as `"info"`). A second call is a no-op.
pub fn init_logging(default_filter: &str) {
    init_logging_as(default_filter, LogFormat::Text);
}

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event (colours on a terminal only).
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`,
    /// `spans` — a request's `rpc` span carries its `request_id`), for log
    /// collectors.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("unknown log format `{other}`: use text or json")),
        }
    }
}

/// [`init_logging`] in `format`.
pub fn init_logging_as(default_filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        LogFormat::Json => builder.json().with_span_list(true).try_init(),
    };
}

/// How a server binary learns to stop: Ctrl-C (SIGINT) or, on Unix, SIGTERM
/// (what `kill`, systemd and container runtimes send); it then shuts down
/// gracefully either way. Install it first thing in `main` (inside the
/// runtime): from then on neither signal kills the process outright, even
/// while it is still starting.
#[derive(Debug)]
pub struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    /// Takes over SIGINT and SIGTERM.
    ///
    /// # Errors
    /// When the handlers cannot be installed.
    pub fn install() -> std::io::Result<Self> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Self {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Self {})
        }
    }

    /// Completes at the first of the signals (received since `install`).
    pub async fn recv(mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
