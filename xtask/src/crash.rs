//! `cargo xtask crash-test`: the crash-consistency test of
//! `minicluster::crash` for as many iterations as asked, each with its own
//! seed (seed, seed+1, …) and 30+ SIGKILLs of om and datanode processes.
//! Builds the `om` and `datanode` binaries (release) first.

use std::path::PathBuf;

use clap::Args;
use minicluster::crash::{CrashConfig, run as run_once};
use minicluster::process::{Binaries, Target};

/// Arguments of `cargo xtask crash-test`.
#[derive(Debug, Args)]
pub(crate) struct CrashArgs {
    /// Runs, each a fresh cluster with the next seed.
    #[arg(long, default_value_t = 10)]
    iterations: u64,
    /// Seed of the first run (printed, so a failing one can be replayed
    /// with `--seed S --iterations 1`).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// SIGKILLs per run.
    #[arg(long, default_value_t = 40)]
    kill_points: usize,
    /// Datanodes (at least 6).
    #[arg(long, default_value_t = 6)]
    datanodes: usize,
    /// Concurrent writers.
    #[arg(long, default_value_t = 2)]
    writers: usize,
    /// Where each run's data dirs and logs go (`DIR/seed-S`); a temp dir
    /// removed after a passing run when not given.
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs the iterations; stops at the first failure.
pub(crate) async fn run(args: CrashArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.datanodes >= 6, "--datanodes must be at least 6");
    anyhow::ensure!(args.kill_points >= 1, "--kill-points must be positive");
    crate::cluster::build_service_binaries()?;
    let bins = Binaries::locate()?;
    let (mut kills, mut om_kills, mut ok, mut failed, mut keys) =
        (0usize, 0usize, 0u64, 0u64, 0usize);
    let (mut orphans, mut tails) = (0u64, 0u64);
    for i in 0..args.iterations {
        let seed = args.seed + i;
        let temp = tempfile::tempdir()?;
        let base = args.dir.as_ref().map_or_else(
            || temp.path().to_path_buf(),
            |d| d.join(format!("seed-{seed}")),
        );
        let config = CrashConfig {
            seed,
            kill_points: args.kill_points,
            datanodes: args.datanodes,
            writers: args.writers,
            base_dir: base.clone(),
            bins: bins.clone(),
        };
        let report = match run_once(&config).await {
            Ok(r) => r,
            Err(e) => {
                let kept = if args.dir.is_some() {
                    base
                } else {
                    temp.keep()
                };
                anyhow::bail!(
                    "run {} (seed {seed}) failed: {e}\nlogs and data dirs: {}\nreplay: cargo xtask crash-test --seed {seed} --iterations 1 --kill-points {}",
                    i + 1,
                    kept.display(),
                    args.kill_points
                );
            }
        };
        let om = report.kills.iter().filter(|t| **t == Target::Om).count();
        println!(
            "run {:>3} seed {seed}: {} kills ({om} om), {} writes acknowledged, {} failed {:?}, \
             {} keys verified, {} orphan files removed, {} tails truncated",
            i + 1,
            report.kills.len(),
            report.ops_ok,
            report.ops_failed,
            report.failures,
            report.keys_checked,
            report.orphans_removed,
            report.tails_truncated
        );
        kills += report.kills.len();
        om_kills += om;
        ok += report.ops_ok;
        failed += report.ops_failed;
        keys += report.keys_checked;
        orphans += report.orphans_removed;
        tails += report.tails_truncated;
    }
    println!(
        "crash test passed: {} runs, {kills} kills ({om_kills} om), {ok} writes acknowledged, \
         {failed} failed, {keys} keys' final versions verified (before and after an offline \
         recovery), {orphans} orphan block files removed, {tails} tails truncated",
        args.iterations
    );
    Ok(())
}
