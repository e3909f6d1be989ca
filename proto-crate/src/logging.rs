//! [`init_logging`]: the one logging set-up of every binary (om, datanode,
//! s3-gateway, xtask).

/// Installs a `tracing` subscriber that writes to stderr — stdout is left to
/// the program's own output, such as the `serving on HOST:PORT` line that
/// scripts and test harnesses read — with ANSI colours only when stderr is
/// a terminal. The filter comes from `RUST_LOG`, else `default_filter`
/// (an `EnvFilter` directive such as `"info"`). A second call is a no-op.
pub fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
