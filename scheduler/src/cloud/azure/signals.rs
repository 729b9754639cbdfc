//! The spot capacity signals Azure publishes, read for [`AzureCloud::offers`]: eviction-rate bands
//! from Azure Resource Graph (a Kusto query over `SpotResources`, paged with `$skipToken`) and spot
//! placement scores (a POST per location, at most 8 regions × 5 sizes each, as the API allows).
//! Both are cached for `azure.spot_signals_refresh_secs` on the scheduler's clock and counted
//! ([`AzureCloud::signal_calls`]). A failed read is logged and leaves the offers without signals
//! (their prior falls back to the configured rate): a missing hint must not stop placement.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use azure_core::http::Method;

use super::AzureCloud;
use super::classify::ErrorContext;
use super::models::{
    ResourceGraphOptions, ResourceGraphQuery, ResourceGraphResponse, ResourceSize, SpotEvictionRateRow,
    SpotPlacementScoresInput, SpotPlacementScoresResponse,
};
use crate::cloud::CloudError;
use crate::model::{EvictionBand, PlacementScore};

/// Regions and sizes one placement-score request may name (the API's limits).
const SCORE_REGIONS_PER_CALL: usize = 8;
const SCORE_SIZES_PER_CALL: usize = 5;
/// Most Resource Graph pages followed (1,000 rows each).
const MAX_PAGES: u32 = 1_000;

/// The signals by (region, size), both lower-cased.
#[derive(Debug, Default)]
pub(crate) struct SpotSignals {
    bands: HashMap<(String, String), EvictionBand>,
    scores: HashMap<(String, String), PlacementScore>,
}

fn key(region: &str, size: &str) -> (String, String) {
    (region.to_ascii_lowercase(), size.to_ascii_lowercase())
}

impl SpotSignals {
    /// The eviction-rate band of a spot offer, when published.
    pub(crate) fn band(&self, region: &str, size: &str) -> Option<EvictionBand> {
        self.bands.get(&key(region, size)).copied()
    }

    /// The placement score of a spot offer, when published.
    pub(crate) fn score(&self, region: &str, size: &str) -> Option<PlacementScore> {
        self.scores.get(&key(region, size)).copied()
    }
}

/// The Resource Graph query for the eviction-rate bands of `regions` (Azure's documented one).
pub fn eviction_rate_query(regions: &[String]) -> String {
    let list: Vec<String> = regions.iter().map(|r| format!("'{}'", r.replace('\'', ""))).collect();
    format!(
        "SpotResources | where type =~ 'microsoft.compute/skuspotevictionrate/location' | where location in~ ({}) \
         | project skuName = tostring(sku.name), location, evictionRate = tostring(properties.evictionRate) \
         | order by skuName asc, location asc",
        list.join(", ")
    )
}

impl AzureCloud {
    /// Signal calls made so far: Resource Graph pages plus placement-score requests.
    pub fn signal_calls(&self) -> u64 {
        self.signal_calls.load(Ordering::Relaxed)
    }

    /// The signals, read again once `spot_signals_refresh_secs` has passed since the last read.
    pub(crate) async fn spot_signals(&self) -> Arc<SpotSignals> {
        let now = self.clock.now_ms();
        let refresh_ms = (self.config.spot_signals_refresh_secs * 1000.0) as i64;
        let mut cached = self.spot_signals.lock().await;
        if let Some((at, s)) = cached.as_ref()
            && now - at < refresh_ms
        {
            return s.clone();
        }
        let mut fresh = SpotSignals::default();
        let regions = self.regions();
        match self.eviction_bands(&regions).await {
            Ok(b) => fresh.bands = b,
            Err(e) => tracing::warn!(error = %e, "spot eviction-rate bands unavailable; using the configured rate"),
        }
        match self.placement_scores(&regions).await {
            Ok(s) => fresh.scores = s,
            Err(e) => tracing::warn!(error = %e, "spot placement scores unavailable"),
        }
        let fresh = Arc::new(fresh);
        *cached = Some((now, fresh.clone()));
        fresh
    }

    async fn eviction_bands(&self, regions: &[String]) -> Result<HashMap<(String, String), EvictionBand>, CloudError> {
        let url = self.url(
            &format!("{}/providers/Microsoft.ResourceGraph/resources", self.config.endpoint()),
            &self.config.api_versions.resource_graph,
            &[],
        )?;
        let ctx =
            ErrorContext { resource: Some("Resource Graph spot eviction rates".into()), ..ErrorContext::default() };
        let query = eviction_rate_query(regions);
        let mut out = HashMap::new();
        let mut skip_token = None;
        for _ in 0..MAX_PAGES {
            let body = ResourceGraphQuery {
                subscriptions: vec![self.config.subscription_id.clone()],
                query: query.clone(),
                options: Some(ResourceGraphOptions {
                    skip_token: skip_token.take(),
                    top: Some(1000),
                    result_format: Some("objectArray".into()),
                }),
            };
            let bytes = serde_json::to_vec(&body).map_err(|e| CloudError::Permanent {
                code: "InvalidRequest".into(),
                message: format!("Resource Graph query: {e}"),
            })?;
            self.signal_calls.fetch_add(1, Ordering::Relaxed);
            let reply = self.call(Method::Post, &url, Some(&bytes), &[200], &ctx).await?;
            let page: ResourceGraphResponse = super::parse_body(&reply.body, &url)?;
            let rows: Vec<SpotEvictionRateRow> = serde_json::from_value(page.data).unwrap_or_default();
            for (size, region, rate) in rows.iter().filter_map(SpotEvictionRateRow::fields) {
                if let Some(band) = EvictionBand::parse(&rate) {
                    out.insert(key(&region, &size), band);
                }
            }
            match page.skip_token.filter(|t| !t.is_empty()) {
                Some(t) => skip_token = Some(t),
                None => return Ok(out),
            }
        }
        Err(CloudError::Transient { message: format!("Resource Graph: more than {MAX_PAGES} pages") })
    }

    async fn placement_scores(
        &self,
        regions: &[String],
    ) -> Result<HashMap<(String, String), PlacementScore>, CloudError> {
        // Every catalog size sold in a region asked about (fractional-GPU sizes included: offers
        // list them too).
        let sizes: Vec<String> = self
            .catalog
            .sizes()
            .iter()
            .filter(|s| regions.iter().any(|r| self.catalog.price(&s.name, r).is_some()))
            .map(|s| s.name.clone())
            .collect();
        let mut out = HashMap::new();
        for rs in regions.chunks(SCORE_REGIONS_PER_CALL) {
            for ss in sizes.chunks(SCORE_SIZES_PER_CALL) {
                let base = format!(
                    "{}/subscriptions/{}/providers/Microsoft.Compute/locations/{}/placementScores/spot/generate",
                    self.config.endpoint(),
                    self.config.subscription_id,
                    rs[0]
                );
                let url = self.url(&base, &self.config.api_versions.spot_placement_scores, &[])?;
                let input = SpotPlacementScoresInput {
                    desired_locations: rs.to_vec(),
                    desired_sizes: ss.iter().map(|s| ResourceSize { sku: s.clone() }).collect(),
                    desired_count: Some(1),
                    availability_zones: Some(false),
                };
                let bytes = serde_json::to_vec(&input).map_err(|e| CloudError::Permanent {
                    code: "InvalidRequest".into(),
                    message: format!("placement scores: {e}"),
                })?;
                let ctx = ErrorContext {
                    region: Some(rs[0].clone()),
                    resource: Some(format!("spot placement scores in {}", rs[0])),
                    ..ErrorContext::default()
                };
                self.signal_calls.fetch_add(1, Ordering::Relaxed);
                let reply = self.call(Method::Post, &url, Some(&bytes), &[200], &ctx).await?;
                let page: SpotPlacementScoresResponse = super::parse_body(&reply.body, &url)?;
                for row in page.placement_scores.iter().filter(|r| r.availability_zone.is_none()) {
                    let (Some(size), Some(region), Some(score)) = (&row.sku, &row.region, &row.score) else { continue };
                    if let Some(s) = PlacementScore::parse(score) {
                        out.insert(key(region, size), s);
                    }
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_names_the_table_and_every_region() {
        let q = eviction_rate_query(&["eastus".into(), "westus3".into()]);
        assert!(q.starts_with("SpotResources"));
        assert!(q.contains("skuspotevictionrate") && q.contains("'eastus', 'westus3'"), "{q}");
    }

    #[test]
    fn both_row_shapes_are_read() {
        let projected: SpotEvictionRateRow = serde_json::from_str(
            r#"{"skuName": "standard_nc24ads_a100_v4", "location": "eastus", "evictionRate": "5-10"}"#,
        )
        .unwrap();
        assert_eq!(projected.fields(), Some(("standard_nc24ads_a100_v4".into(), "eastus".into(), "5-10".into())));
        let raw: SpotEvictionRateRow = serde_json::from_str(
            r#"{"type": "microsoft.compute/skuspotevictionrate/location", "sku": {"name": "Standard_D2s_v4"},
                "location": "westus3", "properties": {"evictionRate": "20+"}}"#,
        )
        .unwrap();
        assert_eq!(raw.fields(), Some(("Standard_D2s_v4".into(), "westus3".into(), "20+".into())));
    }
}
