//! The `om` binary as an operator runs it: SIGTERM stops it gracefully
//! (exit status 0, as Ctrl-C does), `--log-format json` writes one JSON
//! object per log line, and `--metrics-listen` prints where `/metrics` is.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

#[test]
fn sigterm_stops_the_om_gracefully_and_logs_can_be_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_om"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--log-format", "json", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn om");
    // Drained as it comes, so that logs can never fill the pipe and block the om.
    let mut err = child.stderr.take().expect("stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let serving = lines.next().expect("a line").expect("utf-8");
    assert!(serving.starts_with("om serving on 127.0.0.1:"), "{serving}");
    let metrics = lines.next().expect("a line").expect("utf-8");
    assert!(
        metrics.starts_with("om metrics on http://127.0.0.1:") && metrics.ends_with("/metrics"),
        "{metrics}"
    );
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "a graceful stop, not death by signal"
    );
    let stderr = stderr.join().expect("stderr reader");
    let first = stderr.lines().next().expect("a log line");
    assert!(
        first.starts_with('{') && first.contains("\"level\":\"INFO\""),
        "{stderr}"
    );
}
