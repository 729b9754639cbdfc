//! Quota advice made ready to file: pool names checked against what Azure knows, and for each pool
//! to raise the `Microsoft.Quota` PUT (URL and body) and the equivalent `az quota update` command.
//!
//! The advice itself is computed by [`solver::advise`] (on a plan problem, or on the control loop's
//! view of its pending work) or by the simulator (on a what-if week); this module is what every
//! source shares: names, filings, the report's words.

use serde::{Deserialize, Serialize};

use crate::catalog::Catalog;
use crate::cloud::azure::quota::{QUOTA_API_VERSION, az_command, limit_request, quota_path};
use crate::model::{FieldErrors, QuotaPool, normalize_family};

/// Azure's public management endpoint.
pub const MANAGEMENT_ENDPOINT: &str = "https://management.azure.com";

/// What a filing shows in place of a subscription id nobody gave.
pub const SUBSCRIPTION_PLACEHOLDER: &str = "{subscriptionId}";

/// The message of advice with nothing to recommend.
pub const NOTHING_TO_ADVISE: &str = "no quota increase would place more work";

/// One pool's request, ready to file with Azure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Filing {
    /// Region.
    pub region: String,
    /// The Quota API's resource name: `cores`, `lowPriorityCores` or a family as the usages API
    /// spells it.
    pub resource_name: String,
    /// The limit now, vCPUs.
    pub current_limit: u64,
    /// vCPUs asked for on top.
    pub increase_vcpus: u64,
    /// The limit asked for, vCPUs.
    pub new_limit: u64,
    /// `PUT`.
    pub method: String,
    /// The full URL, api-version included.
    pub url: String,
    /// The `CurrentQuotaLimitBase` body.
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
    /// The Azure CLI equivalent.
    pub az: String,
}

/// The request for `pool` in `region` to go from `current_limit` to `new_limit`.
pub fn filing(
    endpoint: &str,
    subscription: &str,
    region: &str,
    pool: &QuotaPool,
    current_limit: u64,
    new_limit: u64,
) -> Filing {
    let name = pool.name().to_string();
    Filing {
        region: region.to_string(),
        resource_name: name.clone(),
        current_limit,
        increase_vcpus: new_limit.saturating_sub(current_limit),
        new_limit,
        method: "PUT".to_string(),
        url: format!(
            "{}{}?api-version={QUOTA_API_VERSION}",
            endpoint.trim_end_matches('/'),
            quota_path(subscription, region, &name)
        ),
        body: serde_json::to_value(limit_request(&name, new_limit)).unwrap_or_default(),
        az: az_command(subscription, region, &name, new_limit),
    }
}

/// The pools Azure knows for compute quota: `cores`, `lowPriorityCores` and the families of the
/// catalog's sizes, each in the spelling the Quota API takes.
#[derive(Debug, Clone)]
pub struct KnownPools {
    regions: Vec<String>,
    families: Vec<String>,
}

impl KnownPools {
    /// From a catalog: its regions, and its sizes' families.
    pub fn from_catalog(catalog: &Catalog) -> KnownPools {
        let mut families: Vec<String> = catalog.sizes().iter().map(|s| s.family.clone()).collect();
        families.sort_by_key(|f| normalize_family(f));
        families.dedup_by_key(|f| normalize_family(f));
        KnownPools { regions: catalog.regions(), families }
    }

    /// The pool by any spelling Azure uses (case and spaces ignored), in the Quota API's spelling;
    /// `None` when Azure has no such compute quota.
    pub fn pool(&self, name: &str) -> Option<QuotaPool> {
        match QuotaPool::parse(name) {
            QuotaPool::Family(f) => {
                let key = normalize_family(&f);
                self.families.iter().find(|k| normalize_family(k) == key).map(|k| QuotaPool::Family(k.clone()))
            }
            p => Some(p),
        }
    }

    /// True when spillway knows the region (its catalog prices it).
    pub fn has_region(&self, region: &str) -> bool {
        self.regions.iter().any(|r| r == region)
    }

    /// Records a problem for an unknown region or pool, naming it and what is known: the fields
    /// `{field}.region` and `{field}.pool`.
    pub fn check(&self, errs: &mut FieldErrors, field: &str, region: &str, pool: &str) {
        self.check_fields(errs, (&format!("{field}.region"), region), (&format!("{field}.pool"), pool));
    }

    /// [`KnownPools::check`] with each field named as the input names it: `(field, value)`.
    pub fn check_fields(
        &self,
        errs: &mut FieldErrors,
        (region_field, region): (&str, &str),
        (pool_field, pool): (&str, &str),
    ) {
        if !self.has_region(region) {
            errs.push(
                region_field,
                format!(
                    "{region:?} is not an Azure region spillway knows (its catalog prices {}; add yours with \
                     --catalog)",
                    self.regions.join(", ")
                ),
            );
        }
        if self.pool(pool).is_none() {
            errs.push(
                pool_field,
                format!(
                    "{pool:?} is not a Microsoft.Compute quota pool Azure knows: cores, lowPriorityCores or a VM \
                     family of the catalog ({})",
                    self.families.join(", ")
                ),
            );
        }
    }
}

/// Advice on a plan problem or on the control loop's pending work, ready to file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AdviceReport {
    /// Where the demand came from: `problem FILE`, `server`.
    pub source: String,
    /// One line for people: what the increases buy, or [`NOTHING_TO_ADVISE`].
    pub summary: String,
    /// Ranked, best first.
    pub recommendations: Vec<solver::advise::Recommendation>,
    /// The plan as things stand.
    pub before: solver::advise::PlanSummary,
    /// The confirming plan, every increase applied.
    pub after: solver::advise::PlanSummary,
    /// One request per pool, with the final new limit.
    pub requests: Vec<Filing>,
    /// Solves the advice took.
    pub solves: u32,
}

impl AdviceReport {
    /// Makes `advice` ready to file under `subscription` at `endpoint`. Pool names must be in the
    /// Quota API's spelling already (see [`KnownPools::pool`]).
    pub fn new(source: &str, advice: solver::advise::Advice, endpoint: &str, subscription: &str) -> AdviceReport {
        let requests = advice
            .requests()
            .iter()
            .map(|r| {
                filing(endpoint, subscription, &r.region, &QuotaPool::parse(&r.pool), r.current_limit, r.new_limit)
            })
            .collect();
        let gained = |f: fn(&solver::advise::Benefit) -> f64| advice.recommendations.iter().map(|r| f(&r.buys)).sum();
        let gpus: f64 = gained(|b| b.gpus as f64);
        AdviceReport {
            source: source.to_string(),
            summary: summary_line(
                advice.requests().len(),
                gpus as u64,
                gained(|b| b.gpu_hours),
                gained(|b| b.placed_weight),
            ),
            recommendations: advice.recommendations,
            before: advice.before,
            after: advice.after,
            requests,
            solves: advice.solves,
        }
    }
}

/// A one-line summary of what increases buy, for people.
pub fn summary_line(increases: usize, gpus: u64, gpu_hours: f64, weight: f64) -> String {
    if increases == 0 {
        return NOTHING_TO_ADVISE.to_string();
    }
    let s = if increases == 1 { "" } else { "s" };
    format!(
        "{increases} quota increase{s} would place {gpus} more GPUs ({gpu_hours:.1} GPU-hours, priority weight \
         {weight:.0}) that wait now"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_are_known_by_any_azure_spelling_and_filed_in_the_quota_apis() {
        let known = KnownPools::from_catalog(&Catalog::builtin());
        assert_eq!(
            known.pool("Standard NCADSA100v4 Family"),
            Some(QuotaPool::Family("standardNCADSA100v4Family".into()))
        );
        assert_eq!(known.pool("LOWPRIORITYCORES"), Some(QuotaPool::LowPriorityCores));
        assert_eq!(known.pool("marsFamily"), None);
        let mut errs = FieldErrors::default();
        known.check(&mut errs, "quotas[3]", "mars-1", "marsFamily");
        let text = errs.to_string();
        assert!(text.contains("quotas[3].region: \"mars-1\" is not an Azure region"), "{text}");
        assert!(text.contains("quotas[3].pool: \"marsFamily\" is not a Microsoft.Compute quota pool"), "{text}");
    }

    #[test]
    fn a_filing_puts_the_new_limit_on_the_pools_quota_resource() {
        let f = filing(
            MANAGEMENT_ENDPOINT,
            "sub",
            "eastus",
            &QuotaPool::Family("standardNCADSA100v4Family".into()),
            96,
            192,
        );
        assert_eq!(
            f.url,
            "https://management.azure.com/subscriptions/sub/providers/Microsoft.Compute/locations/eastus/providers/\
             Microsoft.Quota/quotas/standardNCADSA100v4Family?api-version=2025-09-01"
        );
        assert_eq!(f.body["properties"]["limit"]["value"], 192);
        assert_eq!(f.increase_vcpus, 96);
        assert!(f.az.contains("--limit-object value=192"));
    }
}
