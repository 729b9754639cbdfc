//! Microsoft.Quota, api-version 2025-09-01: read a quota limit, ask for a new one, follow the
//! request. Wire models hand-typed from the official definition (`quota-2025-09-01/openapi.json`
//! in the shared reference folder `shared/azure/`; `tests/quota_schema.rs` validates our bodies
//! against it at run time), shared with the ARM emulator, which serves the same API.
//!
//! | call | method and path (`S` = `/subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}`) | answers |
//! | --- | --- | --- |
//! | `Quota_Get` | `GET S/providers/Microsoft.Quota/quotas/{resourceName}` | 200 [`CurrentQuotaLimitBase`] |
//! | `Quota_List` | `GET S/providers/Microsoft.Quota/quotas` | pages of [`CurrentQuotaLimitBase`] |
//! | `Quota_CreateOrUpdate` | `PUT S/providers/Microsoft.Quota/quotas/{resourceName}` with [`CurrentQuotaLimitBase`] | 200 (done) or 202 with `Location` and `Retry-After` (long-running; final state via the original URI) |
//! | `QuotaRequestStatus_Get` | `GET S/providers/Microsoft.Quota/quotaRequests/{id}` | 200 [`QuotaRequestDetails`] |
//!
//! The resource name of a compute pool is its usages `name.value`: `cores`, `lowPriorityCores`, or a
//! family (`standardNCADSA100v4Family`). Limits are int32 vCPU counts.
//!
//! A PUT answered 202 is followed through its `Location` (the official example's
//! `…/providers/Microsoft.Quota/operationsStatus/{id}`): 202 while the request runs, then 200 with
//! the [`QuotaRequestDetails`] whose `provisioningState` says how it ended (`Succeeded`; `Failed` or
//! `Invalid` with a message; `Escalated`: Azure would not grant it automatically and a support
//! ticket is needed). The limit in effect afterwards is read back with `Quota_Get`.

use std::time::{Duration, Instant};

use azure_core::http::Method;
use serde::{Deserialize, Serialize};

use super::classify::ErrorContext;
use super::{AzureCloud, header, parse_body, retry_after};
use crate::cloud::CloudError;
use crate::model::QuotaPool;

/// The Microsoft.Quota api-version spoken.
pub const QUOTA_API_VERSION: &str = "2025-09-01";

/// The scope of a region's compute quota, as the Quota API writes it (no leading slash):
/// `subscriptions/{sub}/providers/Microsoft.Compute/locations/{region}`.
pub fn compute_scope(subscription: &str, region: &str) -> String {
    format!("subscriptions/{subscription}/providers/Microsoft.Compute/locations/{region}")
}

/// Path (from the management endpoint) of one pool's quota resource.
pub fn quota_path(subscription: &str, region: &str, resource_name: &str) -> String {
    format!("/{}/providers/Microsoft.Quota/quotas/{resource_name}", compute_scope(subscription, region))
}

/// The Quota API's resource name of a pool: what the usages API calls it.
pub fn resource_name(pool: &QuotaPool) -> &str {
    pool.name()
}

/// The `Quota_CreateOrUpdate` body asking for `new_limit` vCPUs: the shape of the official
/// compute example (`putComputeOneSkuQuotaRequest.json`).
pub fn limit_request(resource_name: &str, new_limit: u64) -> CurrentQuotaLimitBase {
    CurrentQuotaLimitBase {
        properties: Some(QuotaProperties {
            limit: Some(LimitObject::value(new_limit)),
            name: Some(ResourceName { value: Some(resource_name.to_string()), localized_value: None }),
            ..QuotaProperties::default()
        }),
        ..CurrentQuotaLimitBase::default()
    }
}

/// The Azure CLI command equivalent to [`limit_request`] (the `quota` extension:
/// `az extension add --name quota`).
pub fn az_command(subscription: &str, region: &str, resource_name: &str, new_limit: u64) -> String {
    format!(
        "az quota update --resource-name {resource_name} --scope /{} --limit-object value={new_limit} \
         limit-object-type=LimitValue",
        compute_scope(subscription, region)
    )
}

/// `CurrentQuotaLimitBase`: a quota resource (a `ProxyResource` with `properties`). The PUT body
/// carries only `properties`; `id`, `name` and `type` are read-only.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrentQuotaLimitBase {
    /// Resource id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Resource name (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Microsoft.Quota/Quotas` (read-only).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// The quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<QuotaProperties>,
}

impl CurrentQuotaLimitBase {
    /// The limit's value, when the body carries one.
    pub fn limit_value(&self) -> Option<i64> {
        self.properties.as_ref().and_then(|p| p.limit.as_ref()).map(|l| l.value)
    }

    /// The resource name the body names (`properties.name.value`).
    pub fn resource_name(&self) -> Option<&str> {
        self.properties.as_ref().and_then(|p| p.name.as_ref()).and_then(|n| n.value.as_deref())
    }
}

/// `QuotaProperties`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaProperties {
    /// The limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitObject>,
    /// `Count` for compute (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<ResourceName>,
    /// Optional resource type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// Period (read-only; irrelevant for compute).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_period: Option<String>,
    /// Whether quota can be requested for it (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_quota_applicable: Option<bool>,
    /// Provider-specific, opaque.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<serde_json::Value>,
}

/// `LimitObject` (the `LimitValue` kind of the `LimitJsonObject` discriminator).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitObject {
    /// Always `LimitValue` (the only kind the definition has; another is kept verbatim).
    pub limit_object_type: String,
    /// The limit (int32).
    pub value: i64,
    /// `Independent` or `Shared` (open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_type: Option<String>,
}

impl LimitObject {
    /// A `LimitValue` of `value`, clamped to int32 as the definition requires.
    pub fn value(value: u64) -> LimitObject {
        LimitObject {
            limit_object_type: "LimitValue".to_string(),
            value: value.min(i32::MAX as u64) as i64,
            limit_type: None,
        }
    }
}

/// `ResourceName`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceName {
    /// The name to use in requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Display name (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub localized_value: Option<String>,
}

/// `QuotaRequestState` (open: Azure adds states, e.g. `Escalated` in `RequestState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaRequestState {
    /// Accepted, not started.
    Accepted,
    /// Refused as invalid.
    Invalid,
    /// Done: the new limit is in effect.
    Succeeded,
    /// Refused.
    Failed,
    /// Being processed.
    InProgress,
    /// Anything else, kept verbatim (e.g. `Escalated`: a support ticket is needed).
    Other(String),
}

impl QuotaRequestState {
    /// Parses Azure's spelling, case-insensitively.
    pub fn parse(s: &str) -> QuotaRequestState {
        match s.to_ascii_lowercase().as_str() {
            "accepted" => QuotaRequestState::Accepted,
            "invalid" => QuotaRequestState::Invalid,
            "succeeded" => QuotaRequestState::Succeeded,
            "failed" => QuotaRequestState::Failed,
            "inprogress" => QuotaRequestState::InProgress,
            _ => QuotaRequestState::Other(s.to_string()),
        }
    }

    /// Azure's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            QuotaRequestState::Accepted => "Accepted",
            QuotaRequestState::Invalid => "Invalid",
            QuotaRequestState::Succeeded => "Succeeded",
            QuotaRequestState::Failed => "Failed",
            QuotaRequestState::InProgress => "InProgress",
            QuotaRequestState::Other(s) => s,
        }
    }

    /// True for states after which nothing more happens without a new request.
    pub fn is_final(&self) -> bool {
        matches!(self, QuotaRequestState::Succeeded | QuotaRequestState::Failed | QuotaRequestState::Invalid)
            || matches!(self, QuotaRequestState::Other(s) if s.eq_ignore_ascii_case("canceled") || s.eq_ignore_ascii_case("cancelled") || s.eq_ignore_ascii_case("escalated"))
    }
}

impl Serialize for QuotaRequestState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for QuotaRequestState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(QuotaRequestState::parse(&String::deserialize(d)?))
    }
}

/// `QuotaRequestDetails`: a quota request and its state (`QuotaRequestStatus_Get`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaRequestDetails {
    /// Resource id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The request id (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `Microsoft.Quota/quotaRequests` (read-only).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub resource_type: Option<String>,
    /// The request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub properties: Option<QuotaRequestProperties>,
}

/// `QuotaRequestProperties`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaRequestProperties {
    /// State (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<QuotaRequestState>,
    /// Status message (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ServiceErrorDetail>,
    /// When it was submitted, RFC 3339 (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_submit_time: Option<String>,
    /// One entry per resource asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<SubRequest>,
}

/// `SubRequest`: one resource of a quota request.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubRequest {
    /// The resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<ResourceName>,
    /// Unit, `Count`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// State (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_state: Option<QuotaRequestState>,
    /// Status message (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The limit asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitObject>,
}

/// `ServiceErrorDetail`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ServiceErrorDetail {
    /// Error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// How one quota request ended, as `spillway advise --apply` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuotaRequestOutcome {
    /// Region.
    pub region: String,
    /// The Quota API's resource name.
    pub resource_name: String,
    /// The limit before the request, vCPUs (read with `Quota_Get`).
    pub limit_before: u64,
    /// The limit asked for, vCPUs.
    pub requested_limit: u64,
    /// How the request ended.
    pub state: QuotaRequestState,
    /// Azure's message, when it gave one (why a request failed or was escalated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The limit in effect afterwards, vCPUs (read back with `Quota_Get`).
    pub limit_after: u64,
    /// The request's id (`QuotaRequestStatus_Get` reads it again), when Azure named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl AzureCloud {
    fn quota_url(&self, region: &str, resource_name: &str) -> Result<azure_core::http::Url, CloudError> {
        for (field, v) in [("region", region), ("resource name", resource_name)] {
            if v.is_empty() || v.contains(['/', '?', '#', '%']) {
                return Err(CloudError::Permanent {
                    code: "InvalidQuotaResource".into(),
                    message: format!("quota {field} {v:?}"),
                });
            }
        }
        let path = quota_path(&self.config.subscription_id, region, resource_name);
        self.url(&format!("{}{path}", self.config.endpoint()), &self.config.api_versions.quota, &[])
    }

    /// The limit of one pool (`Quota_Get`), vCPUs.
    pub async fn quota_limit(&self, region: &str, resource_name: &str) -> Result<u64, CloudError> {
        let url = self.quota_url(region, resource_name)?;
        let ctx = ErrorContext {
            region: Some(region.to_string()),
            resource: Some(format!("quota {resource_name} in {region}")),
            ..ErrorContext::default()
        };
        let body: CurrentQuotaLimitBase = self.get_json(&url, &ctx).await?;
        limit_of(&body, &url)
    }

    /// Asks for `increase_vcpus` more on one pool than its limit now (read with `Quota_Get` just
    /// before): what filing advice means, since advice says how much more is needed, and a limit
    /// raised meanwhile must not be lowered. See [`AzureCloud::request_quota_limit`].
    pub async fn raise_quota_limit(
        &self,
        region: &str,
        resource_name: &str,
        increase_vcpus: u64,
    ) -> Result<QuotaRequestOutcome, CloudError> {
        let now = self.quota_limit(region, resource_name).await?;
        self.request_quota_limit(region, resource_name, now.saturating_add(increase_vcpus)).await
    }

    /// Asks for `new_limit` vCPUs on one pool (`Quota_CreateOrUpdate`) and follows the request to
    /// its end, waiting `Retry-After` between reads, at most the operation timeout. A request Azure
    /// refuses or escalates is an outcome, not an error; errors are the call's own (authorization,
    /// an unknown pool, transport).
    pub async fn request_quota_limit(
        &self,
        region: &str,
        resource_name: &str,
        new_limit: u64,
    ) -> Result<QuotaRequestOutcome, CloudError> {
        let url = self.quota_url(region, resource_name)?;
        let ctx = ErrorContext {
            region: Some(region.to_string()),
            resource: Some(format!("quota {resource_name} in {region}")),
            ..ErrorContext::default()
        };
        let limit_before = self.quota_limit(region, resource_name).await?;
        let body = serde_json::to_vec(&limit_request(resource_name, new_limit))
            .map_err(|e| CloudError::Permanent { code: "InvalidRequest".into(), message: e.to_string() })?;
        let reply = self.call(Method::Put, &url, Some(&body), &[200, 201, 202], &ctx).await?;
        let mut outcome = QuotaRequestOutcome {
            region: region.to_string(),
            resource_name: resource_name.to_string(),
            limit_before,
            requested_limit: new_limit,
            state: QuotaRequestState::Succeeded,
            message: None,
            limit_after: limit_before,
            request_id: None,
        };
        if reply.status == 202 {
            let Some(location) = header(&reply.headers, "location") else {
                return Err(CloudError::Transient {
                    message: format!("PUT {}: 202 without a Location to follow", url.path()),
                });
            };
            let monitor = self.server_url(&location)?;
            outcome.request_id = monitor.path_segments().and_then(|mut s| s.next_back()).map(str::to_string);
            let deadline = Instant::now() + self.operation_timeout;
            let mut wait = retry_after(&reply.headers).unwrap_or(Duration::from_secs(1));
            let details = loop {
                if Instant::now() + wait > deadline {
                    return Err(CloudError::Transient {
                        message: format!(
                            "quota request for {resource_name} in {region}: not finished after {:?}",
                            self.operation_timeout
                        ),
                    });
                }
                tokio::time::sleep(wait).await;
                let poll = self.call(Method::Get, &monitor, None, &[200, 202], &ctx).await?;
                if poll.status == 202 {
                    wait = retry_after(&poll.headers).unwrap_or(Duration::from_secs(1));
                    continue;
                }
                let details: QuotaRequestDetails = parse_body(&poll.body, &monitor)?;
                let state = details.properties.as_ref().and_then(|p| p.provisioning_state.clone());
                match state {
                    Some(s) if !s.is_final() => wait = retry_after(&poll.headers).unwrap_or(Duration::from_secs(1)),
                    _ => break details,
                }
            };
            if let Some(p) = &details.properties {
                outcome.state = p.provisioning_state.clone().unwrap_or(QuotaRequestState::Succeeded);
                outcome.message = p
                    .error
                    .as_ref()
                    .and_then(|e| e.message.clone())
                    .or_else(|| p.value.iter().find_map(|v| v.message.clone()))
                    .or_else(|| p.message.clone());
            }
            if let Some(id) = details.name {
                outcome.request_id = Some(id);
            }
        }
        outcome.limit_after = self.quota_limit(region, resource_name).await?;
        Ok(outcome)
    }
}

fn limit_of(body: &CurrentQuotaLimitBase, url: &azure_core::http::Url) -> Result<u64, CloudError> {
    match body.limit_value() {
        Some(v) if v >= 0 => Ok(v as u64),
        other => Err(CloudError::Transient {
            message: format!("{}: the answer has no usable properties.limit.value ({other:?})", url.path()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_put_body_has_the_official_examples_shape() {
        let body = serde_json::to_value(limit_request("standardFSv2Family", 10)).unwrap();
        let official = serde_json::json!({"properties": {"name": {"value": "standardFSv2Family"},
                                          "limit": {"limitObjectType": "LimitValue", "value": 10}}});
        assert_eq!(body, official);
    }

    #[test]
    fn the_az_command_names_the_resource_scope_and_limit() {
        let cmd = az_command("sub-1", "eastus", "lowPriorityCores", 384);
        assert_eq!(
            cmd,
            "az quota update --resource-name lowPriorityCores --scope \
             /subscriptions/sub-1/providers/Microsoft.Compute/locations/eastus --limit-object value=384 \
             limit-object-type=LimitValue"
        );
    }

    #[test]
    fn request_states_are_open() {
        assert_eq!(QuotaRequestState::parse("inprogress"), QuotaRequestState::InProgress);
        let e = QuotaRequestState::parse("Escalated");
        assert_eq!(e.as_str(), "Escalated");
        assert!(e.is_final());
        assert!(!QuotaRequestState::Accepted.is_final());
    }
}
