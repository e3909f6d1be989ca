//! Om failover on etcd (issue 18): three etcd members, two om processes
//! (both serve; one runs the background services) and five datanodes, all
//! real processes on loopback. A writer writes keys without pause while an
//! etcd member is killed, then the om running the background services; the
//! other takes them over and the writer's client fails over to it; both
//! come back. Every key whose close returned Ok reads back exactly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ec_client::{BucketOptions, Client, ClientConfig, ReplicationConfig};
use minicluster::process::{Binaries, ProcessCluster, ProcessOptions, ProcessTimings, Target};
use rand::{Rng, SeedableRng};

/// Keys acknowledged (close returned Ok), with the bytes written; waited
/// on through its receivers.
type Acked = Arc<tokio::sync::watch::Sender<Vec<(String, Vec<u8>)>>>;

/// Waits until `acked` holds at least `n` keys (at most 60 s); `Err` says
/// how many there were.
async fn wait_for_acks(acked: &Acked, n: usize, what: &str) -> Result<(), String> {
    let mut seen = acked.subscribe();
    match tokio::time::timeout(Duration::from_secs(60), seen.wait_for(|a| a.len() >= n)).await {
        Ok(Ok(_)) => Ok(()),
        _ => Err(format!(
            "{what}: {} keys acknowledged, {n} expected",
            acked.borrow().len()
        )),
    }
}

/// The index of the om running the background services (one must).
async fn leading(cluster: &ProcessCluster) -> usize {
    cluster
        .leading_om()
        .await
        .expect("ask etcd")
        .expect("an om leads")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_services_move_when_their_om_dies_and_no_acknowledged_key_is_lost() {
    let seed: u64 = std::env::var("HA_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(18);
    eprintln!("om failover test seed {seed} (HA_TEST_SEED={seed} replays it)");
    let bins = Binaries::locate().expect("om and datanode binaries");
    // Kept when the test fails (the logs), removed when it passes.
    let dir = tempfile::tempdir().expect("temp dir").keep();
    let timings = ProcessTimings {
        // Long enough that a leader's renewals ride out the loss of the
        // etcd member they went through, and of the raft leader (a new one
        // is elected within about etcd's 1 s election timeout).
        lead_ttl: Duration::from_secs(6),
        ..ProcessTimings::default()
    };
    let options = ProcessOptions {
        etcd_members: 3,
        oms: 2,
        ..ProcessOptions::default()
    };
    let mut cluster = ProcessCluster::start_with(&bins, &dir, 5, timings, options)
        .await
        .expect("cluster");
    assert_eq!(cluster.om_addresses().len(), 2);
    let client = Client::connect(&cluster.om_address(), ClientConfig::default())
        .await
        .expect("client");
    let options = BucketOptions {
        replication: Some(ReplicationConfig::Ec("rs-3-2-64k".parse().expect("scheme"))),
        block_size: Some(64 * 1024),
        ..Default::default()
    };
    // Both oms serve from the start, whether or not one runs the services yet.
    client
        .create_bucket("ha", options)
        .await
        .expect("create the bucket");
    let first_leader = cluster
        .wait_for_leading_om(timings.lead_ttl * 3, |_| true)
        .await
        .expect("an om runs the services");
    // The om that does not run the services serves writes and reads too.
    let other = cluster.om_addresses()[1 - first_leader].clone();
    let direct = Client::connect(&other, ClientConfig::default())
        .await
        .expect("client of the other om");
    let mut w = direct
        .create_key("ha", "through-the-other-om", None)
        .await
        .expect("open through the other om");
    w.write(b"served by either om").await.expect("write");
    w.close().await.expect("close through the other om");
    let r = client
        .open_key("ha", "through-the-other-om")
        .await
        .expect("visible through the list");
    let mut back = vec![0u8; 19];
    r.read_exact_at(0, &mut back).await.expect("read");
    assert_eq!(&back, b"served by either om");

    // The writer: keys of seeded sizes (a block group is 192 KiB, so many
    // allocate more than once), one after another until told to stop.
    let acked: Acked = Arc::new(tokio::sync::watch::Sender::new(Vec::new()));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    // A stall fails the test with the writer's errors, keeping the logs.
    let progress = {
        let failed = Arc::clone(&failed);
        let kept = dir.clone();
        move |r: Result<(), String>| {
            if let Err(why) = r {
                let failed = failed.lock().map(|f| f.clone()).unwrap_or_default();
                panic!(
                    "{why}; failed writes: {failed:?}; logs in {}",
                    kept.display()
                );
            }
        }
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn({
        let client = client.clone();
        let acked = Arc::clone(&acked);
        let failed = Arc::clone(&failed);
        async move {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let mut i = 0u32;
            while !*stopped.borrow() {
                let name = format!("k{i:05}");
                i += 1;
                let len = rng.random_range(1..400_000usize);
                let data: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                let written = async {
                    let mut w = client.create_key("ha", &name, None).await?;
                    w.write(&data).await?;
                    w.close().await
                }
                .await;
                match written {
                    Ok(_) => acked.send_modify(|a| a.push((name, data))),
                    Err(e) => failed.lock().expect("failed").push(format!("{name}: {e}")),
                }
            }
        }
    });

    progress(wait_for_acks(&acked, 5, "before any kill").await);
    // An etcd member goes: writes go on.
    cluster
        .kill(Target::Etcd(2))
        .await
        .expect("kill etcd member 2");
    let n = acked.borrow().len();
    progress(wait_for_acks(&acked, n + 5, "with one etcd member down").await);
    // The leading om goes (SIGKILL: no resignation, its lease runs out).
    let leader = leading(&cluster).await;
    assert_eq!(leader, first_leader, "the lead moved without an om dying");
    cluster
        .kill(Target::OmAt(leader))
        .await
        .expect("kill the leading om");
    let n = acked.borrow().len();
    progress(wait_for_acks(&acked, n + 5, "after the leading om was killed").await);
    let new_leader = cluster
        .wait_for_leading_om(timings.lead_ttl * 3, |i| i != leader)
        .await
        .expect("another om takes the services over");
    // Both come back: the member rejoins, the om serves beside the other.
    cluster
        .restart(Target::Etcd(2))
        .await
        .expect("restart etcd member 2");
    cluster
        .restart(Target::OmAt(leader))
        .await
        .expect("restart the killed om");
    let n = acked.borrow().len();
    progress(wait_for_acks(&acked, n + 5, "after the restarts").await);
    assert_eq!(
        cluster.leading_om().await.expect("ask etcd"),
        Some(new_leader),
        "a restarted om leaves the services where they are"
    );
    // The ReplicationManager's status is the services' om's memory: it answers, the other
    // says NOT_LEADER naming it.
    // Its services run: its ReplicationManager answers and makes passes (asked until it
    // has, since a lead may still be settling after the restarts).
    let addresses = cluster.om_addresses();
    cluster
        .wait_for_repair_passes(new_leader, 1, Duration::from_secs(30))
        .await
        .expect("the services resumed on the other om");
    let mut at_other = om::OmAdminClient::connect(&addresses[leader], None)
        .await
        .expect("admin client");
    let refused = at_other
        .repair_status()
        .await
        .expect_err("the other om does not run the services");
    assert_eq!(
        refused.om_code,
        proto_crate::OmErrorCode::NotLeader,
        "{refused}"
    );
    assert!(
        refused.message.contains(&addresses[new_leader]),
        "{refused}"
    );
    stop.send_replace(true);
    writer.await.expect("writer");

    let acked = acked.borrow().clone();
    let failed = failed.lock().expect("failed").clone();
    eprintln!(
        "{} keys acknowledged, {} failed: {failed:?}",
        acked.len(),
        failed.len()
    );
    for (name, data) in &acked {
        let r = client.open_key("ha", name).await.expect("open");
        let mut back = vec![0u8; data.len()];
        r.read_exact_at(0, &mut back).await.expect("read");
        assert!(back == *data, "{name} reads back exactly");
    }
    // No key that was acknowledged is missing from the listing either.
    let mut listed: Vec<String> = Vec::new();
    loop {
        let after = listed.last().cloned().unwrap_or_default();
        let page = client
            .list_keys("ha", "", &after, 1000)
            .await
            .expect("list");
        if page.is_empty() {
            break;
        }
        listed.extend(page.into_iter().map(|k| k.name));
    }
    for (name, _) in &acked {
        assert!(listed.contains(name), "{name} is listed");
    }
    cluster.stop_all().await.expect("stop");
    let _ = std::fs::remove_dir_all(&dir);
}
