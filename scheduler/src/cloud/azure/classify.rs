//! Azure errors → [`CloudError`], per the table in `shared/azure/NOTES.md`.
//!
//! This is the only place that reads Azure's error codes and message text. Classification looks at
//! the code first, then the message (quota pool and numbers), and falls back to the HTTP status
//! only when the body says nothing useful. ARM often wraps the real cause one level down
//! (`details`), so a specific cause found there wins over a generic top-level code.

use std::time::Duration;

use super::models::{ErrorDetail, ErrorResponse};
use crate::cloud::CloudError;
use crate::model::{Priority, QuotaPool};

/// What the failed call was about: fills the fields Azure's message does not spell out.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorContext {
    /// Region of the request.
    pub region: Option<String>,
    /// Sizes of the request, ranked (the first is the chosen one).
    pub sizes: Vec<String>,
    /// Priority of the request.
    pub priority: Option<Priority>,
    /// Zones of the request.
    pub zones: Vec<String>,
    /// What was addressed (for `NotFound`), e.g. `fleet spw-job-1-a1`.
    pub resource: Option<String>,
}

/// The numbers in a quota message, in vCPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuotaNumbers {
    /// `Current Limit: N`.
    pub limit: Option<u64>,
    /// `Current Usage: N`.
    pub usage: Option<u64>,
    /// `Additional Required: N` (older messages: `Additional cores requested: N`).
    pub required: Option<u64>,
}

/// Classifies an HTTP error response from its status, `Retry-After` and body.
pub fn classify_response(status: u16, retry_after: Option<Duration>, body: &[u8], ctx: &ErrorContext) -> CloudError {
    match ErrorResponse::parse(body) {
        Some(resp) => classify(Some(status), retry_after, &resp.error, ctx),
        None => classify_status(status, retry_after, &String::from_utf8_lossy(body), ctx),
    }
}

/// Classifies an ARM error (from a response body, an operation status or a scale set). `status`
/// is the HTTP status when there was one.
pub fn classify(
    status: Option<u16>,
    retry_after: Option<Duration>,
    error: &ErrorDetail,
    ctx: &ErrorContext,
) -> CloudError {
    // A specific cause anywhere in the tree beats a generic wrapper such as `DeploymentFailed`.
    if let Some(specific) = find_specific(error, ctx) {
        return specific;
    }
    let code = error.code.as_deref().unwrap_or("");
    let message = error.message.as_deref().unwrap_or("");
    match code.to_ascii_lowercase().as_str() {
        "toomanyrequests" | "throttled" | "subscriptionrequeststhrottled" => {
            return throttled(retry_after);
        }
        "internalservererror"
        | "serviceunavailable"
        | "gatewaytimeout"
        | "servertimeout"
        | "internaloperationerror"
        | "anotheroperationinprogress"
        | "retryableerror"
        | "operationpreempted" => {
            return CloudError::Transient { message: describe(code, message) };
        }
        "resourcenotfound" | "notfound" | "parentresourcenotfound" => {
            return not_found(ctx, message);
        }
        // The scope itself is missing: configuration, not an absent object.
        "resourcegroupnotfound" | "subscriptionnotfound" | "invalidsubscriptionid" => {
            return CloudError::Permanent { code: code.to_string(), message: message.to_string() };
        }
        _ => {}
    }
    match status {
        Some(s) if !code.is_empty() && (400..500).contains(&s) && s != 404 && s != 408 && s != 429 => {
            CloudError::Permanent { code: code.to_string(), message: message.to_string() }
        }
        Some(s) => classify_status(s, retry_after, &describe(code, message), ctx),
        None if code.is_empty() => CloudError::Transient { message: describe("unknown", message) },
        None => CloudError::Permanent { code: code.to_string(), message: message.to_string() },
    }
}

/// Classification by HTTP status alone, for bodies without an ARM error.
fn classify_status(status: u16, retry_after: Option<Duration>, text: &str, ctx: &ErrorContext) -> CloudError {
    let text = text.trim();
    let short: String = text.chars().take(300).collect();
    match status {
        429 => throttled(retry_after),
        404 => not_found(ctx, &short),
        408 | 500..=599 => CloudError::Transient { message: format!("HTTP {status}: {short}") },
        401 => CloudError::Permanent { code: "Unauthorized".into(), message: format!("HTTP 401: {short}") },
        403 => CloudError::Permanent { code: "Forbidden".into(), message: format!("HTTP 403: {short}") },
        _ => CloudError::Permanent { code: format!("Http{status}"), message: short },
    }
}

fn throttled(retry_after: Option<Duration>) -> CloudError {
    CloudError::Throttled { retry_after_ms: retry_after.map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64) }
}

fn not_found(ctx: &ErrorContext, message: &str) -> CloudError {
    CloudError::NotFound {
        what: ctx
            .resource
            .clone()
            .unwrap_or_else(|| if message.is_empty() { "resource".into() } else { message.into() }),
    }
}

fn describe(code: &str, message: &str) -> String {
    match (code.is_empty(), message.is_empty()) {
        (true, _) => message.to_string(),
        (false, true) => code.to_string(),
        (false, false) => format!("{code}: {message}"),
    }
}

/// Depth-first search for a cause that names an offer problem (quota, capacity, size, price, spot
/// impossible).
fn find_specific(error: &ErrorDetail, ctx: &ErrorContext) -> Option<CloudError> {
    if let Some(e) = classify_specific(error, ctx) {
        return Some(e);
    }
    error.details.iter().find_map(|d| find_specific(d, ctx))
}

fn classify_specific(error: &ErrorDetail, ctx: &ErrorContext) -> Option<CloudError> {
    let code = error.code.as_deref().unwrap_or("");
    let message = error.message.as_deref().unwrap_or("");
    let region = || message_location(message).or_else(|| ctx.region.clone()).unwrap_or_default();
    let size = || message_size(message).or_else(|| ctx.sizes.first().cloned());
    let zone = || message_zone(message).or_else(|| (ctx.zones.len() == 1).then(|| ctx.zones[0].clone()));
    match code {
        "QuotaExceeded" | "OperationNotAllowed" | "QuotaExceededForSubscription" => {
            let (pool, numbers) = parse_quota_message(message)?;
            Some(CloudError::Quota {
                region: region(),
                pool,
                limit: numbers.limit,
                usage: numbers.usage,
                required: numbers.required,
            })
        }
        "SkuNotAvailable" => {
            let priority =
                if message.to_ascii_lowercase().contains("spot") { Some(Priority::Spot) } else { ctx.priority };
            Some(CloudError::SizeUnavailable { region: region(), size: size().unwrap_or_default(), priority })
        }
        "AllocationFailed" | "OverconstrainedAllocationRequest" => {
            Some(CloudError::Capacity { region: region(), size: size(), priority: ctx.priority, zone: None })
        }
        "ZonalAllocationFailed" | "OverconstrainedZonalAllocationRequest" => {
            Some(CloudError::Capacity { region: region(), size: size(), priority: ctx.priority, zone: zone() })
        }
        "SpotPriceGreaterThanProvidedMaxPrice" => Some(CloudError::PriceAboveCap { region: region(), size: size() }),
        "AzureSpotIsNotSupportedForThisVMSize" | "AzureSpotFeatureNotEnabledForSubscription" => {
            Some(CloudError::Permanent { code: code.to_string(), message: message.to_string() })
        }
        _ => None,
    }
}

/// Reads the pool and the numbers from a quota message, e.g. "Operation could not be completed as
/// it results in exceeding approved standardNCADSA100v4Family Cores quota. Additional details -
/// Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0,
/// Additional Required: 24, (Minimum) New Limit Required: 24." `None` when the message is not
/// about a vCPU quota.
pub fn parse_quota_message(message: &str) -> Option<(QuotaPool, QuotaNumbers)> {
    let pool = quota_pool(message)?;
    let numbers = QuotaNumbers {
        limit: number_after(message, "Current Limit"),
        usage: number_after(message, "Current Usage"),
        required: number_after(message, "Additional Required")
            .or_else(|| number_after(message, "Additional cores requested")),
    };
    Some((pool, numbers))
}

fn quota_pool(message: &str) -> Option<QuotaPool> {
    let lower = message.to_ascii_lowercase();
    if lower.contains("lowprioritycores") || lower.contains("low priority cores") {
        return Some(QuotaPool::LowPriorityCores);
    }
    if lower.contains("total regional cores") || lower.contains("total regional vcpus") {
        return Some(QuotaPool::Cores);
    }
    // "<family> Family Cores quota" or "<family>Family Cores quota": the family is what follows
    // "approved " up to " Cores".
    let family_end = lower.find("family cores").or_else(|| lower.find("family vcpus"))? + "family".len();
    let start = lower[..family_end].rfind("approved ").map(|i| i + "approved ".len()).unwrap_or_else(|| {
        // No "approved": take the words back to the previous punctuation.
        lower[..family_end].rfind(['.', ',', ':', '\'', '"']).map(|i| i + 1).unwrap_or(0)
    });
    let family = message[start..family_end].trim();
    (!family.is_empty()).then(|| QuotaPool::Family(family.to_string()))
}

/// The unsigned integer after `label`, skipping `:` and spaces; case-insensitive label.
fn number_after(message: &str, label: &str) -> Option<u64> {
    let lower = message.to_ascii_lowercase();
    let at = lower.find(&label.to_ascii_lowercase())? + label.len();
    let rest = message[at..].trim_start_matches([':', ' ', '\t']);
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok()
}

/// `Location: eastus` or `location 'eastus'` in a message.
fn message_location(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let at = lower
        .find("location:")
        .map(|i| i + "location:".len())
        .or_else(|| lower.find("location '").map(|i| i + "location ".len()))?;
    let word: String =
        message[at..].trim_start_matches([' ', '\'']).chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
    (!word.is_empty()).then(|| word.to_ascii_lowercase())
}

/// The first `Standard_…` size named in a message.
fn message_size(message: &str) -> Option<String> {
    let at = message.find("Standard_")?;
    let size: String =
        message[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
    Some(size)
}

/// `zone '2'` or `zone 2` in a message.
fn message_zone(message: &str) -> Option<String> {
    let lower = message.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("zone") {
        let at = from + i + "zone".len();
        let rest = lower[at..].trim_start_matches([' ', '\'', '"', ':']);
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !digits.is_empty() {
            return Some(digits);
        }
        from = at;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorContext {
        ErrorContext {
            region: Some("eastus".into()),
            sizes: vec!["Standard_NC24ads_A100_v4".into(), "Standard_NC48ads_A100_v4".into()],
            priority: Some(Priority::Regular),
            zones: vec!["2".into()],
            resource: Some("fleet spw-j1-a1".into()),
        }
    }

    fn body(code: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&ErrorResponse::new(code, message)).unwrap()
    }

    #[test]
    fn family_quota_with_numbers() {
        let msg = "Operation could not be completed as it results in exceeding approved standardNCADSA100v4Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: westus2, Current Limit: 0, Current Usage: 0, Additional Required: 24, (Minimum) New Limit Required: 24. Submit a request for Quota increase at https://aka.ms/ProdportalCRP/#blade/Microsoft_Azure_Capacity/UsageAndQuota.ReactView/Parameters/... by specifying parameters listed in the ‘Details’ section for deployment to succeed.";
        let e = classify_response(409, None, &body("OperationNotAllowed", msg), &ctx());
        assert_eq!(
            e,
            CloudError::Quota {
                region: "westus2".into(),
                pool: QuotaPool::Family("standardNCADSA100v4Family".into()),
                limit: Some(0),
                usage: Some(0),
                required: Some(24),
            }
        );
    }

    #[test]
    fn family_quota_spelled_with_spaces() {
        let msg = "Operation could not be completed as it results in exceeding approved Standard NCASv3_T4 Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 48, Current Usage: 44, Additional Required: 8, (Minimum) New Limit Required: 52.";
        let (pool, n) = parse_quota_message(msg).unwrap();
        assert_eq!(pool.key(), QuotaPool::Family("standardNCASv3_T4Family".into()).key());
        assert_eq!(n, QuotaNumbers { limit: Some(48), usage: Some(44), required: Some(8) });
    }

    #[test]
    fn regional_quota() {
        let msg = "Operation could not be completed as it results in exceeding approved Total Regional Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 350, Current Usage: 344, Additional Required: 24, (Minimum) New Limit Required: 368.";
        let e = classify_response(409, None, &body("QuotaExceeded", msg), &ctx());
        assert_eq!(
            e,
            CloudError::Quota {
                region: "eastus".into(),
                pool: QuotaPool::Cores,
                limit: Some(350),
                usage: Some(344),
                required: Some(24)
            }
        );
    }

    #[test]
    fn spot_quota() {
        let msg = "Operation could not be completed as it results in exceeding approved LowPriorityCores quota. Additional details - Deployment Model: Resource Manager, Location: southcentralus, Current Limit: 100, Current Usage: 96, Additional Required: 96, (Minimum) New Limit Required: 192.";
        let e = classify_response(409, None, &body("OperationNotAllowed", msg), &ctx());
        assert!(matches!(
            &e,
            CloudError::Quota { pool: QuotaPool::LowPriorityCores, region, limit: Some(100), usage: Some(96), required: Some(96) }
                if region == "southcentralus"
        ));
    }

    #[test]
    fn older_quota_message_wording() {
        let msg = "Operation results in exceeding quota limits of Core. Maximum allowed: 10, Current in use: 4, Additional requested: 8. approved standardNDSv2Family Cores quota, Current Limit: 10, Current Usage: 4, Additional cores requested: 8.";
        let (pool, n) = parse_quota_message(msg).unwrap();
        assert_eq!(pool, QuotaPool::Family("standardNDSv2Family".into()));
        assert_eq!(n.required, Some(8));
    }

    #[test]
    fn operation_not_allowed_without_quota_is_permanent() {
        let e = classify_response(
            409,
            None,
            &body("OperationNotAllowed", "The operation is not allowed on a deallocated VM."),
            &ctx(),
        );
        assert!(matches!(e, CloudError::Permanent { ref code, .. } if code == "OperationNotAllowed"));
    }

    #[test]
    fn sku_not_available_regular_and_spot() {
        let msg = "The requested VM size for resource 'Following SKUs have failed for Capacity Restrictions: Standard_ND96asr_v4' is currently not available in location 'westus3'. Please try another size or deploy to a different location or different zone. See https://aka.ms/azureskunotavailable for details.";
        let e = classify_response(409, None, &body("SkuNotAvailable", msg), &ctx());
        assert_eq!(
            e,
            CloudError::SizeUnavailable {
                region: "westus3".into(),
                size: "Standard_ND96asr_v4".into(),
                priority: Some(Priority::Regular)
            }
        );
        let spot = "The requested VM size Standard_NC24ads_A100_v4 is not available for Azure Spot in location eastus at this moment.";
        let e = classify_response(409, None, &body("SkuNotAvailable", spot), &ctx());
        assert!(matches!(e, CloudError::SizeUnavailable { priority: Some(Priority::Spot), .. }));
    }

    #[test]
    fn allocation_failures_are_capacity() {
        let msg = "Allocation failed. We do not have sufficient capacity for the requested VM size in this region. Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance";
        let e = classify(None, None, &ErrorDetail::new("AllocationFailed", msg), &ctx());
        assert_eq!(
            e,
            CloudError::Capacity {
                region: "eastus".into(),
                size: Some("Standard_NC24ads_A100_v4".into()),
                priority: Some(Priority::Regular),
                zone: None
            }
        );
        let zonal = "Allocation failed. VM(s) with the following constraints cannot be allocated, because the condition is too restrictive. Please remove some constraints and try again. Constraints applied are: - Availability Zone '3' - VM Size 'Standard_NC48ads_A100_v4'";
        let e = classify(None, None, &ErrorDetail::new("OverconstrainedZonalAllocationRequest", zonal), &ctx());
        assert!(
            matches!(&e, CloudError::Capacity { zone: Some(z), size: Some(s), .. } if z == "3" && s == "Standard_NC48ads_A100_v4")
        );
        let e = classify(
            None,
            None,
            &ErrorDetail::new(
                "ZonalAllocationFailed",
                "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone.",
            ),
            &ctx(),
        );
        assert!(matches!(&e, CloudError::Capacity { zone: Some(z), .. } if z == "2"), "zone from the request: {e:?}");
        let e =
            classify(None, None, &ErrorDetail::new("OverconstrainedAllocationRequest", "Allocation Failed"), &ctx());
        assert!(matches!(e, CloudError::Capacity { zone: None, .. }));
    }

    #[test]
    fn spot_price_and_spot_impossible() {
        let msg = "Unable to perform operation 'Create VM' since the provided max price '0.9 USD' is lower than the current spot price '1.2 USD' for Azure Spot VM size 'Standard_NC24ads_A100_v4' in location 'eastus'.";
        let e = classify_response(400, None, &body("SpotPriceGreaterThanProvidedMaxPrice", msg), &ctx());
        assert_eq!(
            e,
            CloudError::PriceAboveCap { region: "eastus".into(), size: Some("Standard_NC24ads_A100_v4".into()) }
        );
        for code in ["AzureSpotIsNotSupportedForThisVMSize", "AzureSpotFeatureNotEnabledForSubscription"] {
            let e = classify_response(
                400,
                None,
                &body(code, "Azure Spot is not supported for this VM size Standard_NV6."),
                &ctx(),
            );
            assert!(matches!(e, CloudError::Permanent { code: ref c, .. } if c == code));
        }
    }

    #[test]
    fn throttling_and_transient() {
        let e = classify_response(
            429,
            Some(Duration::from_secs(17)),
            &body(
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type - Write_ObservationWindow_00:05:00.",
            ),
            &ctx(),
        );
        assert_eq!(e, CloudError::Throttled { retry_after_ms: Some(17_000) });
        let e = classify_response(429, None, b"", &ctx());
        assert_eq!(e, CloudError::Throttled { retry_after_ms: None });
        let e = classify_response(500, None, &body("InternalServerError", "An internal error occurred."), &ctx());
        assert!(matches!(e, CloudError::Transient { .. }));
        let e = classify_response(503, None, b"<html>Service Unavailable</html>", &ctx());
        assert!(e.is_retryable());
        let e = classify_response(502, None, &body("BadGateway", "upstream"), &ctx());
        assert!(e.is_retryable(), "unknown code with a 5xx stays transient: {e:?}");
    }

    #[test]
    fn not_found_and_auth() {
        let e = classify_response(
            404,
            None,
            &body(
                "ResourceNotFound",
                "The Resource 'Microsoft.AzureFleet/fleets/x' under resource group 'rg' was not found.",
            ),
            &ctx(),
        );
        assert_eq!(e, CloudError::NotFound { what: "fleet spw-j1-a1".into() });
        let e =
            classify_response(401, None, &body("InvalidAuthenticationToken", "The access token is invalid."), &ctx());
        assert!(matches!(e, CloudError::Permanent { ref code, .. } if code == "InvalidAuthenticationToken"));
        let e = classify_response(403, None, b"", &ctx());
        assert!(matches!(e, CloudError::Permanent { .. }));
        let e = classify_response(
            404,
            None,
            &body("ResourceGroupNotFound", "Resource group 'rg' could not be found."),
            &ctx(),
        );
        assert!(matches!(e, CloudError::Permanent { .. }), "a missing resource group is configuration: {e:?}");
    }

    #[test]
    fn nested_cause_wins_over_wrapper() {
        let mut outer = ErrorDetail::new("DeploymentFailed", "At least one resource deployment operation failed.");
        outer.details.push(ErrorDetail::new(
            "QuotaExceeded",
            "Operation could not be completed as it results in exceeding approved standardNDASv4_A100Family Cores quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 96, Current Usage: 96, Additional Required: 96, (Minimum) New Limit Required: 192.",
        ));
        let e = classify(Some(400), None, &outer, &ctx());
        assert!(
            matches!(e, CloudError::Quota { pool: QuotaPool::Family(ref f), limit: Some(96), .. } if f == "standardNDASv4_A100Family")
        );
    }
}
