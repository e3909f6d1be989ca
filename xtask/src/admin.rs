//! `cargo xtask admin …`: cluster administration through the om's admin service.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Subcommand;
use serde_json::json;

/// Administration commands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// The ReplicationManager's view: block groups below full redundancy (by how many more
    /// failures they survive), repairs in flight, completed, failed, unrecoverable.
    RepairStatus {
        /// Print one JSON object with the integer fields `under_replicated`, `in_flight`,
        /// `completed`, `failed`, `unrecoverable`, `waiting_for_target`, `missing_replicas`,
        /// `checked_replicas`, `orphan_replicas`, `passes`, `scans` and the object `by_remaining`.
        #[arg(long)]
        json: bool,
        /// Wait until nothing is under-replicated or in flight (exit 1 after `--timeout`).
        #[arg(long)]
        wait: bool,
        /// Seconds `--wait` waits at most.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
}

/// Runs an admin command.
pub async fn run(target: &ozone_cli::Target, command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::RepairStatus {
            json: as_json,
            wait,
            timeout,
        } => {
            let mut admin = target.om_admin().await?;
            let deadline = Instant::now() + Duration::from_secs(timeout);
            let status = loop {
                let s = admin.repair_status().await?;
                if !wait || (s.under_replicated == 0 && s.in_flight == 0) {
                    break s;
                }
                if Instant::now() >= deadline {
                    print(&s, as_json);
                    bail!("repair not done after {timeout} s");
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            };
            print(&status, as_json);
            Ok(())
        }
    }
}

fn print(s: &om::RepairStatus, as_json: bool) {
    if as_json {
        let by_remaining: serde_json::Map<String, serde_json::Value> = s
            .by_remaining
            .iter()
            .map(|(r, n)| (r.to_string(), json!(n)))
            .collect();
        println!(
            "{}",
            json!({
                "under_replicated": s.under_replicated,
                "in_flight": s.in_flight,
                "completed": s.completed,
                "failed": s.failed,
                "unrecoverable": s.unrecoverable,
                "waiting_for_target": s.waiting_for_target,
                "missing_replicas": s.missing_replicas,
                "checked_replicas": s.checked_replicas,
                "orphan_replicas": s.orphan_replicas,
                "by_remaining": by_remaining,
                "passes": s.passes,
                "scans": s.scans,
            })
        );
        return;
    }
    println!("under-replicated groups: {}", s.under_replicated);
    for (r, n) in &s.by_remaining {
        println!("  surviving {r} more failure(s): {n}");
    }
    println!("repairs in flight:       {}", s.in_flight);
    println!("repairs completed:       {}", s.completed);
    println!("repair attempts failed:  {}", s.failed);
    println!("unrecoverable groups:    {}", s.unrecoverable);
    println!("waiting for a target:    {}", s.waiting_for_target);
    println!("lost on live datanodes:  {}", s.missing_replicas);
    println!("report gaps checked:     {}", s.checked_replicas);
    println!("orphans deleted:         {}", s.orphan_replicas);
    println!(
        "passes:                  {} ({} full scans)",
        s.passes, s.scans
    );
}
