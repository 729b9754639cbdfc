//! The store's contract, through its public API: indexes under concurrency, atomic aborts, the event
//! log, export/import, schema versions and migrations, and refusing directories it cannot open.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::{Attempt, Job, Rng, TempDir, attempt, job};
use serde::{Deserialize, Serialize};
use state::{EventDraft, IndexDef, Migration, Migrator, Record, Schema, Store, StoreError, TableDef, TxAbort};

fn draft(kind: &str, job_id: &str) -> EventDraft {
    EventDraft {
        at_ms: 1_700_000_000_000,
        kind: kind.into(),
        job_id: Some(job_id.into()),
        tenant: Some("ml".into()),
        message: format!("{kind} {job_id}"),
        data: serde_json::json!({ "n": 1, "nested": { "z": [1, 2], "a": "x" } }),
    }
}

/// Runs `test` on a store on disk, on one in memory, and on PostgreSQL when a test server is
/// configured (`SPILLWAY_TEST_POSTGRES`): the backends keep one contract.
fn on_each_backend(name: &str, test: impl Fn(Store)) {
    let dir = TempDir::new(name);
    test(Store::open(dir.path()).unwrap());
    let memory = Store::in_memory().unwrap();
    assert!(memory.is_in_memory());
    test(memory);
    if let Some(pg) = common::postgres_store(name) {
        assert!(pg.is_shared());
        test(pg);
    }
}

#[test]
fn indexes_stay_consistent_with_tables_under_concurrent_writers() {
    on_each_backend("concurrent", indexes_stay_consistent_with_tables_under_concurrent_writers_on);
}

fn indexes_stay_consistent_with_tables_under_concurrent_writers_on(store: Store) {
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(t as u64 * 7919 + 1);
                // Every thread works on its own ids and several shared ones, so writers race on
                // the same records and the same index values.
                for i in 0..150 {
                    let id = if rng.below(3) == 0 {
                        format!("shared-{}", rng.below(10))
                    } else {
                        format!("t{t}-{}", rng.below(40))
                    };
                    match rng.below(4) {
                        0 => store.put(&job(&id, "queued")).unwrap(),
                        1 => store
                            .transaction(|tx| {
                                tx.put(&job(&id, "running"))?;
                                tx.put(&attempt(&id))?;
                                tx.append_event(draft("job.started", &id))
                            })
                            .map(|_| ())
                            .unwrap(),
                        2 => store
                            .transaction(|tx| {
                                let old = tx.delete::<Job>(&id)?;
                                tx.delete::<Attempt>(&format!("{id}/a"))?;
                                Ok(old)
                            })
                            .map(|_| ())
                            .unwrap(),
                        _ => store.put(&job(&id, ["done", "failed", "queued"][i % 3])).unwrap(),
                    }
                    if i % 10 == 0 {
                        store.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let report = store.check(&[Job::TABLE, Attempt::TABLE]).unwrap();
    assert!(report.is_consistent(), "{:?}", report.problems);
    let jobs = store.scan::<Job>().unwrap();
    assert!(jobs.len() > 20, "the workload should leave jobs behind, left {}", jobs.len());
    assert_eq!(report.tables.iter().find(|t| t.name == "jobs").unwrap().records, jobs.len() as u64);
    for state in ["queued", "running", "done", "failed"] {
        let want: Vec<_> = jobs.iter().filter(|j| j.state == state).cloned().collect();
        assert_eq!(store.by_index::<Job>("state", state).unwrap(), want, "state index for {state}");
    }
    for tenant in ["tenant-0", "tenant-1", "tenant-2"] {
        let want: Vec<_> = jobs.iter().filter(|j| j.tenant == tenant).cloned().collect();
        assert_eq!(store.by_index::<Job>("tenant", tenant).unwrap(), want, "tenant index for {tenant}");
    }
    // The event log got one strictly increasing number per committed transaction: without gaps
    // where transactions commit one at a time; on PostgreSQL a retried transaction's number is not
    // reused.
    let events = store.events_from(1, usize::MAX).unwrap();
    assert!(!events.is_empty());
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq), "seqs repeat or go back");
    if !store.is_shared() {
        assert!(events.windows(2).all(|w| w[0].seq + 1 == w[1].seq), "seqs have gaps");
    }
    if store.is_shared() {
        // On PostgreSQL a transaction that took a number and logged nothing (aborted, or one that
        // read first and took its number speculatively) leaves the horizon past the last event:
        // a stream starting after it still misses nothing.
        assert!(store.last_seq() >= events.last().unwrap().seq);
        assert!(store.events_from(store.last_seq() + 1, 1).unwrap().is_empty());
    } else {
        assert_eq!(store.last_seq(), events.last().unwrap().seq);
    }
}

/// Concurrent read-modify-write transactions on one record: each increment is applied exactly
/// once (a conflicting transaction runs again on what the other committed).
#[test]
fn conflicting_transactions_are_retried_and_lose_no_update() {
    on_each_backend("increments", |store| {
        store.put(&job("counter", "0")).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let store = store.clone();
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        store
                            .transaction(|tx| {
                                let mut j = tx.get::<Job>("counter")?.unwrap();
                                j.state = (j.state.parse::<u32>().unwrap() + 1).to_string();
                                tx.put(&j)
                            })
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(store.get::<Job>("counter").unwrap().unwrap().state, "100");
    });
}

/// Two transactions each read two records and change the one the other did not: run one after the
/// other, the second sees the first's change. Snapshot isolation alone lets both through ("write
/// skew"); the store must not.
#[test]
fn transactions_are_serializable_not_just_snapshots() {
    on_each_backend("skew", |store| {
        for round in 0..20 {
            let (a, b) = (format!("a{round}"), format!("b{round}"));
            store.put(&job(&a, "on")).unwrap();
            store.put(&job(&b, "on")).unwrap();
            let barrier = Arc::new(std::sync::Barrier::new(2));
            let threads: Vec<_> = [(a.clone(), b.clone()), (b.clone(), a.clone())]
                .into_iter()
                .map(|(mine, theirs)| {
                    let (store, barrier) = (store.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        // Go off duty only if the other is still on.
                        store
                            .transaction(|tx| {
                                let other = tx.get::<Job>(&theirs)?.unwrap();
                                if other.state == "on" {
                                    tx.put(&job(&mine, "off"))?;
                                }
                                Ok(())
                            })
                            .unwrap();
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            let states = [store.get::<Job>(&a).unwrap().unwrap().state, store.get::<Job>(&b).unwrap().unwrap().state];
            assert!(states.iter().any(|s| s == "on"), "round {round}: both went off duty: {states:?}");
        }
    });
}

#[test]
fn an_aborted_transaction_writes_nothing_and_returns_the_callers_error() {
    #[derive(Debug, thiserror::Error)]
    #[error("job {0} is not queued")]
    struct NotQueued(String);

    on_each_backend("abort", |store| {
        store.put(&job("a", "queued")).unwrap();
        let err = store
            .transaction(|tx| -> Result<(), TxAbort> {
                tx.put(&job("a", "running"))?;
                tx.put(&attempt("a"))?;
                tx.append_event(draft("job.started", "a"))?;
                Err(TxAbort::new(NotQueued("a".into())))
            })
            .unwrap_err();
        match &err {
            StoreError::Aborted(inner) => assert_eq!(inner.downcast_ref::<NotQueued>().unwrap().0, "a"),
            other => panic!("expected Aborted, got {other}"),
        }
        assert_eq!(store.get::<Job>("a").unwrap(), Some(job("a", "queued")));
        assert_eq!(store.get::<Attempt>("a/a").unwrap(), None);
        assert!(store.events_from(0, 10).unwrap().is_empty());
        if !store.is_shared() {
            // On PostgreSQL the aborted transaction's number is spent (a gap), and `last_seq` is the
            // horizon below which nothing can appear any more: past it.
            assert_eq!(store.last_seq(), 0);
        }
        assert!(store.by_index::<Job>("state", "running").unwrap().is_empty());
        // A later transaction sees its own writes before commit.
        let seen = store
            .transaction(|tx| {
                tx.put(&job("b", "queued"))?;
                tx.get::<Job>("b")
            })
            .unwrap();
        assert_eq!(seen, Some(job("b", "queued")));
    });
}

#[test]
fn the_last_records_of_an_index_and_of_a_table_are_read_from_the_end() {
    on_each_backend("last", |store| {
        for i in 0..30 {
            store.put(&job(&format!("j{i:02}"), if i % 2 == 0 { "running" } else { "pending" })).unwrap();
        }
        // j28 leaves `running`: its stale index entry, if any, must not be returned.
        store.put(&job("j28", "pending")).unwrap();
        let ids = |v: Vec<Job>| v.into_iter().map(|j| j.id).collect::<Vec<_>>();
        assert_eq!(ids(store.last_by_index::<Job>("state", "running", 3).unwrap()), ["j22", "j24", "j26"]);
        assert_eq!(ids(store.last_by_index::<Job>("state", "pending", 2).unwrap()), ["j28", "j29"]);
        assert_eq!(store.last_by_index::<Job>("state", "running", 100).unwrap().len(), 14);
        assert!(store.last_by_index::<Job>("state", "gone", 5).unwrap().is_empty());
        assert_eq!(ids(store.last::<Job>(2).unwrap()), ["j28", "j29"]);
        assert_eq!(store.count::<Job>().unwrap(), 30);
        assert_eq!(store.count_by_index::<Job>("state", "pending").unwrap(), 16);
        assert!(matches!(store.last_by_index::<Job>("nope", "x", 1), Err(StoreError::UnknownIndex { .. })));
        assert_eq!(ids(store.first_by_index::<Job>("state", "running", 2).unwrap()), ["j00", "j02"]);
        // Below a key (a listing cursor): the page before it, whatever was added above it.
        store.put(&job("j99", "running")).unwrap();
        assert_eq!(
            ids(store.last_by_index_before::<Job>("state", "running", Some("j22"), 3).unwrap()),
            ["j16", "j18", "j20"]
        );
        assert_eq!(ids(store.last_by_index_before::<Job>("state", "running", Some("j03"), 5).unwrap()), ["j00", "j02"]);
        assert!(store.last_by_index_before::<Job>("state", "running", Some("j00"), 5).unwrap().is_empty());
        assert_eq!(ids(store.last_by_index_before::<Job>("state", "pending", None, 1).unwrap()), ["j29"]);
        assert_eq!(ids(store.last_before::<Job>(Some("j10"), 2).unwrap()), ["j08", "j09"]);
        assert_eq!(ids(store.last_before::<Job>(Some("j99"), 1).unwrap()), ["j29"]);
        assert_eq!(ids(store.last_before::<Job>(None, 1).unwrap()), ["j99"]);
    });
}

#[test]
fn old_events_are_trimmed_and_numbering_goes_on() {
    on_each_backend("trim", |store| {
        for i in 0..10 {
            let mut d = draft("job.submitted", &format!("j{i}"));
            d.at_ms = 1_000 * i64::from(i);
            store.transaction(|tx| tx.append_event(d.clone())).unwrap();
        }
        assert_eq!(store.trim_events_before(4_000, 2).unwrap(), 2, "at most `max` per call");
        assert_eq!(store.trim_events_before(4_000, 100).unwrap(), 2);
        let kept: Vec<i64> = store.events_from(0, 100).unwrap().into_iter().map(|e| e.at_ms).collect();
        assert_eq!(kept, [4_000, 5_000, 6_000, 7_000, 8_000, 9_000]);
        let next = store.transaction(|tx| tx.append_event(draft("job.submitted", "j10"))).unwrap();
        assert_eq!(next, 11, "sequence numbers are never reused");
    });
}

#[test]
fn events_are_read_from_a_sequence_and_numbering_survives_reopening() {
    let dir = TempDir::new("events");
    {
        let store = Store::open(dir.path()).unwrap();
        for i in 0..5 {
            let seq = store.transaction(|tx| tx.append_event(draft("job.submitted", &format!("j{i}")))).unwrap();
            assert_eq!(seq, i + 1);
        }
        let two =
            store.transaction(|tx| Ok((tx.append_event(draft("a", "x"))?, tx.append_event(draft("b", "x"))?))).unwrap();
        assert_eq!(two, (6, 7));
        store.flush().unwrap();
        let page = store.events_from(3, 2).unwrap();
        assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(page[0].job_id.as_deref(), Some("j2"));
        assert_eq!(page[0].data, draft("", "").data);
        assert!(store.events_from(8, 10).unwrap().is_empty());
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.last_seq(), 7);
    assert_eq!(store.transaction(|tx| tx.append_event(draft("c", "x"))).unwrap(), 8);
}

#[test]
fn settings_are_typed_and_survive_reopening() {
    let dir = TempDir::new("settings");
    {
        let store = Store::open(dir.path()).unwrap();
        store.set_setting("budget", &serde_json::json!({"ml": 100.5})).unwrap();
        store.set_setting("paused", &true).unwrap();
        assert!(store.delete_setting("paused").unwrap());
        assert!(!store.delete_setting("paused").unwrap());
        store.flush().unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.setting::<BTreeMap<String, f64>>("budget").unwrap().unwrap()["ml"], 100.5);
    assert_eq!(store.setting::<bool>("paused").unwrap(), None);
    let err = store.setting::<bool>("budget").unwrap_err();
    assert!(err.to_string().contains("budget"), "{err}");
}

#[test]
fn export_then_import_round_trips_exactly() {
    let src = TempDir::new("export-src");
    let store = Store::open(src.path()).unwrap();
    for i in 0..30 {
        let id = format!("job-{i}\u{e9}\"q\"");
        store
            .transaction(|tx| {
                tx.put(&job(&id, if i % 3 == 0 { "running" } else { "queued" }))?;
                if i % 3 == 0 {
                    tx.put(&attempt(&id))?;
                    tx.append_event(draft("job.started", &id))?;
                }
                Ok(())
            })
            .unwrap();
    }
    store.set_setting("budget", &serde_json::json!({"z": 1, "a": [1.5, null]})).unwrap();
    store.flush().unwrap();
    let mut first = Vec::new();
    let summary = store.export(&mut first).unwrap();
    assert_eq!((summary.tables, summary.records, summary.events, summary.settings), (2, 40, 10, 1));

    let dst = TempDir::new("export-dst");
    let copy = Store::open(dst.path()).unwrap();
    assert_eq!(copy.import(first.as_slice()).unwrap(), summary);
    let mut second = Vec::new();
    copy.export(&mut second).unwrap();
    assert_eq!(String::from_utf8(second).unwrap(), String::from_utf8(first.clone()).unwrap());

    // Byte for byte per record, indexes rebuilt, and the event numbering continues after the import.
    for j in store.scan::<Job>().unwrap() {
        assert_eq!(copy.get_raw("jobs", &j.id).unwrap(), store.get_raw("jobs", &j.id).unwrap());
    }
    assert_eq!(copy.by_index::<Job>("state", "running").unwrap(), store.by_index::<Job>("state", "running").unwrap());
    assert!(copy.check(&[Job::TABLE, Attempt::TABLE]).unwrap().is_consistent());
    assert_eq!(copy.last_seq(), store.last_seq());
    assert_eq!(copy.transaction(|tx| tx.append_event(draft("x", "y"))).unwrap(), store.last_seq() + 1);

    // The imported store reopens (the import marker is gone) and still matches.
    drop(copy);
    let copy = Store::open(dst.path()).unwrap();
    assert_eq!(copy.scan::<Job>().unwrap(), store.scan::<Job>().unwrap());

    // An in-memory store takes the same export and gives it back unchanged: a what-if run's store can
    // be saved and inspected like a server's.
    let memory = Store::in_memory().unwrap();
    assert_eq!(memory.import(first.as_slice()).unwrap(), summary);
    let mut third = Vec::new();
    memory.export(&mut third).unwrap();
    assert_eq!(String::from_utf8(third).unwrap(), String::from_utf8(first).unwrap());
    assert!(memory.check(&[Job::TABLE, Attempt::TABLE]).unwrap().is_consistent());
}

#[test]
fn import_refuses_a_non_empty_store_and_a_failed_import_is_never_opened_as_complete() {
    let src = TempDir::new("import-src");
    let store = Store::open(src.path()).unwrap();
    store.put(&job("a", "queued")).unwrap();
    let mut dump = Vec::new();
    store.export(&mut dump).unwrap();
    let err = store.import(dump.as_slice()).unwrap_err();
    assert!(matches!(err, StoreError::NotEmpty { .. }), "{err}");

    let mut broken = String::from_utf8(dump).unwrap();
    broken.push_str("{\"kind\":\"record\",\"table\":\"nope\",\"key\":\"k\",\"value\":{}}\n");
    let dst = TempDir::new("import-dst");
    let copy = Store::open(dst.path()).unwrap();
    let err = copy.import(broken.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("line 4") && err.to_string().contains("nope"), "{err}");
    drop(copy);
    let err = Store::open(dst.path()).err().expect("a partial import must not open");
    assert!(matches!(err, StoreError::PartialImport { .. }), "{err}");
    assert!(err.to_string().contains(&dst.path().display().to_string()), "{err}");
}

#[test]
fn a_newer_schema_version_is_refused() {
    static V2: Schema = Schema { version: 2, migrations: &[] };
    let dir = TempDir::new("newer");
    drop(Store::open_with(dir.path(), &V2).unwrap());
    let err = Store::open(dir.path()).err().expect("must refuse a newer schema");
    assert!(matches!(err, StoreError::NewerSchema { found: 2, supported: 1, .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&dir.path().display().to_string()) && msg.contains("version 2"), "{msg}");
    // Refusing did not change it: the newer build still opens it at version 2.
    assert_eq!(Store::open_with(dir.path(), &V2).unwrap().schema_version(), 2);
}

#[test]
fn migrations_run_in_order_and_indexes_are_rebuilt() {
    fn rename_queued(m: &Migrator<'_>) -> Result<(), StoreError> {
        assert_eq!(m.from_version(), 1);
        for (key, mut v) in m.records("jobs")? {
            if v["state"] == "queued" {
                v["state"] = "pending".into();
                m.put("jobs", &key, &v)?;
            }
        }
        Ok(())
    }
    fn drop_failed(m: &Migrator<'_>) -> Result<(), StoreError> {
        assert_eq!(m.from_version(), 2);
        for (key, v) in m.records("jobs")? {
            if v["state"] == "failed" {
                m.delete("jobs", &key)?;
            }
        }
        Ok(())
    }
    static V3: Schema = Schema {
        version: 3,
        migrations: &[Migration { from: 2, run: drop_failed }, Migration { from: 1, run: rename_queued }],
    };
    static V3_GAP: Schema = Schema { version: 3, migrations: &[Migration { from: 2, run: drop_failed }] };

    let dir = TempDir::new("migrate");
    {
        let store = Store::open(dir.path()).unwrap();
        for (id, s) in [("a", "queued"), ("b", "failed"), ("c", "running")] {
            store.put(&job(id, s)).unwrap();
        }
        store.flush().unwrap();
    }
    let err = Store::open_with(dir.path(), &V3_GAP).err().expect("no migration from 1");
    assert!(matches!(err, StoreError::NoMigration { found: 1, target: 3, .. }), "{err}");

    let store = Store::open_with(dir.path(), &V3).unwrap();
    assert_eq!(store.schema_version(), 3);
    assert_eq!(store.by_index::<Job>("state", "pending").unwrap().len(), 1);
    assert!(store.by_index::<Job>("state", "queued").unwrap().is_empty());
    assert!(store.get::<Job>("b").unwrap().is_none());
    assert!(store.check(&[Job::TABLE]).unwrap().is_consistent());
}

#[test]
fn a_directory_sled_cannot_open_is_never_replaced() {
    fn assert_refused(err: StoreError, path: &std::path::Path) {
        let msg = err.to_string();
        eprintln!("refused as expected: {msg}");
        assert!(msg.contains(&path.display().to_string()), "no path in: {msg}");
        assert!(msg.contains("spillway state import"), "no recovery hint in: {msg}");
    }
    // A file where the directory should be.
    let dir = TempDir::new("unopenable");
    std::fs::write(dir.path(), b"not a directory").unwrap();
    assert_refused(Store::open(dir.path()).err().unwrap(), dir.path());
    assert_eq!(std::fs::read(dir.path()).unwrap(), b"not a directory");
    std::fs::remove_file(dir.path()).unwrap();

    // A directory holding something else.
    std::fs::create_dir(dir.path()).unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    assert_refused(Store::open(dir.path()).err().unwrap(), dir.path());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    std::fs::remove_dir_all(dir.path()).unwrap();

    // A real store whose files were overwritten with garbage.
    {
        let store = Store::open(dir.path()).unwrap();
        store.put(&job("a", "queued")).unwrap();
        store.flush().unwrap();
    }
    let garbage: Vec<u8> = (0..200_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let conf = std::fs::read(dir.path().join("conf")).unwrap();
    std::fs::write(dir.path().join("conf"), &garbage[..64]).unwrap();
    std::fs::write(dir.path().join("db"), &garbage).unwrap();
    assert_refused(Store::open(dir.path()).err().expect("garbage must not open"), dir.path());
    assert_eq!(std::fs::read(dir.path().join("db")).unwrap(), garbage, "the database file was modified");
    assert_eq!(std::fs::read(dir.path().join("conf")).unwrap(), &garbage[..64]);

    // Garbage in the database file only: sled 0.34 itself opens that as an empty database; the store
    // must refuse rather than start afresh on top of it, every time.
    std::fs::write(dir.path().join("conf"), &conf).unwrap();
    for _ in 0..2 {
        assert_refused(Store::open(dir.path()).err().expect("a corrupt db must not open as empty"), dir.path());
    }

    // The database file deleted: sled would create a new one.
    std::fs::remove_file(dir.path().join("db")).unwrap();
    assert_refused(Store::open(dir.path()).err().expect("a missing db must not be recreated"), dir.path());
    assert!(!dir.path().join("db").exists());
}

/// sled 0.34 cannot tell a corrupt record in the middle of its log from a torn write at its end: it
/// truncates the file there and opens what came before, silently dropping everything after it (47
/// of 100 acknowledged jobs left, no error, before the store counted its flushes outside the log).
/// Not a crash (SIGKILL and torn tails are covered by `tests/crash.rs`): media corruption.
#[test]
fn a_corrupt_record_mid_log_is_refused_not_truncated() {
    let dir = TempDir::new("midlog");
    {
        let store = Store::open(dir.path()).unwrap();
        for i in 0..100 {
            store.put(&job(&format!("a{i}"), "queued")).unwrap();
        }
        store.flush().unwrap();
    }
    let db = dir.path().join("db");
    let mut bytes = std::fs::read(&db).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 100] {
        *b ^= 0xff;
    }
    std::fs::write(&db, &bytes).unwrap();
    match Store::open(dir.path()) {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
            assert!(msg.contains("spillway state import"), "no way back named: {msg}");
        }
        Ok(store) => panic!("opened with {} of 100 acknowledged jobs", store.scan::<Job>().unwrap().len()),
    }
}

/// Single bytes flipped across a 300-job store (24 places, as the issue that found the problem did):
/// every time, the store either refuses to open, or `check` names damaged records (and the server
/// refuses to start on them), or every acknowledged job is there intact. Never an open store that
/// looks fine with jobs missing.
#[test]
fn single_flipped_bytes_are_refused_or_named_never_silently_lost() {
    let dir = TempDir::new("flips");
    {
        let store = Store::open(dir.path()).unwrap();
        for i in 0..300 {
            store
                .transaction(|tx| {
                    tx.put(&job(&format!("j{i:03}"), "queued"))?;
                    tx.append_event(draft("job.submitted", &format!("j{i:03}")))
                })
                .unwrap();
            if i % 10 == 9 {
                store.flush().unwrap();
            }
        }
        store.flush().unwrap();
    }
    let pristine: Vec<(std::path::PathBuf, Vec<u8>)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect();
    let db_len = pristine.iter().find(|(p, _)| p.ends_with("db")).unwrap().1.len();
    let (mut refused, mut named, mut intact) = (0, 0, 0);
    for flip in 0..24 {
        for (p, b) in &pristine {
            std::fs::write(p, b).unwrap();
        }
        let at = 64 + (db_len - 128) * flip / 23;
        let mut bytes = std::fs::read(dir.path().join("db")).unwrap();
        bytes[at] ^= 0x5a;
        std::fs::write(dir.path().join("db"), &bytes).unwrap();
        let opened = std::panic::catch_unwind(|| Store::open(dir.path()));
        let store = match opened {
            Ok(Ok(store)) => store,
            Ok(Err(_)) | Err(_) => {
                refused += 1;
                continue;
            }
        };
        let report = match store.check_all() {
            Ok(r) => r,
            Err(e) => {
                assert!(matches!(e, StoreError::CorruptLog(_) | StoreError::Corrupt { .. }), "flip at byte {at}: {e}");
                named += 1;
                continue;
            }
        };
        if !report.is_consistent() {
            assert!(!report.problems.is_empty());
            named += 1;
            continue;
        }
        let jobs = store.scan::<Job>();
        match jobs {
            Ok(jobs) => {
                assert_eq!(jobs.len(), 300, "flip at byte {at}: opened, consistent, but {} of 300 jobs", jobs.len());
                for j in &jobs {
                    assert_eq!(*j, job(&j.id, "queued"), "flip at byte {at}: job {} changed", j.id);
                }
                intact += 1;
            }
            Err(e) => {
                assert!(matches!(e, StoreError::Corrupt { .. } | StoreError::CorruptLog(_)), "flip at byte {at}: {e}");
                // Found on a read: the store now refuses writes, saying why.
                assert!(store.health().is_err(), "flip at byte {at}: damage read but the store still writes");
                named += 1;
            }
        }
    }
    eprintln!("24 single-byte flips: {refused} refused at open, {named} named by check, {intact} intact");
    assert_eq!(refused + named + intact, 24);
}

#[test]
fn a_store_in_use_is_refused_with_its_path() {
    let dir = TempDir::new("in-use");
    let _store = Store::open(dir.path()).unwrap();
    let err = Store::open(dir.path()).err().expect("second open must fail");
    assert!(matches!(err, StoreError::InUse { .. }), "{err}");
    assert!(err.to_string().contains(&dir.path().display().to_string()));
}

#[test]
fn the_data_directory_is_created_with_mode_0700() {
    let dir = TempDir::new("mode");
    let nested = dir.path().join("a").join("data");
    drop(Store::open(&nested).unwrap());
    for p in [dir.path(), nested.as_path()] {
        let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{} has mode {mode:o}", p.display());
    }
}

#[test]
fn changing_an_index_definition_rebuilds_it_and_check_finds_damage() {
    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    struct JobByRegion {
        id: String,
        tenant: String,
        state: String,
    }
    impl Record for JobByRegion {
        // Same table, the state index now points elsewhere and the tenant index is gone.
        const TABLE: TableDef = TableDef { name: "jobs", indexes: &[IndexDef { name: "state", pointer: "/tenant" }] };
        fn key(&self) -> String {
            self.id.clone()
        }
    }
    let dir = TempDir::new("redefine");
    {
        let store = Store::open(dir.path()).unwrap();
        store.put(&job("a", "queued")).unwrap();
        store.put(&job("b", "running")).unwrap();
        // Two types claiming one table with different indexes, in one process, is a bug: refused.
        let err = store.get::<JobByRegion>("a").unwrap_err();
        assert!(matches!(err, StoreError::Definition(_)), "{err}");
        store.flush().unwrap();
    }
    {
        let store = Store::open(dir.path()).unwrap();
        let report = store.check(&[JobByRegion::TABLE]).unwrap();
        assert!(!report.is_consistent(), "the recorded definition differs from the caller's");
        let tenant = job("a", "queued").tenant;
        let found = store.by_index::<JobByRegion>("state", &tenant).unwrap();
        assert!(found.iter().any(|j| j.id == "a"));
        assert!(store.check(&[JobByRegion::TABLE]).unwrap().is_consistent());
        assert!(store.check_all().unwrap().is_consistent());
    }
    // Damage an index behind the store's back: check must notice.
    {
        let db = open_raw(dir.path());
        let ix = db.open_tree("i/jobs/state").unwrap();
        let (k, _) = ix.iter().next().unwrap().unwrap();
        ix.remove(k).unwrap();
        ix.insert(b"\0\0\0\x05ghost:zz", &[][..]).unwrap();
        db.flush().unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let report = store.check_all().unwrap();
    let ix = &report.tables[0].indexes[0];
    assert_eq!((ix.missing, ix.stale), (1, 1), "{:?}", report.problems);
    assert_eq!(report.problem_count, 2);
    assert!(
        report.problems.iter().any(|p| p.contains("jobs.state") && p.contains("has no entry")),
        "{:?}",
        report.problems
    );
}

#[test]
fn store_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<Store>();
    let dir = TempDir::new("share");
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let s2 = store.clone();
    std::thread::spawn(move || s2.put(&job("x", "queued")).unwrap()).join().unwrap();
    assert!(store.get::<Job>("x").unwrap().is_some());
}

#[test]
fn index_counts_match_the_records_listed() {
    let dir = TempDir::new("count");
    let store = Store::open(dir.path()).unwrap();
    for (i, state) in ["queued", "queued", "running"].iter().enumerate() {
        store.put(&job(&format!("j{i}"), state)).unwrap();
    }
    store.put(&job("j0", "running")).unwrap();
    for state in ["queued", "running", "done"] {
        assert_eq!(
            store.count_by_index::<Job>("state", state).unwrap(),
            store.by_index::<Job>("state", state).unwrap().len(),
            "{state}"
        );
    }
    assert_eq!(store.count_by_index::<Job>("state", "running").unwrap(), 2);
    assert!(store.count_by_index::<Job>("nope", "x").is_err());
}

/// Reads of unchanged records are served from decoded copies; a change by any writer is seen at
/// once, through `get` and through every index (the copy is used only while the bytes are equal).
#[test]
fn repeated_reads_see_every_change_at_once() {
    let dir = TempDir::new("read-cache");
    let store = Store::open(dir.path()).unwrap();
    store.put(&job("j-1", "running")).unwrap();
    for _ in 0..3 {
        assert_eq!(store.get::<Job>("j-1").unwrap().unwrap().state, "running");
        assert_eq!(store.by_index::<Job>("state", "running").unwrap().len(), 1);
    }
    let mut done = job("j-1", "succeeded");
    done.payload.push_str(" and finished");
    store
        .transaction(|tx| {
            tx.put(&done)?;
            Ok(())
        })
        .unwrap();
    assert_eq!(store.get::<Job>("j-1").unwrap(), Some(done.clone()));
    assert!(store.by_index::<Job>("state", "running").unwrap().is_empty());
    assert_eq!(store.by_index::<Job>("state", "succeeded").unwrap(), vec![done.clone()]);
    assert_eq!(store.by_index::<Job>("tenant", &done.tenant).unwrap(), vec![done]);
    store.delete::<Job>("j-1").unwrap();
    assert_eq!(store.get::<Job>("j-1").unwrap(), None);
    assert!(store.by_index::<Job>("state", "succeeded").unwrap().is_empty());
}

/// sled itself, under the store: its lock is released from background threads a moment after the
/// last handle drops (the store's own open waits for that; a bare `sled::open` right after closing
/// the store failed under load), so this waits too, up to a few seconds.
fn open_raw(path: &std::path::Path) -> sled::Db {
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match sled::open(path) {
            Ok(db) => return db,
            Err(e) if e.to_string().contains("could not acquire lock") && std::time::Instant::now() < give_up => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("open {}: {e}", path.display()),
        }
    }
}
