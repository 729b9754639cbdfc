//! Classified cloud errors turned back into Azure's wire errors: the codes, HTTP statuses and
//! message shapes Azure Resource Manager and Compute use, so that a client's classifier is tested
//! on what it will meet in production.

use axum::http::StatusCode;
use scheduler::cloud::CloudError;
use scheduler::cloud::azure::models::ErrorDetail;
use scheduler::model::{Priority, QuotaPool};

/// What the request was about, for the parts of a message a `CloudError` does not carry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ArmErrorContext {
    /// Zones of the request.
    pub zones: Vec<String>,
    /// The spot cap the request gave, USD per VM-hour.
    pub max_price: Option<f64>,
    /// The spot price of the size, USD per VM-hour.
    pub spot_price: Option<f64>,
}

/// The HTTP status and ARM error Azure gives for a classified failure, e.g. a family quota
/// refusal becomes 409 `OperationNotAllowed` with "Operation could not be completed as it results
/// in exceeding approved standardNCADSA100v4Family Cores quota. Additional details - Deployment
/// Model: Resource Manager, Location: eastus, Current Limit: 96, Current Usage: 96, Additional
/// Required: 24, (Minimum) New Limit Required: 120. …".
pub fn arm_error(error: &CloudError, ctx: &ArmErrorContext) -> (StatusCode, ErrorDetail) {
    match error {
        CloudError::Quota { region, pool, limit, usage, required } => {
            let what = match pool {
                QuotaPool::Cores => "Total Regional Cores".to_string(),
                QuotaPool::LowPriorityCores => "LowPriorityCores".to_string(),
                QuotaPool::Family(f) => format!("{f} Cores"),
            };
            let (l, u, r) = (limit.unwrap_or(0), usage.unwrap_or(0), required.unwrap_or(0));
            let message = format!(
                "Operation could not be completed as it results in exceeding approved {what} quota. Additional \
                 details - Deployment Model: Resource Manager, Location: {region}, Current Limit: {l}, Current \
                 Usage: {u}, Additional Required: {r}, (Minimum) New Limit Required: {}. Submit a request for \
                 Quota increase by specifying parameters listed in the 'Details' section for deployment to succeed.",
                u + r
            );
            (StatusCode::CONFLICT, ErrorDetail::new("OperationNotAllowed", message))
        }
        CloudError::Capacity { region, size, zone, .. } => {
            let size = size.as_deref().unwrap_or("requested");
            let (code, message) = match (zone, ctx.zones.len()) {
                (Some(z), _) => (
                    "ZonalAllocationFailed",
                    format!(
                        "Allocation failed. We do not have sufficient capacity for the requested VM size {size} in \
                         zone '{z}' of location '{region}'. Please try another zone or deploy without a zone."
                    ),
                ),
                (None, n) if n > 0 => (
                    "OverconstrainedAllocationRequest",
                    format!(
                        "Allocation failed. VM(s) with the following constraints cannot be allocated, because the \
                         condition is too restrictive. Please remove some constraints and try again. Constraints \
                         applied are: - Availability Zone ({}) - VM Size: {size} - Location: '{region}'",
                        ctx.zones.join(", ")
                    ),
                ),
                (None, _) => (
                    "AllocationFailed",
                    format!(
                        "Allocation failed. We do not have sufficient capacity for the requested VM size {size} in \
                         this region (location '{region}'). Try again later or use another VM size or region."
                    ),
                ),
            };
            (StatusCode::CONFLICT, ErrorDetail::new(code, message))
        }
        CloudError::SizeUnavailable { region, size, priority } => {
            let spot = if *priority == Some(Priority::Spot) { " for Spot" } else { "" };
            let message = format!(
                "The requested VM size {size} is currently not available{spot} in location '{region}'. Please try \
                 another size or deploy to a different location or different zone."
            );
            (StatusCode::CONFLICT, ErrorDetail::new("SkuNotAvailable", message))
        }
        CloudError::PriceAboveCap { size, .. } => {
            let size = size.as_deref().unwrap_or("requested");
            let usd = |p: Option<f64>| p.map(|p| format!("{p}")).unwrap_or_else(|| "unknown".into());
            let message = format!(
                "Unable to perform operation 'Create VM' since the provided max price '{} USD' is lower than the \
                 current spot price '{} USD' for Azure Spot VM size '{size}'.",
                usd(ctx.max_price),
                usd(ctx.spot_price)
            );
            (StatusCode::CONFLICT, ErrorDetail::new("SpotPriceGreaterThanProvidedMaxPrice", message))
        }
        CloudError::Throttled { .. } => (
            StatusCode::TOO_MANY_REQUESTS,
            ErrorDetail::new(
                "TooManyRequests",
                "The request is being throttled as the limit has been reached for operation type. Retry after the \
                 time in the Retry-After header.",
            ),
        ),
        CloudError::Transient { message } => {
            (StatusCode::INTERNAL_SERVER_ERROR, ErrorDetail::new("InternalOperationError", message.clone()))
        }
        CloudError::Permanent { code, message } => {
            let status = match code.as_str() {
                "Conflict" | "PropertyChangeNotAllowed" | "AnotherOperationInProgress" => StatusCode::CONFLICT,
                _ => StatusCode::BAD_REQUEST,
            };
            (status, ErrorDetail::new(code.clone(), message.clone()))
        }
        CloudError::NotFound { what } => (
            StatusCode::NOT_FOUND,
            ErrorDetail::new("ResourceNotFound", format!("The Resource '{what}' was not found.")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use scheduler::cloud::azure::classify::{ErrorContext, classify};

    use super::*;

    /// What the emulator sends must classify back to what SimCloud decided: the round trip the
    /// AzureCloud-against-emulator tests rely on.
    #[test]
    fn every_class_round_trips_through_the_azure_classifier() {
        let ctx = ErrorContext {
            region: Some("eastus".into()),
            sizes: vec!["Standard_NC24ads_A100_v4".into()],
            priority: Some(Priority::Regular),
            ..ErrorContext::default()
        };
        let cases = [
            CloudError::Quota {
                region: "eastus".into(),
                pool: QuotaPool::Family("standardNCADSA100v4Family".into()),
                limit: Some(96),
                usage: Some(96),
                required: Some(24),
            },
            CloudError::Quota {
                region: "eastus".into(),
                pool: QuotaPool::Cores,
                limit: Some(350),
                usage: Some(340),
                required: Some(24),
            },
            CloudError::Quota {
                region: "eastus".into(),
                pool: QuotaPool::LowPriorityCores,
                limit: Some(100),
                usage: Some(96),
                required: Some(24),
            },
            CloudError::Capacity {
                region: "eastus".into(),
                size: Some("Standard_NC24ads_A100_v4".into()),
                priority: Some(Priority::Regular),
                zone: None,
            },
            CloudError::SizeUnavailable {
                region: "eastus".into(),
                size: "Standard_NC24ads_A100_v4".into(),
                priority: Some(Priority::Regular),
            },
            CloudError::PriceAboveCap { region: "eastus".into(), size: Some("Standard_NC24ads_A100_v4".into()) },
        ];
        for e in cases {
            let (status, detail) = arm_error(&e, &ArmErrorContext::default());
            let back = classify(Some(status.as_u16()), None, &detail, &ctx);
            assert_eq!(back, e, "{detail:?}");
        }
        let (status, detail) =
            arm_error(&CloudError::Transient { message: "boom".into() }, &ArmErrorContext::default());
        assert_eq!(
            classify(Some(status.as_u16()), None, &detail, &ctx).class(),
            scheduler::cloud::FailureClass::Transient
        );
    }

    #[test]
    fn family_quota_message_has_azure_shape() {
        let e = CloudError::Quota {
            region: "eastus".into(),
            pool: QuotaPool::Family("standardNCADSA100v4Family".into()),
            limit: Some(96),
            usage: Some(96),
            required: Some(24),
        };
        let (status, d) = arm_error(&e, &ArmErrorContext::default());
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(d.code.as_deref(), Some("OperationNotAllowed"));
        assert!(d.message.unwrap().starts_with(
            "Operation could not be completed as it results in exceeding approved standardNCADSA100v4Family Cores \
             quota. Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 96, \
             Current Usage: 96, Additional Required: 24, (Minimum) New Limit Required: 120."
        ));
    }
}
