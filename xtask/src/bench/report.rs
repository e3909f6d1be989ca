//! Bench results: rows, Markdown tables and the JSON file.
//!
//! JSON schema (documented in README.md):
//! `{"suite", "started_unix_ms", "config": {...}, "rows": [Row...], "ratios": {name: value}}`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use ec_client::{MetricsSnapshot, RpcKind};
use serde::Serialize;

use ozone_cli::table::Table;

/// One measured (workload, mode) pair.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) workload: String,
    pub(crate) mode: String,
    pub(crate) threads: usize,
    pub(crate) ops: u64,
    pub(crate) seconds: f64,
    pub(crate) ops_per_sec: f64,
    pub(crate) mb_per_sec: f64,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    /// Client RPCs by kind during the measured ops (counters taken after warm-up).
    pub(crate) rpcs: BTreeMap<String, u64>,
    /// Cells the ops touched (EC preads), for checking GetBlock per cell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) cells_touched: Option<u64>,
    /// EC readers built during the measured ops.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) readers_created: Option<u64>,
    /// Vectored suite: mean, min and max milliseconds per call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mean_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) min_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_ms: Option<f64>,
    /// S3 suite: the first, median and last GET, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) median_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) last_ms: Option<f64>,
    /// Vectored suite: ReadChunk RPCs per call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) read_chunks_per_call: Option<f64>,
}

/// Merges the rows of several rounds of the same measurements: rows with the
/// same workload, mode and threads become one (first-seen order) whose ops,
/// seconds, bytes and counts are the rounds' sums; p50 is the median of the
/// rounds' p50s and p99 the largest p99 (the individual latencies are not
/// kept). Rows of one round come back unchanged.
pub(crate) fn merge_rounds(rows: Vec<Row>) -> Vec<Row> {
    let mut merged: Vec<(Row, Vec<u64>)> = Vec::new();
    for r in rows {
        let same = merged
            .iter_mut()
            .find(|(m, _)| m.workload == r.workload && m.mode == r.mode && m.threads == r.threads);
        let Some((m, p50s)) = same else {
            let p50 = r.p50_us;
            merged.push((r, vec![p50]));
            continue;
        };
        let bytes = m.mb_per_sec * m.seconds + r.mb_per_sec * r.seconds;
        m.ops += r.ops;
        m.seconds += r.seconds;
        m.ops_per_sec = m.ops as f64 / m.seconds.max(1e-9);
        m.mb_per_sec = bytes / m.seconds.max(1e-9);
        p50s.push(r.p50_us);
        m.p99_us = m.p99_us.max(r.p99_us);
        for (k, v) in r.rpcs {
            *m.rpcs.entry(k).or_default() += v;
        }
        let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        m.cells_touched = add(m.cells_touched, r.cells_touched);
        m.readers_created = add(m.readers_created, r.readers_created);
    }
    merged
        .into_iter()
        .map(|(mut m, mut p50s)| {
            p50s.sort_unstable();
            m.p50_us = p50s[p50s.len() / 2];
            m
        })
        .collect()
}

/// Latencies of individual ops, microseconds.
#[derive(Debug, Default)]
pub(crate) struct Latencies(Vec<u64>);

impl Latencies {
    pub(crate) fn push(&mut self, d: Duration) {
        self.0
            .push(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    pub(crate) fn extend(&mut self, other: Latencies) {
        self.0.extend(other.0);
    }

    fn percentile(sorted: &[u64], p: f64) -> u64 {
        if sorted.is_empty() {
            return 0;
        }
        let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
        sorted[idx.min(sorted.len() - 1)]
    }

    /// (p50, p99) in microseconds.
    pub(crate) fn p50_p99(&self) -> (u64, u64) {
        let mut v = self.0.clone();
        v.sort_unstable();
        (Self::percentile(&v, 0.50), Self::percentile(&v, 0.99))
    }
}

/// Builds a row from what was measured.
#[allow(clippy::too_many_arguments)]
pub(crate) fn row(
    workload: &str,
    mode: &str,
    threads: usize,
    ops: u64,
    bytes: u64,
    elapsed: Duration,
    lat: &Latencies,
    rpcs: &MetricsSnapshot,
) -> Row {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let (p50, p99) = lat.p50_p99();
    Row {
        workload: workload.to_string(),
        mode: mode.to_string(),
        threads,
        ops,
        seconds: secs,
        ops_per_sec: ops as f64 / secs,
        mb_per_sec: bytes as f64 / secs / 1e6,
        p50_us: p50,
        p99_us: p99,
        rpcs: RpcKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), rpcs.rpcs(*k)))
            .filter(|(_, v)| *v > 0)
            .collect(),
        cells_touched: None,
        readers_created: None,
        mean_ms: None,
        min_ms: None,
        max_ms: None,
        read_chunks_per_call: None,
        first_ms: None,
        median_ms: None,
        last_ms: None,
    }
}

/// A suite's full report.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) suite: String,
    pub(crate) started_unix_ms: u64,
    pub(crate) config: serde_json::Value,
    pub(crate) rows: Vec<Row>,
    pub(crate) ratios: BTreeMap<String, f64>,
}

impl Report {
    pub(crate) fn find(&self, workload: &str, mode: &str) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.workload == workload && r.mode == mode && r.threads == 1)
            .or_else(|| {
                self.rows
                    .iter()
                    .find(|r| r.workload == workload && r.mode == mode)
            })
    }

    /// Adds `a/b` of ops/s as a named ratio when both rows exist.
    /// Records `name` = MB/s of row `a` / MB/s of row `b` (each a (workload, mode) pair),
    /// rounded to 3 decimals, when both rows exist.
    pub(crate) fn mb_ratio(&mut self, name: &str, a: (&str, &str), b: (&str, &str)) {
        self.scaled_mb_ratio(name, a, b, 1.0);
    }

    /// `a`'s MB/s × `scale` over `b`'s (rows that count different bytes:
    /// user bytes against bytes stored).
    pub(crate) fn scaled_mb_ratio(
        &mut self,
        name: &str,
        a: (&str, &str),
        b: (&str, &str),
        scale: f64,
    ) {
        if let (Some(x), Some(y)) = (self.find(a.0, a.1), self.find(b.0, b.1)) {
            let r = x.mb_per_sec * scale / y.mb_per_sec.max(1e-9);
            self.ratios
                .insert(name.into(), (r * 1000.0).round() / 1000.0);
        }
    }

    pub(crate) fn ratio(&mut self, name: &str, workload: &str, a: &str, b: &str) {
        if let (Some(x), Some(y)) = (self.find(workload, a), self.find(workload, b))
            && y.ops_per_sec > 0.0
        {
            let r = x.ops_per_sec / y.ops_per_sec;
            self.ratios
                .insert(name.to_string(), (r * 1000.0).round() / 1000.0);
        }
    }

    /// The rows as a Markdown table (the vectored suite's own columns).
    pub(crate) fn vectored_table(&self) -> String {
        let mut t = Table::new(&[
            "workload",
            "mode",
            "calls",
            "mean ms",
            "min ms",
            "max ms",
            "MB/s",
            "ReadChunk/call",
        ]);
        for r in &self.rows {
            t.row(vec![
                r.workload.clone(),
                r.mode.clone(),
                r.ops.to_string(),
                format!("{:.2}", r.mean_ms.unwrap_or(0.0)),
                format!("{:.2}", r.min_ms.unwrap_or(0.0)),
                format!("{:.2}", r.max_ms.unwrap_or(0.0)),
                format!("{:.1}", r.mb_per_sec),
                format!("{:.1}", r.read_chunks_per_call.unwrap_or(0.0)),
            ]);
        }
        t.render()
    }

    /// The s3 suite's table.
    pub(crate) fn s3_table(&self) -> String {
        let mut t = Table::new(&[
            "workload",
            "mode",
            "requests",
            "first ms",
            "median ms",
            "last ms",
            "MB/s",
            "ReadChunk",
        ]);
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
        for r in &self.rows {
            t.row(vec![
                r.workload.clone(),
                r.mode.clone(),
                r.ops.to_string(),
                ms(r.first_ms),
                ms(r.median_ms),
                ms(r.last_ms),
                format!("{:.1}", r.mb_per_sec),
                r.rpcs.get("ReadChunk").copied().unwrap_or(0).to_string(),
            ]);
        }
        t.render()
    }

    /// The rows as a Markdown table.
    pub(crate) fn table(&self) -> String {
        let mut t = Table::new(&[
            "workload",
            "mode",
            "threads",
            "ops",
            "ops/s",
            "MB/s",
            "p50 µs",
            "p99 µs",
            "GetBlock",
            "ReadChunk",
        ]);
        for r in &self.rows {
            t.row(vec![
                r.workload.clone(),
                r.mode.clone(),
                r.threads.to_string(),
                r.ops.to_string(),
                format!("{:.0}", r.ops_per_sec),
                format!("{:.1}", r.mb_per_sec),
                r.p50_us.to_string(),
                r.p99_us.to_string(),
                r.rpcs.get("GetBlock").copied().unwrap_or(0).to_string(),
                r.rpcs.get("ReadChunk").copied().unwrap_or(0).to_string(),
            ]);
        }
        t.render()
    }

    /// The ratios as a Markdown table.
    pub(crate) fn ratio_table(&self) -> String {
        let mut t = Table::new(&["ratio", "value"]);
        for (k, v) in &self.ratios {
            t.row(vec![k.clone(), format!("{v:.2}")]);
        }
        t.render()
    }

    /// Writes the report as pretty JSON, creating parent directories.
    pub(crate) fn write_json(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }
}
