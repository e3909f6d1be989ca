//! `cargo xtask admin …`: cluster administration through the om's admin service: the
//! ReplicationManager's status and the S3 users.

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
        /// Wait until nothing is under-replicated or in flight, as seen by a ReplicationManager
        /// pass that started after this command did (so a decommission or a datanode state
        /// change just before it is taken into account; a datanode stopped just before counts
        /// as lost only once the om marks it DEAD, `--dead-after`). Exit 1 after `--timeout`.
        #[arg(long)]
        wait: bool,
        /// Seconds `--wait` waits at most.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// S3 users and their access keys (stored in the om; the S3 gateway checks every signed
    /// request against them).
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
}

/// `admin user …`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Issue a new access key pair for user NAME, creating the user if needed (at most two
    /// active keys per user: rotate by creating the second, then revoking the first). The
    /// secret is shown only here.
    Create {
        /// The user: 1 to 64 letters, digits or `+=,.@_-`.
        name: String,
        /// Print `{"user", "access_key", "secret_key"}` as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Every user with its active access keys (never secrets).
    List {
        /// Print a JSON array of `{"user", "created_unix_ms", "access_keys"}`.
        #[arg(long)]
        json: bool,
    },
    /// Revoke an access key: requests signed with it are refused from then on
    /// (`InvalidAccessKeyId`). The user and its buckets stay.
    RevokeKey {
        /// The access key id.
        access_key: String,
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
            // The ReplicationManager's status is the memory of the om that runs it.
            let (_, mut admin) = target.leading_om().await?;
            let deadline = Instant::now() + Duration::from_secs(timeout);
            let first = admin.repair_status().await?;
            if !wait {
                print(&first, as_json);
                return Ok(());
            }
            let mut last = first.passes;
            let status = loop {
                // The om answers once its next pass ends (or the time left passes).
                let left = deadline.saturating_duration_since(Instant::now());
                let s = admin.repair_status_after(last + 1, left).await?;
                last = s.passes;
                // A status is as fresh as the pass that wrote it, and a pass reads the
                // datanodes' states when it starts: the pass that ends first may have
                // started before this command; the one after it did not.
                if s.passes >= first.passes + 2 && s.under_replicated == 0 && s.in_flight == 0 {
                    break s;
                }
                if Instant::now() >= deadline {
                    print(&s, as_json);
                    bail!("repair not done after {timeout} s");
                }
            };
            print(&status, as_json);
            Ok(())
        }
        AdminCommand::User { command } => user(target, command).await,
    }
}

async fn user(target: &ozone_cli::Target, command: UserCommand) -> anyhow::Result<()> {
    let mut admin = target.om_admin().await?;
    match command {
        UserCommand::Create {
            name,
            json: as_json,
        } => {
            let c = admin.create_user(&name).await?;
            if as_json {
                println!(
                    "{}",
                    json!({"user": c.user, "access_key": c.access_key, "secret_key": c.secret_key})
                );
            } else {
                println!("user        {}", c.user);
                println!("access key  {}", c.access_key);
                println!("secret key  {}", c.secret_key);
            }
        }
        UserCommand::List { json: as_json } => {
            let users = admin.list_users().await?;
            if as_json {
                let list: Vec<_> = users
                    .iter()
                    .map(|u| {
                        json!({
                            "user": u.name,
                            "created_unix_ms": u.created_unix_ms,
                            "access_keys": u.access_keys,
                        })
                    })
                    .collect();
                println!("{}", serde_json::Value::Array(list));
            } else {
                for u in &users {
                    println!("{}\t{}", u.name, u.access_keys.join(","));
                }
            }
        }
        UserCommand::RevokeKey { access_key } => {
            let user = admin.revoke_key(&access_key).await?;
            println!("revoked {access_key} of user {user}");
        }
    }
    Ok(())
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
