//! Shared by the integration tests: record types like the scheduler's, and temporary directories.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use state::{IndexDef, Record, TableDef};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub tenant: String,
    pub state: String,
    pub attempt: Option<String>,
    pub payload: String,
}

impl Record for Job {
    const TABLE: TableDef = TableDef {
        name: "jobs",
        indexes: &[IndexDef { name: "state", pointer: "/state" }, IndexDef { name: "tenant", pointer: "/tenant" }],
    };
    fn key(&self) -> String {
        self.id.clone()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub id: String,
    pub job_id: String,
    pub region: String,
}

impl Record for Attempt {
    const TABLE: TableDef = TableDef { name: "attempts", indexes: &[IndexDef { name: "job", pointer: "/job_id" }] };
    fn key(&self) -> String {
        self.id.clone()
    }
}

/// A deterministic job for an id, so a reader can tell whether the stored bytes are intact.
pub fn job(id: &str, state: &str) -> Job {
    let h = fnv(id);
    let len = (h % 3000) as usize + 10;
    let payload: String = id.bytes().cycle().take(len).map(|b| (b'a' + b % 26) as char).collect();
    Job {
        id: id.into(),
        tenant: format!("tenant-{}", h % 3),
        state: state.into(),
        attempt: (state == "running").then(|| format!("{id}/a")),
        payload,
    }
}

pub fn attempt(job_id: &str) -> Attempt {
    Attempt { id: format!("{job_id}/a"), job_id: job_id.into(), region: "eastus".into() }
}

pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// A directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "spillway-state-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A tiny xorshift generator: tests need reproducible randomness, not a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn from_time() -> Rng {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        Rng(t | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The environment variable that names a PostgreSQL server for the tests (a superuser URL such as
/// `postgres://postgres@127.0.0.1:5432/postgres`; `.ci/run` starts a throw-away cluster and sets it).
pub const POSTGRES_ENV: &str = "SPILLWAY_TEST_POSTGRES";

/// A fresh, empty database on the test server, as a store URL; `None` (with a note on stderr)
/// when `SPILLWAY_TEST_POSTGRES` is not set. Each call drops and creates its own database.
pub fn postgres_url(name: &str) -> Option<String> {
    let Ok(admin) = std::env::var(POSTGRES_ENV) else {
        eprintln!("skipping the PostgreSQL part of `{name}`: {POSTGRES_ENV} is not set (see .ci/run)");
        return None;
    };
    static N: AtomicU64 = AtomicU64::new(0);
    let db = format!("spw_{}_{}_{}", name.replace('-', "_"), std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.expect("test server");
        tokio::spawn(conn);
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {db}")).await.unwrap();
        client.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
    });
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    let query = admin.split_once('?').map(|(_, q)| format!("?{q}")).unwrap_or_default();
    let base = base.split_once('?').map(|(b, _)| b).unwrap_or(base);
    Some(format!("{base}/{db}{query}"))
}

/// Runs SQL as the test server's administrator.
pub fn admin_sql(admin: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls).await.expect("test server");
        tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap();
    });
}

/// The first column of the first row of `sql` run as the test server's administrator, as text.
pub fn admin_query(admin: &str, sql: &str) -> String {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(admin, tokio_postgres::NoTls).await.expect("test server");
        tokio::spawn(conn);
        let rows = client.simple_query(sql).await.unwrap();
        rows.iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap_or_default().to_string()),
                _ => None,
            })
            .unwrap_or_default()
    })
}

/// A store on a fresh PostgreSQL database (see [`postgres_url`]).
pub fn postgres_store(name: &str) -> Option<state::Store> {
    let url = postgres_url(name)?;
    let location: state::StoreLocation = url.parse().unwrap();
    Some(state::Store::open_location(&location).unwrap())
}
