//! Where a store lives: `sled:DIR` (embedded, one process) or `postgres://…` (shared by several
//! servers), parsed from the `--store` flag or `SPILLWAY_STORE`.
//!
//! A PostgreSQL location is a libpq-style URL (`postgres://user:password@host:port/dbname?…`).
//! Besides what `tokio-postgres` reads (`sslmode=disable|prefer|require`, `connect_timeout`,
//! `application_name`, `options`, …), spillway reads and removes: `sslmode=verify-ca|verify-full`
//! (check the server's certificate), `sslrootcert=PATH` (roots to check it against),
//! `pool_max=N` (connections per server, default 32), `timeout=SECONDS` (longest wait for one answer,
//! default 15) and `azure_ad=true` (the password is an Azure AD access token the server fetches with
//! its managed identity; see `spillway serve`). The password is never shown: [`StoreLocation`]'s
//! `Display` leaves it out.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::kv::pg_tls::TlsSetup;
use crate::kv::postgres::PgConfig;

/// The default `sled:` location, relative to the working directory.
pub const DEFAULT_STORE: &str = "sled:./spillway-data";

/// A parsed store location.
#[derive(Clone)]
pub enum StoreLocation {
    /// An embedded sled database in this directory.
    Sled(PathBuf),
    /// A PostgreSQL database.
    Postgres(Box<PgLocation>),
}

/// A PostgreSQL database and how to reach it.
#[derive(Clone)]
pub struct PgLocation {
    pub(crate) config: tokio_postgres::Config,
    pub(crate) tls: TlsSetup,
    pub(crate) max_connections: usize,
    pub(crate) timeout: Duration,
    azure_ad: bool,
    password: Option<Arc<dyn Fn() -> Result<String, String> + Send + Sync>>,
}

impl PgLocation {
    /// Whether the URL asked for Azure AD authentication (`azure_ad=true`).
    pub fn azure_ad(&self) -> bool {
        self.azure_ad
    }

    /// The user name the URL gives, if any.
    pub fn user(&self) -> Option<&str> {
        self.config.get_user()
    }

    /// Gets the password for each new connection from `provider` (an Azure AD access token, which
    /// expires, is fetched again for every connection).
    pub fn with_password_provider(
        mut self,
        provider: Arc<dyn Fn() -> Result<String, String> + Send + Sync>,
    ) -> PgLocation {
        self.password = Some(provider);
        self
    }

    /// Connections this process may open at most.
    pub fn with_max_connections(mut self, n: usize) -> PgLocation {
        self.max_connections = n.max(1);
        self
    }

    pub(crate) fn pg_config(&self) -> PgConfig {
        PgConfig {
            config: self.config.clone(),
            tls: self.tls.clone(),
            max_connections: self.max_connections,
            timeout: self.timeout,
            password: self.password.clone(),
            display: self.to_string(),
        }
    }
}

impl fmt::Display for PgLocation {
    /// `postgres://user@host:port/dbname`: never the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use tokio_postgres::config::Host;
        f.write_str("postgres://")?;
        if let Some(u) = self.config.get_user() {
            write!(f, "{u}@")?;
        }
        let hosts: Vec<String> = self
            .config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let host = match h {
                    Host::Tcp(h) => h.clone(),
                    Host::Unix(p) => p.display().to_string(),
                };
                match self.config.get_ports().get(i).or(self.config.get_ports().first()) {
                    Some(p) => format!("{host}:{p}"),
                    None => host,
                }
            })
            .collect();
        f.write_str(&hosts.join(","))?;
        if let Some(db) = self.config.get_dbname() {
            write!(f, "/{db}")?;
        }
        Ok(())
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sled(p) => write!(f, "sled:{}", p.display()),
            StoreLocation::Postgres(pg) => pg.fmt(f),
        }
    }
}

impl fmt::Debug for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl StoreLocation {
    /// The sled directory, for `sled:` locations.
    pub fn sled_dir(&self) -> Option<&std::path::Path> {
        match self {
            StoreLocation::Sled(p) => Some(p),
            StoreLocation::Postgres(_) => None,
        }
    }
}

/// Splits `k=v&k=v` and decodes `%XX`.
fn query_pairs(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16)
        {
            out.push(v);
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl FromStr for StoreLocation {
    type Err = String;

    /// `sled:DIR` or `postgres://…` / `postgresql://…`; errors name what is wrong, never the password.
    fn from_str(s: &str) -> Result<StoreLocation, String> {
        if let Some(dir) = s.strip_prefix("sled:") {
            if dir.is_empty() {
                return Err("store location `sled:` names no directory: use sled:DIR".into());
            }
            return Ok(StoreLocation::Sled(PathBuf::from(dir)));
        }
        if !(s.starts_with("postgres://") || s.starts_with("postgresql://")) {
            let shown = s.split('@').next_back().unwrap_or(s);
            return Err(format!("store location {shown:?} is neither sled:DIR nor postgres://USER@HOST:PORT/DBNAME"));
        }
        let (base, query) = s.split_once('?').unwrap_or((s, ""));
        let mut kept = Vec::new();
        let mut sslmode = None;
        let mut rootcert = None;
        // 32: with 16, 64 clients' submissions queued for connections (1,238-1,692/s, p99 131-160
        // ms on 2 cores); with 32, 1,793-2,472/s and p99 under 90 ms (BENCHMARKS.md, #19). Three
        // replicas then open at most 96, within every Azure Database for PostgreSQL tier but the
        // smallest Burstable ones.
        let mut max_connections = 32usize;
        let mut timeout = Duration::from_secs(15);
        let mut azure_ad = false;
        for (k, v) in query_pairs(query) {
            match k.as_str() {
                "sslmode" => sslmode = Some(v),
                "sslrootcert" => rootcert = Some(PathBuf::from(v)),
                "pool_max" => {
                    max_connections = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=1000).contains(n))
                        .ok_or_else(|| format!("store URL: pool_max={v:?} must be a number from 1 to 1000"))?
                }
                "timeout" => {
                    timeout = v
                        .parse::<u64>()
                        .ok()
                        .filter(|n| (1..=3600).contains(n))
                        .map(Duration::from_secs)
                        .ok_or_else(|| format!("store URL: timeout={v:?} must be seconds from 1 to 3600"))?
                }
                "azure_ad" => {
                    azure_ad = match v.as_str() {
                        "true" | "1" => true,
                        "false" | "0" => false,
                        _ => return Err(format!("store URL: azure_ad={v:?} must be true or false")),
                    }
                }
                _ => kept.push((k, v)),
            }
        }
        let mode = sslmode.as_deref().unwrap_or("prefer");
        let (pg_mode, tls) = match mode {
            "disable" => ("disable", TlsSetup::plain()),
            "allow" | "prefer" => ("prefer", TlsSetup::unverified().map_err(|e| format!("store URL: TLS: {e}"))?),
            "require" => ("require", TlsSetup::unverified().map_err(|e| format!("store URL: TLS: {e}"))?),
            "verify-ca" | "verify-full" => {
                ("require", TlsSetup::verified(rootcert.as_deref()).map_err(|e| format!("store URL: {e}"))?)
            }
            other => {
                return Err(format!(
                    "store URL: sslmode={other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        };
        kept.push(("sslmode".into(), pg_mode.into()));
        let rebuilt = format!(
            "{base}?{}",
            kept.iter()
                .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
                .collect::<Vec<_>>()
                .join("&")
        );
        let mut config: tokio_postgres::Config = rebuilt.parse().map_err(|e: tokio_postgres::Error| {
            // The parser's messages quote options, not the password.
            format!("store URL is not a valid PostgreSQL URL: {e}")
        })?;
        if config.get_hosts().is_empty() {
            return Err("store URL names no host: postgres://USER@HOST:PORT/DBNAME".into());
        }
        if config.get_dbname().is_none() {
            return Err("store URL names no database: postgres://USER@HOST:PORT/DBNAME".into());
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        config.keepalives(true).keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("spillway");
        }
        Ok(StoreLocation::Postgres(Box::new(PgLocation {
            config,
            tls,
            max_connections,
            timeout,
            azure_ad,
            password: None,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sled_and_postgres_locations_parse_and_never_show_the_password() {
        assert_eq!(StoreLocation::from_str("sled:/tmp/x").unwrap().to_string(), "sled:/tmp/x");
        let pg = StoreLocation::from_str("postgres://spill:s3cr%40t@db.example:6543/sched?sslmode=disable&pool_max=4")
            .unwrap();
        let shown = pg.to_string();
        assert_eq!(shown, "postgres://spill@db.example:6543/sched");
        let StoreLocation::Postgres(p) = pg else { panic!() };
        assert_eq!(p.config.get_password(), Some(&b"s3cr@t"[..]));
        assert_eq!(p.max_connections, 4);
        for bad in ["mysql://x", "sled:", "postgres://u:pw@h/db?sslmode=maybe", "postgres://u:pw@h/db?pool_max=0"] {
            let e = StoreLocation::from_str(bad).err().unwrap();
            assert!(!e.contains("pw"), "{e}");
        }
        assert!(StoreLocation::from_str("postgres://u@h").unwrap_err().contains("no database"));
        let verify = StoreLocation::from_str("postgres://u@h/db?sslmode=verify-full&sslrootcert=/nonexistent.pem");
        assert!(verify.err().unwrap().contains("/nonexistent.pem"));
    }
}
