//! `ozone admin datanode list`: every datanode the om knows, with its
//! liveness (HEALTHY, STALE, DEAD), operational state (IN_SERVICE,
//! DECOMMISSIONING, DECOMMISSIONED), last heartbeat, space and open files.
//! `cargo xtask dn list` runs the same code.

use std::collections::HashMap;

use serde_json::json;

use crate::cluster::Target;
use crate::output;
use crate::table::Table;

/// Lists the datanodes of `target`'s om. When that om is a minicluster's,
/// each row also shows N, the datanode's position in its `cluster.json`
/// (what `cargo xtask dn stop|start N` takes); otherwise N is absent.
///
/// # Errors
/// An om that cannot be reached, output errors.
pub async fn list(target: &Target, as_json: bool) -> anyhow::Result<()> {
    let (om, _) = target.serving_om().await?;
    let statuses = om::list_datanode_statuses(&om, target.tls()?.as_ref()).await?;
    let positions: HashMap<String, usize> = match target.cluster_info() {
        Ok(info) if info.om == om || info.oms.contains(&om) => info
            .datanodes
            .iter()
            .enumerate()
            .map(|(n, d)| (d.id.clone(), n))
            .collect(),
        _ => HashMap::new(),
    };
    if as_json {
        let list = statuses
            .iter()
            .map(|s| {
                json!({
                    "n": positions.get(s.details.uuid.as_str()),
                    "id": s.details.uuid.as_str(),
                    "address": s.details.address,
                    "state": s.state.as_str(),
                    "op_state": s.op_state.as_str(),
                    "last_heartbeat_s": s.since_heartbeat.as_secs_f64(),
                    "used_bytes": s.stats.used_bytes,
                    "blocks": s.stats.blocks,
                    "capacity_bytes": s.stats.capacity_bytes,
                    "open_files": s.stats.open_files,
                })
            })
            .collect();
        output::json(&list)?;
        return Ok(());
    }
    let mut t = Table::new(&[
        "n",
        "id",
        "address",
        "state",
        "operational state",
        "last heartbeat (s)",
        "used bytes",
        "blocks",
        "open files",
    ]);
    for s in &statuses {
        t.row(vec![
            positions
                .get(s.details.uuid.as_str())
                .map_or_else(|| "-".to_string(), ToString::to_string),
            s.details.uuid.to_string(),
            s.details.address.clone(),
            s.state.to_string(),
            s.op_state.to_string(),
            format!("{:.1}", s.since_heartbeat.as_secs_f64()),
            s.stats.used_bytes.to_string(),
            s.stats.blocks.to_string(),
            s.stats.open_files.to_string(),
        ]);
    }
    output::line(t.render())?;
    Ok(())
}
