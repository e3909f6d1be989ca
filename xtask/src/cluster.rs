//! `cargo xtask cluster --processes`: the om, the datanodes and the S3
//! gateway as separate processes (the release binaries), with the
//! binaries' own timings, described in the same `cluster.json` as the
//! minicluster (plus `pids`), until Ctrl-C or SIGTERM stops them all.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use minicluster::process::{Binaries, ProcessCluster, ProcessOptions, ProcessTimings};
use minicluster::{
    ClusterInfo, DatanodeInfo, MiniCluster, S3_ACCESS_KEY, S3_SECRET_KEY, S3Info, TlsInfo,
};

/// `cargo xtask cluster` arguments.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Run every service as its own process (the only mode; `cargo xtask
    /// minicluster` runs them in one process).
    #[arg(long, required = true)]
    processes: bool,
    /// Number of datanodes.
    #[arg(long, default_value_t = 5)]
    datanodes: usize,
    /// Directory for cluster data, logs (`logs/`) and cluster.json (default
    /// target/minicluster, where every `cargo xtask` command looks). Locked
    /// while the cluster runs; what an earlier cluster left there is removed.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Port of the S3 gateway on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    s3_port: u16,
    /// TLS on every gRPC channel and HTTPS on the gateway: a throwaway CA
    /// and role certificates under DIR/tls/, named in cluster.json.
    #[arg(long)]
    tls: bool,
    /// Om processes: more than one needs `--etcd`; every om serves, one
    /// runs the background services, and another takes them over within
    /// the lease (`--lead-ttl`, 10 s) when it dies.
    #[arg(long, default_value_t = 1)]
    oms: usize,
    /// Keep the om's metadata on local etcd members (Debian's
    /// `etcd-server`, started under DIR/etcd) instead of `om.redb`.
    #[arg(long, value_name = "MEMBERS", num_args = 0..=1, default_missing_value = "1")]
    etcd: Option<usize>,
    /// Do not build the binaries first (use what target/release holds).
    #[arg(long)]
    no_build: bool,
}

/// Builds the release binaries (unless told not to), starts the cluster,
/// writes cluster.json, and serves until Ctrl-C or SIGTERM.
pub async fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let root = crate::workspace_root();
    let dir = args
        .data_dir
        .clone()
        .unwrap_or_else(|| root.join("target/minicluster"));
    let dir = std::path::absolute(&dir).unwrap_or(dir);
    anyhow::ensure!(args.oms >= 1, "--oms must be at least 1");
    anyhow::ensure!(
        args.oms == 1 || args.etcd.is_some(),
        "--oms {} needs --etcd: several oms share their metadata on etcd",
        args.oms
    );
    anyhow::ensure!(args.etcd != Some(0), "--etcd takes at least one member");
    let signals = proto_crate::ShutdownSignals::install().context("installing signal handlers")?;
    if !args.no_build {
        build_service_binaries()?;
    }
    let bins = Binaries::locate()?;
    let _lock = minicluster::claim_base_dir(&dir)?;
    let json = dir.join("cluster.json");
    let options = ProcessOptions {
        tls: args.tls,
        oms: args.oms,
        etcd_members: args.etcd.unwrap_or(0),
        ..ProcessOptions::default()
    };
    let mut cluster = ProcessCluster::start_with(
        &bins,
        &dir,
        args.datanodes,
        ProcessTimings::service(),
        options,
    )
    .await?;
    let served = serve(&mut cluster, &bins, &args, &json, signals).await;
    // Whatever happened, the processes go.
    let stopped = cluster.stop_all().await;
    let _ = std::fs::remove_file(&json);
    served?;
    stopped?;
    println!("stopped");
    Ok(())
}

/// Builds the om, datanode and s3-gateway binaries (release), which
/// [`Binaries::locate`] then finds next to the running xtask.
///
/// xtask is named in the same build so that cargo resolves every shared
/// dependency's features as it did for xtask itself (xtask's graph turns on
/// more of tokio and num-traits than the three services do): built alone,
/// the services recompiled tokio, tonic, rustls and the rest, about 5 min on
/// two cores; built with xtask, only the three binaries are compiled.
///
/// # Errors
/// When cargo cannot run or the build fails.
pub(crate) fn build_service_binaries() -> anyhow::Result<()> {
    println!("building the om, datanode and s3-gateway binaries (release)…");
    let status = std::process::Command::new(std::env::var_os("CARGO").unwrap_or("cargo".into()))
        .current_dir(crate::workspace_root())
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "xtask",
            "-p",
            "om",
            "-p",
            "datanode",
            "-p",
            "s3-gateway",
        ])
        .status()
        .context("running cargo build")?;
    anyhow::ensure!(status.success(), "cargo build failed ({status})");
    Ok(())
}

async fn serve(
    cluster: &mut ProcessCluster,
    bins: &Binaries,
    args: &ClusterArgs,
    json: &std::path::Path,
    signals: proto_crate::ShutdownSignals,
) -> anyhow::Result<()> {
    let endpoint = cluster
        .start_gateway(bins, args.s3_port, S3_ACCESS_KEY, S3_SECRET_KEY)
        .await?;
    let client_tls = cluster.client_tls()?;
    let client = ec_client::Client::connect(
        &cluster.om_address(),
        ec_client::ClientConfig::default().with_tls(client_tls),
    )
    .await?;
    // Datanode ids, in cluster order, from the om they registered with (a
    // datanode may say it serves a moment before its registration lands).
    let addresses = cluster.datanode_addresses();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    let registered = loop {
        let listed = client.datanodes().await?;
        if addresses
            .iter()
            .all(|a| listed.iter().any(|d| &d.address == a))
        {
            break listed;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not every datanode registered with the om within 30 s (see the logs under {})",
            cluster.base_dir().join("logs").display()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let datanodes = addresses
        .into_iter()
        .map(|address| DatanodeInfo {
            id: registered
                .iter()
                .find(|d| d.address == address)
                .map(|d| d.uuid.to_string())
                .unwrap_or_default(),
            address,
        })
        .collect();
    let absolute = |p: &std::path::Path| p.display().to_string();
    let info = ClusterInfo {
        om: cluster.om_address(),
        oms: if args.oms > 1 {
            cluster.om_addresses()
        } else {
            Vec::new()
        },
        datanodes,
        control: None,
        s3: Some(S3Info {
            endpoint: endpoint.clone(),
            access_key: S3_ACCESS_KEY.to_string(),
            secret_key: S3_SECRET_KEY.to_string(),
        }),
        metrics: None,
        block_tokens: true,
        tls: cluster.tls().map(|t| TlsInfo {
            ca: absolute(&t.cluster.ca),
            admin_cert: Some(absolute(&t.admin.cert)),
            admin_key: Some(absolute(&t.admin.key)),
        }),
        pids: Some(cluster.pids()),
    };
    MiniCluster::write_cluster_json(&info, json)?;
    println!(
        "om          {} (pid {:?})",
        info.om,
        info.pids.as_ref().map(|p| p.oms.clone())
    );
    if let Some(pids) = info.pids.as_ref().filter(|p| !p.etcd.is_empty()) {
        let leader = cluster.leading_om().await?;
        println!(
            "etcd        pids {:?}; om {} leads",
            pids.etcd,
            leader.map_or("none yet".to_string(), |i| i.to_string())
        );
    }
    for (i, d) in info.datanodes.iter().enumerate() {
        println!("datanode {i}  {} {}", d.address, d.id);
    }
    println!("s3 gateway  {endpoint} (access key {S3_ACCESS_KEY}, secret key {S3_SECRET_KEY})");
    println!("logs        {}", cluster.base_dir().join("logs").display());
    println!("cluster.json: {}", json.display());
    println!(
        "serving; try `cargo xtask key ls` or `cargo xtask admin user create NAME`. Ctrl-C stops."
    );
    signals.recv().await;
    Ok(())
}
