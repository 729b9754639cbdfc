//! Credentials and the bearer-token policy of `AzureCloud`'s pipeline.
//!
//! The credential is an `azure_identity` 1.x credential chosen by [`CredentialKind`], or
//! [`StaticTokenCredential`] for tests and emulators. The policy is our own rather than
//! `azure_core`'s `BearerTokenAuthorizationPolicy` because that one refuses every non-https URL,
//! and the emulator is plain http on loopback; [`AzureConfig::validate`] already refuses http to
//! any other host, and the policy checks again before attaching a token.

use std::sync::Arc;

use async_trait::async_trait;
use azure_core::credentials::{AccessToken, Secret, TokenCredential, TokenRequestOptions};
use azure_core::error::ErrorKind;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Request};
use azure_core::time::{Duration as TimeDuration, OffsetDateTime};
use tokio::sync::Mutex;

use super::config::{AzureConfig, CredentialKind, is_loopback};
use crate::cloud::CloudError;

/// A fixed bearer token: for tests and the ARM emulator. Never expires.
#[derive(Clone)]
pub struct StaticTokenCredential {
    token: Secret,
}

impl StaticTokenCredential {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> StaticTokenCredential {
        StaticTokenCredential { token: Secret::new(token.into()) }
    }
}

impl std::fmt::Debug for StaticTokenCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StaticTokenCredential")
    }
}

#[async_trait]
impl TokenCredential for StaticTokenCredential {
    async fn get_token(
        &self,
        _scopes: &[&str],
        _options: Option<TokenRequestOptions<'_>>,
    ) -> azure_core::Result<AccessToken> {
        Ok(AccessToken::new(self.token.clone(), OffsetDateTime::now_utc() + TimeDuration::days(365)))
    }
}

/// Builds the credential the configuration asks for.
pub fn build_credential(config: &AzureConfig) -> Result<Arc<dyn TokenCredential>, CloudError> {
    build_credential_with_env(config, |k| std::env::var(k).ok())
}

/// [`build_credential`] with the environment looked up through `env` (tests).
pub fn build_credential_with_env(
    config: &AzureConfig,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Arc<dyn TokenCredential>, CloudError> {
    let refused = |kind: &str, e: azure_core::Error| CloudError::Permanent {
        code: "CredentialUnavailable".into(),
        message: format!("{kind} credential: {e}"),
    };
    let kind = match config.credential {
        CredentialKind::Auto => auto_kind(&env),
        k => k,
    };
    match kind {
        CredentialKind::StaticToken => match config.token.as_deref() {
            Some(t) if !t.is_empty() => Ok(Arc::new(StaticTokenCredential::new(t))),
            _ => Err(CloudError::Permanent {
                code: "CredentialUnavailable".into(),
                message: "azure.token (or SPILLWAY_AZURE_TOKEN) is required with credential = \"static_token\"".into(),
            }),
        },
        CredentialKind::ClientSecret => {
            let missing: Vec<&str> = ["AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET"]
                .into_iter()
                .filter(|k| env(k).is_none_or(|v| v.is_empty()))
                .collect();
            if !missing.is_empty() {
                return Err(CloudError::Permanent {
                    code: "CredentialUnavailable".into(),
                    message: format!("client secret credential needs {}", missing.join(", ")),
                });
            }
            let tenant = env("AZURE_TENANT_ID").unwrap_or_default();
            let client = env("AZURE_CLIENT_ID").unwrap_or_default();
            let secret = env("AZURE_CLIENT_SECRET").unwrap_or_default();
            let cred = azure_identity::ClientSecretCredential::new(&tenant, client, Secret::new(secret), None)
                .map_err(|e| refused("client secret", e))?;
            Ok(cred)
        }
        CredentialKind::ManagedIdentity => {
            let options = azure_identity::ManagedIdentityCredentialOptions {
                user_assigned_id: config
                    .managed_identity_client_id
                    .clone()
                    .map(azure_identity::UserAssignedId::ClientId),
                ..Default::default()
            };
            let cred = azure_identity::ManagedIdentityCredential::new(Some(options))
                .map_err(|e| refused("managed identity", e))?;
            Ok(cred)
        }
        CredentialKind::DeveloperTools | CredentialKind::Auto => {
            let cred =
                azure_identity::DeveloperToolsCredential::new(None).map_err(|e| refused("developer tools", e))?;
            Ok(cred)
        }
    }
}

/// `Auto`: a service principal in the environment, else a developer tool on the `PATH`, else
/// managed identity.
fn auto_kind(env: &impl Fn(&str) -> Option<String>) -> CredentialKind {
    let set = |k: &str| env(k).is_some_and(|v| !v.is_empty());
    if set("AZURE_TENANT_ID") && set("AZURE_CLIENT_ID") && set("AZURE_CLIENT_SECRET") {
        return CredentialKind::ClientSecret;
    }
    let on_path =
        |tool: &str| env("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()));
    if on_path("az") || on_path("azd") {
        return CredentialKind::DeveloperTools;
    }
    CredentialKind::ManagedIdentity
}

/// Pipeline policy that sets `Authorization: Bearer …`, caching the token until five minutes
/// before it expires, and dropping it when the server answers 401 so the next call fetches anew.
pub struct BearerPolicy {
    credential: Arc<dyn TokenCredential>,
    scope: String,
    cached: Mutex<Option<AccessToken>>,
}

impl BearerPolicy {
    /// A policy for one scope.
    pub fn new(credential: Arc<dyn TokenCredential>, scope: String) -> BearerPolicy {
        BearerPolicy { credential, scope, cached: Mutex::new(None) }
    }

    async fn token(&self) -> azure_core::Result<Secret> {
        let mut cached = self.cached.lock().await;
        if let Some(t) = cached.as_ref()
            && t.expires_on > OffsetDateTime::now_utc() + TimeDuration::minutes(5)
        {
            return Ok(t.token.clone());
        }
        let fresh = self.credential.get_token(&[self.scope.as_str()], None).await?;
        let secret = fresh.token.clone();
        *cached = Some(fresh);
        Ok(secret)
    }
}

impl std::fmt::Debug for BearerPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerPolicy").field("scope", &self.scope).finish_non_exhaustive()
    }
}

#[async_trait]
impl Policy for BearerPolicy {
    async fn send(&self, ctx: &Context, request: &mut Request, next: &[Arc<dyn Policy>]) -> PolicyResult {
        let url = request.url();
        if url.scheme() != "https" && !is_loopback(url) {
            return Err(azure_core::Error::with_message(
                ErrorKind::Other,
                format!("refusing to send a bearer token over plain http to {}", url.host_str().unwrap_or("?")),
            ));
        }
        let token = self.token().await?;
        request.insert_header("authorization", format!("Bearer {}", token.secret()));
        let response = next[0].send(ctx, request, &next[1..]).await?;
        if response.status() == azure_core::http::StatusCode::Unauthorized {
            *self.cached.lock().await = None;
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_prefers_service_principal_then_tools_then_managed_identity() {
        let sp = |k: &str| match k {
            "AZURE_TENANT_ID" | "AZURE_CLIENT_ID" | "AZURE_CLIENT_SECRET" => Some("x".to_string()),
            _ => None,
        };
        assert_eq!(auto_kind(&sp), CredentialKind::ClientSecret);
        let nothing = |_: &str| None;
        assert_eq!(auto_kind(&nothing), CredentialKind::ManagedIdentity);
        let dir = std::env::temp_dir().join(format!("spillway-az-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("az"), "#!/bin/sh\n").unwrap();
        let path = dir.to_string_lossy().to_string();
        let tools = move |k: &str| (k == "PATH").then(|| path.clone());
        assert_eq!(auto_kind(&tools), CredentialKind::DeveloperTools);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn client_secret_without_env_names_what_is_missing() {
        let mut c = AzureConfig::new("00000000-1111-2222-3333-444444444444", "rg");
        c.credential = CredentialKind::ClientSecret;
        let env = |k: &str| (k == "AZURE_TENANT_ID").then(|| "tenant".to_string());
        let err = build_credential_with_env(&c, env).unwrap_err().to_string();
        assert!(err.contains("AZURE_CLIENT_ID") && err.contains("AZURE_CLIENT_SECRET"), "{err}");
        assert!(!err.contains("AZURE_TENANT_ID,"), "{err}");
    }

    #[tokio::test]
    async fn static_token_is_returned_verbatim() {
        let mut c = AzureConfig::new("00000000-1111-2222-3333-444444444444", "rg");
        c.credential = CredentialKind::StaticToken;
        c.token = Some("abc".into());
        let cred = build_credential(&c).unwrap();
        let t = cred.get_token(&["https://management.azure.com/.default"], None).await.unwrap();
        assert_eq!(t.token.secret(), "abc");
    }
}
