//! The datanode registry's durable half: which datanode ids exist and at
//! which address, kept in the metadata store and shared by every om on it.
//! Liveness (last heartbeat, usage figures) stays in each om's memory
//! (`nodes.rs`): when several oms share the store, every datanode will
//! report, and register, to every om, so the registry is read at open only.
//!
//! Tables: `datanodes` (uuid → address) and `datanode_addresses` (address →
//! uuid), so the rule "one entry per address" (a datanode whose data dir
//! was wiped comes back with a new uuid at its old address and replaces its
//! old entry) is checked with two reads, however many datanodes there are.
//! A registration is one `transact` body, so two oms registering datanodes
//! at one address at once leave one entry, and the pair of tables never
//! disagrees.

use meta_store::{MetaStore, RedbStore, Table, transact};
use proto_crate::{DatanodeDetails, DatanodeId};
use redb::{Database, TableDefinition};

use crate::OmError;

/// Datanode uuid → address (`host:port`).
const DATANODES: Table<String, String> = Table::new("datanodes");
/// Address → the uuid registered there.
const ADDRESSES: Table<String, String> = Table::new("datanode_addresses");

/// The redb table of the layout before the store, read once by
/// [`move_onto_store`].
const OLD_DATANODES: TableDefinition<&str, &str> = TableDefinition::new("datanodes");

/// Rows read per store call when the registry is loaded.
const LOAD_PAGE: usize = 1000;

fn parse_uuid(uuid: &str) -> Result<DatanodeId, OmError> {
    uuid.parse().map_err(|e| OmError::CorruptRecord {
        what: "datanode".into(),
        source: Box::new(e),
    })
}

/// Records that datanode `d` is at `d.address`, in one `transact` body:
/// an entry of another uuid at that address is removed, and so is `d`'s
/// index row at an address it left. An index row naming a uuid that is
/// no longer at that address is overwritten without touching that uuid's
/// entry. Returns the uuids replaced (empty when the store already said
/// so, and then nothing is written).
///
/// # Errors
/// Store errors; [`OmError::CorruptRecord`] for a replaced uuid that does
/// not parse.
pub(crate) async fn record(
    store: &MetaStore,
    d: &DatanodeDetails,
) -> Result<Vec<DatanodeId>, OmError> {
    let uuid = d.uuid.to_string();
    let (uuid, address) = (&uuid, &d.address);
    let replaced = transact(store, |tx| {
        Box::pin(async move {
            let old_address = DATANODES.get_in(&tx, uuid).await?;
            let holder = ADDRESSES.get_in(&tx, address).await?;
            if old_address.as_ref() == Some(address) && holder.as_ref() == Some(uuid) {
                return Ok::<_, OmError>(Vec::new());
            }
            if let Some(old) = old_address.filter(|a| a != address)
                && ADDRESSES.get_in(&tx, &old).await?.as_ref() == Some(uuid)
            {
                ADDRESSES.delete_in(&tx, &old);
            }
            let mut replaced = Vec::new();
            if let Some(other) = holder.filter(|h| h != uuid)
                && DATANODES.get_in(&tx, &other).await?.as_ref() == Some(address)
            {
                DATANODES.delete_in(&tx, &other);
                replaced.push(parse_uuid(&other)?);
            }
            DATANODES.put_in(&tx, uuid, address);
            ADDRESSES.put_in(&tx, address, uuid);
            Ok(replaced)
        })
    })
    .await?
    .value;
    Ok(replaced)
}

/// Every registered datanode, in uuid order, read page by page.
///
/// # Errors
/// Store errors; [`OmError::CorruptRecord`] for a uuid that does not parse.
pub(crate) async fn load(store: &MetaStore) -> Result<Vec<DatanodeDetails>, OmError> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = DATANODES
            .scan(store, &(), after.as_ref(), LOAD_PAGE)
            .await?;
        for row in &page.rows {
            out.push(DatanodeDetails {
                uuid: parse_uuid(&row.key)?,
                address: row.value.clone(),
            });
        }
        match page.rows.last() {
            Some(last) if page.more => after = Some(last.key.clone()),
            _ => return Ok(out),
        }
    }
}

/// Copies the registry of an `om.redb` from before the store (the redb
/// table `datanodes`) into `own`, the store over the same file, with the
/// address index, then drops the old table. Rows already in the store are
/// kept, so a crash between the copy and the drop repeats it harmlessly.
///
/// # Errors
/// Database and store errors; [`OmError::CorruptRecord`] for a uuid that
/// does not parse (the old table is then kept); [`OmError::Internal`] when
/// there are rows to copy and `own` is `None` (the om's store is elsewhere).
pub(crate) fn move_onto_store(db: &Database, own: Option<&RedbStore>) -> Result<(), OmError> {
    let mut addresses = std::collections::BTreeSet::new();
    crate::store_moves::move_old_table(db, own, OLD_DATANODES, |uuid, address, rows| {
        parse_uuid(uuid)?;
        // The old registry kept one entry per address too; a second one
        // could have no index row, so it is not moved (and goes with the
        // old table; the datanode registers again when it next reports).
        if addresses.insert(address.to_string()) {
            rows.push(ADDRESSES.row_bytes(&address.to_string(), &uuid.to_string()));
            rows.push(DATANODES.row_bytes(&uuid.to_string(), &address.to_string()));
        } else {
            tracing::warn!(%uuid, %address, "a second datanode entry at one address is not moved");
        }
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use meta_store::RedbStore;

    use super::*;
    use crate::test_oms::{BACKENDS, store_on};

    fn dn(i: u128, port: u32) -> DatanodeDetails {
        DatanodeDetails {
            uuid: DatanodeId::from_u128(i),
            address: format!("127.0.0.1:{port}"),
        }
    }

    async fn index(store: &MetaStore) -> Vec<(String, String)> {
        ADDRESSES
            .scan(store, &(), None, 100)
            .await
            .expect("scan")
            .rows
            .into_iter()
            .map(|r| (r.key, r.value))
            .collect()
    }

    #[tokio::test]
    async fn one_entry_per_address_and_the_index_follows_moves() {
        for b in BACKENDS {
            let (store, _kept) = store_on(b).await;
            one_entry_per_address_and_the_index_follows_moves_on(store).await;
        }
    }

    async fn one_entry_per_address_and_the_index_follows_moves_on(store: MetaStore) {
        assert!(record(&store, &dn(1, 1)).await.expect("a").is_empty());
        assert!(record(&store, &dn(1, 1)).await.expect("again").is_empty());
        assert!(record(&store, &dn(2, 2)).await.expect("b").is_empty());
        // A wiped datanode comes back at port 1 with a new id.
        let replaced = record(&store, &dn(3, 1)).await.expect("new id");
        assert_eq!(replaced, vec![dn(1, 1).uuid]);
        // Datanode 2 moves to port 4: its old index row goes.
        assert!(record(&store, &dn(2, 4)).await.expect("move").is_empty());
        assert_eq!(load(&store).await.expect("load"), vec![dn(2, 4), dn(3, 1)]);
        assert_eq!(
            index(&store).await,
            vec![
                ("127.0.0.1:1".to_string(), dn(3, 1).uuid.to_string()),
                ("127.0.0.1:4".to_string(), dn(2, 4).uuid.to_string()),
            ]
        );
        // Datanode 5 at port 5 then moves onto port 4: both at once.
        assert!(record(&store, &dn(5, 5)).await.expect("5").is_empty());
        assert_eq!(
            record(&store, &dn(5, 4)).await.expect("onto 4"),
            vec![dn(2, 4).uuid]
        );
        assert_eq!(load(&store).await.expect("load"), vec![dn(3, 1), dn(5, 4)]);
        assert_eq!(
            index(&store).await,
            vec![
                ("127.0.0.1:1".to_string(), dn(3, 1).uuid.to_string()),
                ("127.0.0.1:4".to_string(), dn(5, 4).uuid.to_string()),
            ]
        );
        // A stale index row (port 9 names datanode 3, which is at port 1)
        // is overwritten without dropping datanode 3.
        let stale = ADDRESSES.put(
            meta_store::Txn::new(),
            &"127.0.0.1:9".to_string(),
            &dn(3, 1).uuid.to_string(),
        );
        store.commit(stale).await.expect("stale row");
        assert!(record(&store, &dn(6, 9)).await.expect("6").is_empty());
        assert_eq!(
            load(&store).await.expect("load"),
            vec![dn(3, 1), dn(5, 4), dn(6, 9)]
        );
    }

    /// Several registrations at one address at once (as from two oms)
    /// leave one entry and an index that agrees with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn racing_registrations_at_one_address_leave_one_entry() {
        for b in BACKENDS {
            let (store, _kept) = store_on(b).await;
            racing_registrations_at_one_address_leave_one_entry_on(store).await;
        }
    }

    async fn racing_registrations_at_one_address_leave_one_entry_on(store: MetaStore) {
        let all = (0..8).map(|i| {
            let store = store.clone();
            tokio::spawn(async move { record(&store, &dn(i, 7)).await })
        });
        for t in all {
            t.await.expect("task").expect("record");
        }
        let entries = load(&store).await.expect("load");
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(
            index(&store).await,
            vec![("127.0.0.1:7".to_string(), entries[0].uuid.to_string())]
        );
    }

    #[tokio::test]
    async fn the_old_table_moves_onto_the_store() {
        let dir = tempfile::tempdir().expect("dir");
        let db = std::sync::Arc::new(Database::create(dir.path().join("om.redb")).expect("db"));
        {
            let txn = db.begin_write().expect("txn");
            {
                let mut t = txn.open_table(OLD_DATANODES).expect("table");
                for d in [dn(1, 1), dn(2, 2)] {
                    t.insert(d.uuid.as_str(), d.address.as_str())
                        .expect("insert");
                }
            }
            txn.commit().expect("commit");
        }
        let own = RedbStore::with_database(std::sync::Arc::clone(&db)).expect("store");
        let store = MetaStore::Redb(own.clone());
        move_onto_store(&db, Some(&own)).expect("move");
        move_onto_store(&db, Some(&own)).expect("nothing left to move");
        assert_eq!(load(&store).await.expect("load"), vec![dn(1, 1), dn(2, 2)]);
        assert_eq!(index(&store).await.len(), 2);
        // The index works for the moved rows: a new id at port 2 replaces.
        assert_eq!(
            record(&store, &dn(9, 2)).await.expect("record"),
            vec![dn(2, 2).uuid]
        );
    }
}
