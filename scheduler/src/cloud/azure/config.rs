//! [`AzureConfig`]: where and how `AzureCloud` talks to Azure Resource Manager.
//!
//! Read from the `[azure]` table of a TOML file, then overridden by `SPILLWAY_AZURE_*` environment
//! variables (so a deployment can set the subscription without writing a file). Unknown keys are
//! errors; every problem is reported with its field name in one pass.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::FieldErrors;

/// The public Azure management endpoint.
pub const DEFAULT_MANAGEMENT_ENDPOINT: &str = "https://management.azure.com";

/// Configuration of `AzureCloud`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AzureConfig {
    /// Subscription id (a GUID).
    pub subscription_id: String,
    /// Resource group the scheduler's fleets live in.
    pub resource_group: String,
    /// Regions to offer; empty = every region of the catalog.
    #[serde(default)]
    pub regions: Vec<String>,
    /// ARM endpoint: the public cloud by default; sovereign clouds and local emulators differ.
    /// Plain `http://` is accepted for loopback addresses only, so a token never leaves the host
    /// unencrypted.
    #[serde(default = "default_endpoint")]
    pub management_endpoint: String,
    /// Token scope; defaults to `<management endpoint>/.default` for https endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_scope: Option<String>,
    /// api-versions per API.
    #[serde(default)]
    pub api_versions: ApiVersions,
    /// Timeout of one HTTP request, seconds.
    #[serde(default = "default_timeout_secs")]
    pub request_timeout_secs: f64,
    /// Retries of throttled and transient failures.
    #[serde(default)]
    pub retry: RetryConfig,
    /// Which credential to use.
    #[serde(default)]
    pub credential: CredentialKind,
    /// Client id of a user-assigned managed identity (managed identity only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_identity_client_id: Option<String>,
    /// A fixed bearer token (credential `static_token`, for tests and emulators). Prefer the
    /// `SPILLWAY_AZURE_TOKEN` environment variable to writing it in a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// JSON file with the base VM profile (image, network, identity) merged into every fleet's
    /// `computeProfile.baseVirtualMachineProfile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_profile_template: Option<PathBuf>,
    /// `computeProfile.platformFaultDomainCount` of every fleet.
    #[serde(default = "default_fault_domains")]
    pub platform_fault_domain_count: i32,
    /// How often, at most, a fleet's VMs are read (`GET …/fleets/{name}/virtualMachines`,
    /// fleet api-version 2026-08-01 and later) to count running VMs and see evictions: one extra
    /// ARM read per fleet per interval. Seconds.
    #[serde(default = "default_vm_read_interval_secs")]
    pub vm_read_interval_secs: f64,
    /// How long the spot capacity signals (eviction-rate bands from Resource Graph, placement
    /// scores) are reused before `offers` reads them again. Seconds.
    #[serde(default = "default_spot_signals_refresh_secs")]
    pub spot_signals_refresh_secs: f64,
}

/// api-versions of the APIs `AzureCloud` calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiVersions {
    /// `Microsoft.AzureFleet/fleets`.
    pub fleet: String,
    /// `Microsoft.Compute/locations/{region}/usages`.
    pub usages: String,
    /// `Microsoft.Compute/skus`.
    pub skus: String,
    /// `computeProfile.computeApiVersion` of the fleets' scale sets.
    pub compute: String,
    /// `Microsoft.Quota` (reading and raising quota limits: `spillway advise --apply`).
    pub quota: String,
    /// Azure Resource Graph (`Microsoft.ResourceGraph/resources`): spot eviction-rate bands.
    pub resource_graph: String,
    /// `Microsoft.Compute/locations/{region}/placementScores/spot/generate`.
    pub spot_placement_scores: String,
}

/// The Compute Fleet api-version that first lists a fleet's VMs.
pub const FLEET_VM_LIST_API_VERSION: &str = "2026-08-01";

impl ApiVersions {
    /// True when the fleet api-version lists a fleet's VMs (2026-08-01 and later; the SDK's
    /// previews 2026-04-01-preview and 2026-06-01-preview too).
    pub fn fleet_lists_vms(&self) -> bool {
        self.fleet.as_str() >= "2026-04-01"
    }
}

impl Default for ApiVersions {
    fn default() -> Self {
        ApiVersions {
            // The GA version current SDKs default to, and the first that lists a fleet's VMs: the
            // only way to see evictions with one read per fleet.
            fleet: FLEET_VM_LIST_API_VERSION.into(),
            usages: "2024-07-01".into(),
            skus: "2021-07-01".into(),
            compute: "2024-03-01".into(),
            quota: super::quota::QUOTA_API_VERSION.into(),
            resource_graph: "2024-04-01".into(),
            spot_placement_scores: "2025-06-05".into(),
        }
    }
}

/// Retry budget for 429 and 5xx: whichever of count and total time runs out first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Retries after the first try.
    pub max_retries: u32,
    /// Total time across tries and waits, seconds.
    pub max_elapsed_secs: f64,
    /// First backoff, seconds (doubles each retry, with jitter).
    pub initial_backoff_secs: f64,
    /// Longest backoff, seconds. A longer `Retry-After` is still honoured while the budget lasts.
    pub max_backoff_secs: f64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig { max_retries: 6, max_elapsed_secs: 120.0, initial_backoff_secs: 0.5, max_backoff_secs: 30.0 }
    }
}

/// How `AzureCloud` gets its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    /// Client secret when `AZURE_TENANT_ID`, `AZURE_CLIENT_ID` and `AZURE_CLIENT_SECRET` are set,
    /// else developer tools when `az` or `azd` is on the `PATH`, else managed identity.
    #[default]
    Auto,
    /// Managed identity (system-assigned, or the user-assigned `managed_identity_client_id`).
    ManagedIdentity,
    /// Service principal from `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`, `AZURE_CLIENT_SECRET`.
    ClientSecret,
    /// Azure CLI, then Azure Developer CLI.
    DeveloperTools,
    /// The fixed `token` (tests and emulators).
    StaticToken,
}

fn default_endpoint() -> String {
    DEFAULT_MANAGEMENT_ENDPOINT.to_string()
}
fn default_timeout_secs() -> f64 {
    60.0
}
fn default_fault_domains() -> i32 {
    1
}
fn default_spot_signals_refresh_secs() -> f64 {
    600.0
}

fn default_vm_read_interval_secs() -> f64 {
    60.0
}

impl AzureConfig {
    /// A configuration with defaults for everything but the scope.
    pub fn new(subscription_id: impl Into<String>, resource_group: impl Into<String>) -> AzureConfig {
        AzureConfig {
            subscription_id: subscription_id.into(),
            resource_group: resource_group.into(),
            regions: Vec::new(),
            management_endpoint: default_endpoint(),
            token_scope: None,
            api_versions: ApiVersions::default(),
            request_timeout_secs: default_timeout_secs(),
            retry: RetryConfig::default(),
            credential: CredentialKind::Auto,
            managed_identity_client_id: None,
            token: None,
            vm_profile_template: None,
            platform_fault_domain_count: default_fault_domains(),
            vm_read_interval_secs: default_vm_read_interval_secs(),
            spot_signals_refresh_secs: default_spot_signals_refresh_secs(),
        }
    }

    /// Reads the `[azure]` table of a TOML document (other tables are ignored), validated.
    pub fn from_toml(content: &str) -> Result<AzureConfig, FieldErrors> {
        Self::from_toml_with_env(content, |k| std::env::var(k).ok())
    }

    /// Like [`AzureConfig::from_toml`], with `SPILLWAY_AZURE_*` looked up through `env`.
    pub fn from_toml_with_env(content: &str, env: impl Fn(&str) -> Option<String>) -> Result<AzureConfig, FieldErrors> {
        let doc: toml::Table = toml::from_str(content).map_err(|e| single("azure", format!("not valid TOML: {e}")))?;
        let mut table = match doc.get("azure") {
            Some(toml::Value::Table(t)) => t.clone(),
            Some(_) => return Err(single("azure", "must be a table")),
            None => toml::Table::new(),
        };
        // Required keys may come from the environment only: fill them before the strict parse.
        for (key, var) in
            [("subscription_id", "SPILLWAY_AZURE_SUBSCRIPTION_ID"), ("resource_group", "SPILLWAY_AZURE_RESOURCE_GROUP")]
        {
            if !table.contains_key(key)
                && let Some(v) = env(var)
            {
                table.insert(key.into(), toml::Value::String(v));
            }
        }
        let mut errors = FieldErrors::default();
        for key in ["subscription_id", "resource_group"] {
            if !table.contains_key(key) {
                errors.push(format!("azure.{key}"), format!("required (or set SPILLWAY_AZURE_{})", key.to_uppercase()));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let de = toml::Value::Table(table);
        let mut config: AzureConfig = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            single(if path == "." { "azure".into() } else { format!("azure.{path}") }, e.into_inner().to_string())
        })?;
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
    }

    /// Reads a TOML file's `[azure]` table, or the environment alone when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<AzureConfig, FieldErrors> {
        let content = match path {
            Some(p) => {
                std::fs::read_to_string(p).map_err(|e| single("azure", format!("cannot read {}: {e}", p.display())))?
            }
            None => String::new(),
        };
        Self::from_toml(&content)
    }

    /// Overrides fields from `SPILLWAY_AZURE_*` variables.
    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), FieldErrors> {
        let mut errors = FieldErrors::default();
        if let Some(v) = env("SPILLWAY_AZURE_SUBSCRIPTION_ID") {
            self.subscription_id = v;
        }
        if let Some(v) = env("SPILLWAY_AZURE_RESOURCE_GROUP") {
            self.resource_group = v;
        }
        if let Some(v) = env("SPILLWAY_AZURE_REGIONS") {
            self.regions = v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect();
        }
        if let Some(v) = env("SPILLWAY_AZURE_MANAGEMENT_ENDPOINT") {
            self.management_endpoint = v;
        }
        if let Some(v) = env("SPILLWAY_AZURE_TOKEN_SCOPE") {
            self.token_scope = Some(v);
        }
        if let Some(v) = env("SPILLWAY_AZURE_REQUEST_TIMEOUT_SECS") {
            match v.trim().parse() {
                Ok(n) => self.request_timeout_secs = n,
                Err(_) => errors.push("SPILLWAY_AZURE_REQUEST_TIMEOUT_SECS", format!("not a number: {v:?}")),
            }
        }
        if let Some(v) = env("SPILLWAY_AZURE_CREDENTIAL") {
            match serde_json::from_value(serde_json::Value::String(v.trim().to_string())) {
                Ok(k) => self.credential = k,
                Err(_) => errors.push(
                    "SPILLWAY_AZURE_CREDENTIAL",
                    format!("unknown credential {v:?}: expected auto, managed_identity, client_secret, developer_tools or static_token"),
                ),
            }
        }
        if let Some(v) = env("SPILLWAY_AZURE_MANAGED_IDENTITY_CLIENT_ID") {
            self.managed_identity_client_id = Some(v);
        }
        if let Some(v) = env("SPILLWAY_AZURE_TOKEN") {
            self.token = Some(v);
        }
        if let Some(v) = env("SPILLWAY_AZURE_VM_PROFILE_TEMPLATE") {
            self.vm_profile_template = Some(PathBuf::from(v));
        }
        errors.into_result(())
    }

    /// Checks every field; all problems at once.
    pub fn validate(&self) -> Result<(), FieldErrors> {
        let mut e = FieldErrors::default();
        if !is_guid(&self.subscription_id) {
            e.push("azure.subscription_id", format!("must be a GUID, got {:?}", self.subscription_id));
        }
        let rg = &self.resource_group;
        if rg.is_empty()
            || rg.len() > 90
            || rg.ends_with('.')
            || !rg.chars().all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '(' | ')'))
        {
            e.push(
                "azure.resource_group",
                format!("1-90 letters, digits, '-', '_', '.', '(', ')', not ending in '.': got {rg:?}"),
            );
        }
        for (i, r) in self.regions.iter().enumerate() {
            if r.is_empty() || !r.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()) {
                e.push(format!("azure.regions[{i}]"), format!("a region name such as eastus, got {r:?}"));
            }
        }
        match self.management_endpoint.parse::<azure_core::http::Url>() {
            Ok(url) if url.scheme() == "https" => {}
            Ok(url) if url.scheme() == "http" && is_loopback(&url) => {}
            Ok(_) => e.push(
                "azure.management_endpoint",
                "must be https (plain http only to a loopback address such as http://127.0.0.1:PORT)",
            ),
            Err(err) => e.push("azure.management_endpoint", format!("not a URL: {err}")),
        }
        if !(self.request_timeout_secs.is_finite() && self.request_timeout_secs > 0.0) {
            e.push("azure.request_timeout_secs", "must be a positive number of seconds");
        }
        let r = &self.retry;
        for (field, v) in [
            ("azure.retry.max_elapsed_secs", r.max_elapsed_secs),
            ("azure.retry.initial_backoff_secs", r.initial_backoff_secs),
            ("azure.retry.max_backoff_secs", r.max_backoff_secs),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                e.push(field, "must be a non-negative number of seconds");
            }
        }
        for (field, v) in [
            ("azure.api_versions.fleet", &self.api_versions.fleet),
            ("azure.api_versions.usages", &self.api_versions.usages),
            ("azure.api_versions.skus", &self.api_versions.skus),
            ("azure.api_versions.compute", &self.api_versions.compute),
            ("azure.api_versions.resource_graph", &self.api_versions.resource_graph),
            ("azure.api_versions.spot_placement_scores", &self.api_versions.spot_placement_scores),
        ] {
            if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
                e.push(field, format!("an api-version such as 2024-11-01, got {v:?}"));
            }
        }
        if self.credential == CredentialKind::StaticToken && self.token.as_deref().is_none_or(str::is_empty) {
            e.push("azure.token", "required with credential = \"static_token\" (or set SPILLWAY_AZURE_TOKEN)");
        }
        if !(self.spot_signals_refresh_secs.is_finite() && self.spot_signals_refresh_secs >= 0.0) {
            e.push("azure.spot_signals_refresh_secs", "must be a non-negative number of seconds");
        }
        if !(self.vm_read_interval_secs.is_finite() && self.vm_read_interval_secs >= 0.0) {
            e.push("azure.vm_read_interval_secs", "must be a non-negative number of seconds");
        }
        if self.platform_fault_domain_count < 1 {
            e.push("azure.platform_fault_domain_count", "must be at least 1");
        }
        e.into_result(())
    }

    /// The request timeout.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.request_timeout_secs.max(0.001))
    }

    /// The OAuth scope tokens are requested for.
    pub fn scope(&self) -> String {
        self.token_scope
            .clone()
            .unwrap_or_else(|| format!("{}/.default", self.management_endpoint.trim_end_matches('/')))
    }

    /// The endpoint without a trailing slash.
    pub fn endpoint(&self) -> &str {
        self.management_endpoint.trim_end_matches('/')
    }

    /// Reads the VM profile template, when configured: a JSON object.
    pub fn load_template(&self) -> Result<Option<serde_json::Value>, FieldErrors> {
        let Some(path) = &self.vm_profile_template else { return Ok(None) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| single("azure.vm_profile_template", format!("cannot read {}: {e}", path.display())))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| single("azure.vm_profile_template", format!("{} is not JSON: {e}", path.display())))?;
        if !value.is_object() {
            return Err(single("azure.vm_profile_template", format!("{} must hold a JSON object", path.display())));
        }
        Ok(Some(value))
    }
}

fn single(field: impl Into<String>, problem: impl Into<String>) -> FieldErrors {
    let mut e = FieldErrors::default();
    e.push(field, problem);
    e
}

fn is_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts.iter().zip([8, 4, 4, 4, 12]).all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// True for `localhost` and loopback IP addresses.
pub(crate) fn is_loopback(url: &azure_core::http::Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUB: &str = "00000000-1111-2222-3333-444444444444";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn parses_the_azure_table_with_defaults() {
        let c = AzureConfig::from_toml_with_env(
            &format!("[other]\nx = 1\n[azure]\nsubscription_id = \"{SUB}\"\nresource_group = \"rg-gpu\"\nregions = [\"eastus\"]\n"),
            no_env,
        )
        .unwrap();
        assert_eq!(c.resource_group, "rg-gpu");
        assert_eq!(c.api_versions.fleet, "2026-08-01");
        assert_eq!(c.scope(), "https://management.azure.com/.default");
        assert_eq!(c.credential, CredentialKind::Auto);
    }

    #[test]
    fn env_overrides_and_fills_required_fields() {
        let env = |k: &str| match k {
            "SPILLWAY_AZURE_SUBSCRIPTION_ID" => Some(SUB.to_string()),
            "SPILLWAY_AZURE_RESOURCE_GROUP" => Some("rg".to_string()),
            "SPILLWAY_AZURE_MANAGEMENT_ENDPOINT" => Some("http://127.0.0.1:8080".to_string()),
            "SPILLWAY_AZURE_CREDENTIAL" => Some("static_token".to_string()),
            "SPILLWAY_AZURE_TOKEN" => Some("t0k".to_string()),
            "SPILLWAY_AZURE_REGIONS" => Some("eastus, westus3".to_string()),
            _ => None,
        };
        let c = AzureConfig::from_toml_with_env("", env).unwrap();
        assert_eq!(c.regions, ["eastus", "westus3"]);
        assert_eq!(c.token.as_deref(), Some("t0k"));
        assert_eq!(c.endpoint(), "http://127.0.0.1:8080");
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let err = AzureConfig::from_toml_with_env(
            "[azure]\nsubscription_id = \"nope\"\nresource_group = \"bad/rg\"\nmanagement_endpoint = \"http://example.com\"\nrequest_timeout_secs = 0\ncredential = \"static_token\"\n",
            no_env,
        )
        .unwrap_err()
        .to_string();
        for field in [
            "azure.subscription_id",
            "azure.resource_group",
            "azure.management_endpoint",
            "azure.request_timeout_secs",
            "azure.token",
        ] {
            assert!(err.contains(field), "{field} missing from {err}");
        }
        let err =
            AzureConfig::from_toml_with_env("[azure]\nresource_group = \"rg\"\n", no_env).unwrap_err().to_string();
        assert!(err.contains("azure.subscription_id"), "{err}");
        let err = AzureConfig::from_toml_with_env(
            &format!("[azure]\nsubscription_id = \"{SUB}\"\nresource_group = \"rg\"\nretry = {{ max_retries = 2, typo = 1 }}\n"),
            no_env,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("azure.retry") && err.contains("typo"), "{err}");
    }
}
