//! Bearer tokens bound to a role, stored hashed, checked in constant time.
//!
//! A token reads `spw_<id>_<secret>`: the id (not secret) finds the record, the SHA-256 of the whole
//! token is compared with the stored hash in constant time. The secret is 32 random bytes from the
//! operating system, so a plain hash is enough (there is nothing to brute-force). Tokens are never
//! logged; only their ids are.
//!
//! Roles: `admin` (everything, every tenant), `submitter` (one tenant: submit, cancel, complete and
//! read that tenant's jobs), `viewer` (read-only, one tenant or all). A tenant-bound token is told
//! "not found" about other tenants' jobs, so ids of other teams' work do not leak.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use state::{Record, Store, StoreError, TableDef};
use subtle::ConstantTimeEq;

use crate::model::FieldErrors;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything, for every tenant, including managing tokens.
    Admin,
    /// Submit, cancel, complete and read the jobs of one tenant.
    Submitter,
    /// Read only: one tenant's jobs, or every tenant's when unbound.
    Viewer,
}

impl Role {
    /// The lower-case word used in the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Submitter => "submitter",
            Role::Viewer => "viewer",
        }
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "admin" => Ok(Role::Admin),
            "submitter" => Ok(Role::Submitter),
            "viewer" => Ok(Role::Viewer),
            _ => Err(format!("unknown role {s:?}: expected admin, submitter or viewer")),
        }
    }
}

/// A stored token: its hash, never the token itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiToken {
    /// Public identifier (part of the token; used to list and revoke it).
    pub id: String,
    /// Lower-case hex SHA-256 of the whole token.
    pub hash: String,
    /// What it may do.
    pub role: Role,
    /// The one tenant it is bound to (required for submitters, optional for viewers, none for admins).
    pub tenant: Option<String>,
    /// A label for people ("ci", "alice's laptop").
    pub name: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
}

impl Record for ApiToken {
    const TABLE: TableDef = TableDef { name: "api_tokens", indexes: &[] };
    fn key(&self) -> String {
        self.id.clone()
    }
}

/// Who is calling: the token's id, role and tenant binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's id.
    pub token_id: String,
    /// Its role.
    pub role: Role,
    /// Its tenant, when bound to one.
    pub tenant: Option<String>,
}

impl Caller {
    /// True when the caller may see this tenant's jobs.
    pub fn sees_tenant(&self, tenant: &str) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == tenant)
    }

    /// True for roles that may change jobs (admin, submitter).
    pub fn may_write_jobs(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Submitter)
    }

    /// True for admins.
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// How the caller is named in job events ("cancelled by token t-…").
    pub fn describe(&self) -> String {
        match &self.tenant {
            Some(t) => format!("{} token {} ({t})", self.role.as_str(), self.token_id),
            None => format!("{} token {}", self.role.as_str(), self.token_id),
        }
    }
}

/// Why a token could not be created or revoked.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The request is invalid; each problem names its field.
    #[error("invalid token request:\n{0}")]
    Invalid(FieldErrors),
    /// No token with that id.
    #[error("no token {0}")]
    NotFound(String),
    /// Revoking it would leave no admin token.
    #[error("{0}")]
    Conflict(String),
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The admin token file could not be read or written.
    #[error("{0}")]
    Io(String),
}

/// The token table with an in-memory copy for fast checks. On a store only this process opens
/// (sled) every change goes through here, so the copy cannot go stale. On a store several servers
/// share (PostgreSQL), a token created or revoked on another server is read from the store: a copy
/// is trusted for [`SHARED_TOKEN_TTL`] at most, and an unknown id is looked up.
#[derive(Clone)]
pub struct TokenStore {
    store: Store,
    cache: Arc<RwLock<HashMap<String, (ApiToken, std::time::Instant)>>>,
}

/// How long a server sharing its store trusts its copy of a token: a revocation on another server
/// takes effect here within this time.
pub const SHARED_TOKEN_TTL: std::time::Duration = std::time::Duration::from_secs(2);

impl std::fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStore").field("tokens", &self.read().len()).finish()
    }
}

/// The hex SHA-256 of a token.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn random_hex(n: usize) -> Result<String, TokenError> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).map_err(|e| TokenError::Io(format!("no randomness from the operating system: {e}")))?;
    Ok(hex(&buf))
}

/// Letters, digits, `-`, `_`, `.`, at most 63: the same rule as a spec's `tenant`.
fn valid_tenant(t: &str) -> bool {
    !t.is_empty() && t.len() <= 63 && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The admin token file of a data directory.
pub fn admin_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.token")
}

impl TokenStore {
    /// Loads every token of the store.
    pub fn open(store: Store) -> Result<TokenStore, StoreError> {
        let tokens = store.scan::<ApiToken>()?;
        let now = std::time::Instant::now();
        let cache = tokens.into_iter().map(|t| (t.id.clone(), (t, now))).collect();
        Ok(TokenStore { store, cache: Arc::new(RwLock::new(cache)) })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, (ApiToken, std::time::Instant)>> {
        self.cache.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, (ApiToken, std::time::Instant)>> {
        self.cache.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The token record with this id: the copy, or on a shared store the stored record when the copy
    /// is older than [`SHARED_TOKEN_TTL`] or missing (the copy again if the store cannot answer).
    fn lookup(&self, id: &str) -> Option<ApiToken> {
        let cached = self.read().get(id).cloned();
        if !self.store.is_shared() {
            return cached.map(|(t, _)| t);
        }
        if let Some((t, at)) = &cached
            && at.elapsed() < SHARED_TOKEN_TTL
        {
            return Some(t.clone());
        }
        match self.store.get::<ApiToken>(id) {
            Ok(Some(t)) => {
                self.write().insert(id.to_string(), (t.clone(), std::time::Instant::now()));
                Some(t)
            }
            Ok(None) => {
                self.write().remove(id);
                None
            }
            Err(_) => cached.map(|(t, _)| t),
        }
    }

    /// Every token, from the store when it is shared (the copy is refreshed on the way).
    fn all(&self) -> Vec<ApiToken> {
        if self.store.is_shared()
            && let Ok(tokens) = self.store.scan::<ApiToken>()
        {
            let now = std::time::Instant::now();
            *self.write() = tokens.iter().map(|t| (t.id.clone(), (t.clone(), now))).collect();
            return tokens;
        }
        self.read().values().map(|(t, _)| t.clone()).collect()
    }

    /// Checks a presented token; `None` when it is unknown, malformed or revoked.
    pub fn verify(&self, presented: &str) -> Option<Caller> {
        let id = presented.strip_prefix("spw_")?.split('_').next()?;
        let t = self.lookup(id)?;
        let given = hash_token(presented);
        if bool::from(given.as_bytes().ct_eq(t.hash.as_bytes())) {
            Some(Caller { token_id: t.id.clone(), role: t.role, tenant: t.tenant.clone() })
        } else {
            None
        }
    }

    /// Every token (without secrets), oldest first.
    pub fn list(&self) -> Vec<ApiToken> {
        let mut v: Vec<ApiToken> = self.all();
        v.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        v
    }

    /// Creates a token, durably; returns its record and the token itself (shown once, never stored).
    pub fn create(
        &self,
        role: Role,
        tenant: Option<String>,
        name: Option<String>,
        now_ms: i64,
    ) -> Result<(ApiToken, String), TokenError> {
        let mut e = FieldErrors::default();
        match (&role, &tenant) {
            (Role::Admin, Some(_)) => e.push("tenant", "an admin token is not bound to a tenant; leave it out"),
            (Role::Submitter, None) => e.push("tenant", "a submitter token must name the tenant it submits for"),
            _ => {}
        }
        if let Some(t) = &tenant
            && !valid_tenant(t)
        {
            e.push("tenant", "use 1 to 63 letters, digits, '-', '_' or '.'");
        }
        if let Some(n) = &name
            && (n.len() > 100 || n.chars().any(char::is_control))
        {
            e.push("name", "at most 100 characters, no control characters");
        }
        if !e.is_empty() {
            return Err(TokenError::Invalid(e));
        }
        let id = format!("t{}", random_hex(5)?);
        let token = format!("spw_{id}_{}", random_hex(32)?);
        let record = ApiToken { id: id.clone(), hash: hash_token(&token), role, tenant, name, created_at_ms: now_ms };
        self.store.put(&record)?;
        self.store.flush()?;
        self.write().insert(id, (record.clone(), std::time::Instant::now()));
        Ok((record, token))
    }

    /// Revokes a token, durably. Refuses to revoke the last admin token (nobody could manage
    /// tokens afterwards).
    pub fn revoke(&self, id: &str) -> Result<ApiToken, TokenError> {
        let record = self.lookup(id).ok_or_else(|| TokenError::NotFound(id.to_string()))?;
        if record.role == Role::Admin && self.all().iter().filter(|t| t.role == Role::Admin).count() <= 1 {
            return Err(TokenError::Conflict(format!(
                "token {id} is the last admin token; create another admin token before revoking it"
            )));
        }
        self.store.delete::<ApiToken>(id)?;
        self.store.flush()?;
        self.write().remove(id);
        Ok(record)
    }

    /// Makes sure `<data_dir>/admin.token` holds a valid admin token, creating one (file mode
    /// 0600) when the file is missing or its token is not a valid admin token. Returns the path
    /// and whether a token was created. On a store several servers share, only the server that
    /// finds no admin token in it creates one (the first to start on a new database); the others
    /// leave the file missing, and the path returned does not exist.
    pub fn ensure_admin_file(&self, data_dir: &Path, now_ms: i64) -> Result<(PathBuf, bool), TokenError> {
        let path = admin_token_path(data_dir);
        if let Ok(existing) = std::fs::read_to_string(&path)
            && self.verify(existing.trim()).is_some_and(|c| c.is_admin())
        {
            return Ok((path, false));
        }
        if self.store.is_shared() && self.all().iter().any(|t| t.role == Role::Admin) {
            return Ok((path, false));
        }
        let (record, token) = self.create(Role::Admin, None, Some("bootstrap admin".into()), now_ms)?;
        write_private(&path, &format!("{token}\n"))
            .map_err(|e| TokenError::Io(format!("cannot write the admin token to {}: {e}", path.display())))?;
        tracing::info!(token_id = %record.id, path = %path.display(), "created an admin token");
        Ok((path, true))
    }
}

/// Writes a file readable by its owner only (0600), replacing it atomically.
pub fn write_private(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("token.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    opts.mode(0o600);
    let mut f = opts.open(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_store(tag: &str) -> (Store, PathBuf) {
        let dir = std::env::temp_dir().join(format!("spillway-auth-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        (Store::open(&dir).unwrap(), dir)
    }

    #[test]
    fn tokens_verify_only_when_exact_and_survive_a_reopen() {
        let (store, dir) = temp_store("verify");
        let tokens = TokenStore::open(store.clone()).unwrap();
        let (rec, tok) = tokens.create(Role::Submitter, Some("ml".into()), None, 1).unwrap();
        let caller = tokens.verify(&tok).unwrap();
        assert_eq!(caller, Caller { token_id: rec.id.clone(), role: Role::Submitter, tenant: Some("ml".into()) });
        assert_ne!(rec.hash, tok, "only the hash is stored");
        let mut wrong = tok.clone();
        wrong.pop();
        wrong.push(if tok.ends_with('0') { '1' } else { '0' });
        assert!(tokens.verify(&wrong).is_none());
        assert!(tokens.verify("spw_nope_123").is_none());
        assert!(tokens.verify("").is_none());
        let reopened = TokenStore::open(store).unwrap();
        assert!(reopened.verify(&tok).is_some());
        reopened.revoke(&rec.id).unwrap();
        assert!(reopened.verify(&tok).is_none());
        drop(reopened);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn role_and_tenant_rules_are_enforced_at_creation() {
        let (store, dir) = temp_store("rules");
        let tokens = TokenStore::open(store).unwrap();
        let Err(TokenError::Invalid(e)) = tokens.create(Role::Submitter, None, None, 0) else { panic!() };
        assert_eq!(e.0[0].field, "tenant");
        assert!(matches!(tokens.create(Role::Admin, Some("ml".into()), None, 0), Err(TokenError::Invalid(_))));
        assert!(matches!(
            tokens.create(Role::Viewer, Some("bad tenant!".into()), None, 0),
            Err(TokenError::Invalid(_))
        ));
        assert!(tokens.create(Role::Viewer, None, None, 0).is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn admin_file_is_private_reused_and_the_last_admin_cannot_be_revoked() {
        let (store, dir) = temp_store("admin");
        let tokens = TokenStore::open(store).unwrap();
        let (path, created) = tokens.ensure_admin_file(&dir, 0).unwrap();
        assert!(created);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let tok = std::fs::read_to_string(&path).unwrap();
        assert!(tokens.verify(tok.trim()).unwrap().is_admin());
        let (_, again) = tokens.ensure_admin_file(&dir, 0).unwrap();
        assert!(!again, "a valid file is kept");
        let admin_id = tokens.verify(tok.trim()).unwrap().token_id;
        assert!(matches!(tokens.revoke(&admin_id), Err(TokenError::Conflict(_))));
        assert!(matches!(tokens.revoke("tnothing"), Err(TokenError::NotFound(_))));
        let _ = std::fs::remove_dir_all(dir);
    }
}
