//! A [`FleetRequest`] (plus the user's VM profile template) → the wire [`Fleet`] body we PUT.
//!
//! Every body built here must validate against the official schema (`tests/fleet_schema.rs`
//! checks spot, regular, multi-size and templated bodies).

use std::collections::BTreeMap;

use serde_json::Value;

use super::models::{
    ComputeProfile, EvictionPolicy, Fleet, FleetProperties, RegularPriorityAllocationStrategy, RegularPriorityProfile,
    SpotAllocationStrategy, SpotPriorityProfile, VmSizeProfile,
};
use crate::catalog::Catalog;
use crate::cloud::{CloudError, FleetRequest, TAG_ATTEMPT, TAG_JOB};
use crate::model::{Priority, fleet_name};

/// What the body takes from configuration rather than from the request.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetBodyOptions {
    /// `computeProfile.computeApiVersion`.
    pub compute_api_version: String,
    /// `computeProfile.platformFaultDomainCount`.
    pub platform_fault_domain_count: i32,
    /// The user's base VM profile (image, network, identity), a JSON object.
    pub template: Option<Value>,
    /// When set, the VMs of a job attempt's fleet start the node agent from `customData`.
    pub agent: Option<crate::agents::AgentBootstrap>,
}

impl Default for FleetBodyOptions {
    fn default() -> Self {
        FleetBodyOptions {
            compute_api_version: "2024-03-01".into(),
            platform_fault_domain_count: 1,
            template: None,
            agent: None,
        }
    }
}

/// The tags every fleet of a job attempt carries, so a fleet can be traced to its attempt (and
/// found again after a crash) from Azure alone.
pub fn attempt_tags(job_id: &str, attempt: u32) -> BTreeMap<String, String> {
    BTreeMap::from([(TAG_JOB.to_string(), job_id.to_string()), (TAG_ATTEMPT.to_string(), attempt.to_string())])
}

/// A request for one job attempt: deterministic name ([`fleet_name`]), attempt tags, and for a
/// gang `min_vms = vms` (all or nothing).
#[allow(clippy::too_many_arguments)]
pub fn attempt_request(
    job_id: &str,
    attempt: u32,
    region: &str,
    priority: Priority,
    sizes: Vec<String>,
    vms: u32,
    gang: bool,
    max_price_per_vm: Option<f64>,
) -> FleetRequest {
    FleetRequest {
        name: fleet_name(job_id, attempt),
        region: region.to_string(),
        priority,
        sizes,
        vms,
        min_vms: if gang { vms } else { 1.min(vms) },
        max_price_per_vm: if priority == Priority::Spot { max_price_per_vm } else { None },
        zones: Vec::new(),
        tags: attempt_tags(job_id, attempt),
        regular: None,
    }
}

/// Checks a request against Azure's rules before anything is sent; the error names the field.
pub fn validate_request(req: &FleetRequest) -> Result<(), CloudError> {
    let bad = |field: &str, problem: String| CloudError::Permanent {
        code: "InvalidFleetRequest".into(),
        message: format!("{field}: {problem}"),
    };
    let n = &req.name;
    let first_ok = n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    let last_ok = !n.ends_with('-') && !n.ends_with('.');
    if n.is_empty()
        || n.len() > 80
        || !first_ok
        || !last_ok
        || !n.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(bad(
            "name",
            format!(
                "{n:?}: 1-80 letters, digits, '-', '.', '_', starting with a letter or digit, not ending in '-' or '.'"
            ),
        ));
    }
    if req.region.is_empty() {
        return Err(bad("region", "empty".into()));
    }
    if req.sizes.is_empty() {
        return Err(bad("sizes", "at least one size is needed".into()));
    }
    if req.sizes.len() > 65536 {
        return Err(bad("sizes", "more than 65536 ranks".into()));
    }
    if let Some(s) = req.sizes.iter().find(|s| s.trim().is_empty()) {
        return Err(bad("sizes", format!("empty size name {s:?}")));
    }
    if req.vms == 0 {
        return Err(bad("vms", "must be at least 1".into()));
    }
    if i32::try_from(req.vms).is_err() {
        return Err(bad("vms", format!("{} is more than Azure accepts", req.vms)));
    }
    if req.min_vms > req.vms {
        return Err(bad("min_vms", format!("{} is more than vms ({})", req.min_vms, req.vms)));
    }
    if let Some(r) = req.regular {
        if req.priority != Priority::Spot {
            return Err(bad("regular", "a mixed fleet's first part is spot (priority: spot)".into()));
        }
        if r.vms == 0 {
            return Err(bad("regular.vms", "must be at least 1".into()));
        }
        if i32::try_from(r.vms).is_err() {
            return Err(bad("regular.vms", format!("{} is more than Azure accepts", r.vms)));
        }
        if r.min_vms > r.vms {
            return Err(bad("regular.min_vms", format!("{} is more than regular.vms ({})", r.min_vms, r.vms)));
        }
    }
    if let Some(p) = req.max_price_per_vm {
        if req.priority != Priority::Spot {
            return Err(bad("max_price_per_vm", "only spot fleets take a price cap".into()));
        }
        if !(p.is_finite() && p > 0.0) {
            return Err(bad("max_price_per_vm", format!("must be a positive price, got {p}")));
        }
    }
    Ok(())
}

/// Builds the PUT body. Sizes keep the request's order as ranks (rank 0 = the chosen size);
/// duplicates (case-insensitive) are dropped.
pub fn build_fleet(req: &FleetRequest, options: &FleetBodyOptions) -> Result<Fleet, CloudError> {
    validate_request(req)?;
    let mut sizes: Vec<&String> = Vec::new();
    for s in &req.sizes {
        if !sizes.iter().any(|k| k.eq_ignore_ascii_case(s)) {
            sizes.push(s);
        }
    }
    let vm_sizes_profile = sizes
        .iter()
        .enumerate()
        .map(|(rank, name)| VmSizeProfile { name: (*name).clone(), rank: Some(rank as u32) })
        .collect::<Vec<_>>();
    let regular_profile = |vms: u32, min_vms: u32| RegularPriorityProfile {
        capacity: Some(vms),
        min_capacity: Some(min_vms),
        allocation_strategy: Some(if vm_sizes_profile.len() > 1 {
            RegularPriorityAllocationStrategy::Prioritized
        } else {
            RegularPriorityAllocationStrategy::LowestPrice
        }),
    };
    let (spot, regular) = match req.priority {
        Priority::Spot => (
            Some(SpotPriorityProfile {
                capacity: Some(req.vms),
                min_capacity: Some(req.min_vms),
                max_price_per_vm: req.max_price_per_vm,
                eviction_policy: Some(EvictionPolicy::Delete),
                allocation_strategy: Some(SpotAllocationStrategy::PriceCapacityOptimized),
                maintain: Some(true),
            }),
            // A mixed fleet: the regular part beside the spot one, as in the official create example.
            req.regular.map(|r| regular_profile(r.vms, r.min_vms)),
        ),
        Priority::Regular => (None, Some(regular_profile(req.vms, req.min_vms))),
    };
    Ok(Fleet {
        location: req.region.clone(),
        tags: req.tags.clone(),
        zones: (!req.zones.is_empty()).then(|| req.zones.clone()),
        properties: Some(FleetProperties {
            spot_priority_profile: spot,
            regular_priority_profile: regular,
            vm_sizes_profile,
            compute_profile: Some(ComputeProfile {
                base_virtual_machine_profile: with_agent(
                    base_vm_profile(&req.name, options.template.as_ref()),
                    req,
                    options.agent.as_ref(),
                ),
                compute_api_version: Some(options.compute_api_version.clone()),
                platform_fault_domain_count: Some(options.platform_fault_domain_count),
                additional_virtual_machine_capabilities: None,
            }),
            ..FleetProperties::default()
        }),
        ..Fleet::default()
    })
}

/// The base VM profile: the user's template, with a computer-name prefix derived from the fleet
/// name when the template has an `osProfile` without one (Compute requires it there).
fn base_vm_profile(fleet: &str, template: Option<&Value>) -> Value {
    let mut ours = serde_json::json!({});
    if let Some(t) = template
        && t.get("osProfile").is_some_and(Value::is_object)
    {
        let prefix: String = fleet.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(15).collect();
        ours = serde_json::json!({ "osProfile": { "computerNamePrefix": prefix.trim_end_matches('-') } });
    }
    match template {
        Some(t) => merge_json(ours, t.clone()),
        None => ours,
    }
}

/// The agent's cloud-init `customData` in the profile of a job attempt's fleet (found by its
/// tags); `osProfile` then needs a computer-name prefix, derived from the fleet name unless the
/// template gives one. A `customData` of the template's own is replaced: the VMs must run the agent.
fn with_agent(mut profile: Value, req: &FleetRequest, agent: Option<&crate::agents::AgentBootstrap>) -> Value {
    let (Some(agent), Some(job), Some(attempt)) =
        (agent, req.tags.get(TAG_JOB), req.tags.get(TAG_ATTEMPT).and_then(|a| a.parse::<u32>().ok()))
    else {
        return profile;
    };
    let prefix: String = req.name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-').take(15).collect();
    let os = profile
        .as_object_mut()
        .map(|p| p.entry("osProfile").or_insert_with(|| serde_json::json!({})))
        .and_then(Value::as_object_mut);
    if let Some(os) = os {
        os.entry("computerNamePrefix").or_insert_with(|| Value::String(prefix.trim_end_matches('-').to_string()));
        os.insert("customData".into(), Value::String(agent.custom_data(job, attempt)));
    }
    profile
}

/// Deep merge: objects are merged key by key, `overlay` winning; anything else is replaced.
pub fn merge_json(base: Value, overlay: Value) -> Value {
    match (base, overlay) {
        (Value::Object(mut b), Value::Object(o)) => {
            for (k, v) in o {
                let merged = match b.remove(&k) {
                    Some(existing) => merge_json(existing, v),
                    None => v,
                };
                b.insert(k, merged);
            }
            Value::Object(b)
        }
        (_, overlay) => overlay,
    }
}

/// Sizes to rank in a fleet for the same demand: [`Catalog::ranked_sizes`] (one rule for the
/// control loop and the fleet body).
pub fn ranked_sizes(catalog: &Catalog, chosen: &str, region: &str, priority: Priority, max: usize) -> Vec<String> {
    catalog.ranked_sizes(chosen, region, priority, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(priority: Priority, sizes: &[&str]) -> FleetRequest {
        attempt_request(
            "job-7",
            2,
            "eastus",
            priority,
            sizes.iter().map(|s| s.to_string()).collect(),
            4,
            true,
            if priority == Priority::Spot { Some(1.25) } else { None },
        )
    }

    #[test]
    fn spot_gang_body() {
        let f = build_fleet(&req(Priority::Spot, &["Standard_NC24ads_A100_v4"]), &FleetBodyOptions::default()).unwrap();
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["location"], "eastus");
        assert_eq!(v["tags"][TAG_JOB], "job-7");
        assert_eq!(v["tags"][TAG_ATTEMPT], "2");
        let spot = &v["properties"]["spotPriorityProfile"];
        assert_eq!(spot["capacity"], 4);
        assert_eq!(spot["minCapacity"], 4, "a gang is all or nothing");
        assert_eq!(spot["maxPricePerVM"], 1.25);
        assert_eq!(spot["evictionPolicy"], "Delete");
        assert_eq!(spot["allocationStrategy"], "PriceCapacityOptimized");
        assert_eq!(spot["maintain"], true);
        assert!(v["properties"].get("regularPriorityProfile").is_none());
        assert_eq!(
            v["properties"]["vmSizesProfile"],
            serde_json::json!([{"name": "Standard_NC24ads_A100_v4", "rank": 0}])
        );
        assert_eq!(v["properties"]["computeProfile"]["computeApiVersion"], "2024-03-01");
    }

    #[test]
    fn regular_multi_size_is_prioritized_and_deduplicated() {
        let r = req(
            Priority::Regular,
            &["Standard_NC24ads_A100_v4", "Standard_NC48ads_A100_v4", "standard_nc24ads_a100_v4"],
        );
        let v = serde_json::to_value(build_fleet(&r, &FleetBodyOptions::default()).unwrap()).unwrap();
        let reg = &v["properties"]["regularPriorityProfile"];
        assert_eq!(reg["allocationStrategy"], "Prioritized");
        assert_eq!(reg["capacity"], 4);
        assert!(reg.get("maxPricePerVM").is_none());
        assert_eq!(v["properties"]["vmSizesProfile"].as_array().unwrap().len(), 2);
        assert_eq!(v["properties"]["vmSizesProfile"][1]["rank"], 1);
        let one = req(Priority::Regular, &["Standard_NC24ads_A100_v4"]);
        let v = serde_json::to_value(build_fleet(&one, &FleetBodyOptions::default()).unwrap()).unwrap();
        assert_eq!(v["properties"]["regularPriorityProfile"]["allocationStrategy"], "LowestPrice");
    }

    #[test]
    fn mixed_body_has_both_profiles() {
        let mut r = req(Priority::Spot, &["Standard_NC24ads_A100_v4"]);
        r.regular = Some(crate::cloud::FleetPart { vms: 2, min_vms: 2 });
        r.min_vms = 0;
        let v = serde_json::to_value(build_fleet(&r, &FleetBodyOptions::default()).unwrap()).unwrap();
        assert_eq!(v["properties"]["spotPriorityProfile"]["capacity"], 4);
        assert_eq!(v["properties"]["spotPriorityProfile"]["minCapacity"], 0);
        assert_eq!(v["properties"]["regularPriorityProfile"]["capacity"], 2);
        assert_eq!(v["properties"]["regularPriorityProfile"]["minCapacity"], 2);
        assert_eq!(r.total_vms(), 6);
        let mut bad = req(Priority::Regular, &["Standard_NC24ads_A100_v4"]);
        bad.regular = Some(crate::cloud::FleetPart { vms: 2, min_vms: 2 });
        assert!(build_fleet(&bad, &FleetBodyOptions::default()).unwrap_err().to_string().contains("regular"));
        r.regular = Some(crate::cloud::FleetPart { vms: 1, min_vms: 2 });
        assert!(build_fleet(&r, &FleetBodyOptions::default()).unwrap_err().to_string().contains("regular.min_vms"));
    }

    #[test]
    fn same_request_same_body() {
        let a = build_fleet(&req(Priority::Spot, &["Standard_NC24ads_A100_v4"]), &FleetBodyOptions::default()).unwrap();
        let b = build_fleet(&req(Priority::Spot, &["Standard_NC24ads_A100_v4"]), &FleetBodyOptions::default()).unwrap();
        assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
        assert_eq!(req(Priority::Spot, &["x"]).name, fleet_name("job-7", 2));
    }

    #[test]
    fn template_is_merged_and_user_fields_win() {
        let template = serde_json::json!({
            "storageProfile": {"imageReference": {"publisher": "microsoft-dsvm", "offer": "ubuntu-hpc", "sku": "2204", "version": "latest"}},
            "osProfile": {"adminUsername": "spillway", "linuxConfiguration": {"disablePasswordAuthentication": true}},
            "networkProfile": {"networkApiVersion": "2022-07-01"}
        });
        let opts = FleetBodyOptions { template: Some(template), ..FleetBodyOptions::default() };
        let f = build_fleet(&req(Priority::Regular, &["Standard_NC24ads_A100_v4"]), &opts).unwrap();
        let base = &f.properties.unwrap().compute_profile.unwrap().base_virtual_machine_profile;
        assert_eq!(base["osProfile"]["adminUsername"], "spillway");
        assert_eq!(base["osProfile"]["computerNamePrefix"], "spw-job-7-a2");
        assert_eq!(base["storageProfile"]["imageReference"]["offer"], "ubuntu-hpc");
        let own = serde_json::json!({"osProfile": {"computerNamePrefix": "mine"}});
        let opts = FleetBodyOptions { template: Some(own), ..FleetBodyOptions::default() };
        let f = build_fleet(&req(Priority::Regular, &["Standard_NC24ads_A100_v4"]), &opts).unwrap();
        assert_eq!(
            f.properties.unwrap().compute_profile.unwrap().base_virtual_machine_profile["osProfile"]["computerNamePrefix"],
            "mine"
        );
    }

    #[test]
    fn an_attempts_vms_start_the_agent_from_custom_data() {
        let keys = crate::agents::AgentKeys::from_bytes([3; 32]);
        let opts = FleetBodyOptions {
            agent: Some(crate::agents::AgentBootstrap::new("https://spillway.internal:7878", keys.clone())),
            ..FleetBodyOptions::default()
        };
        let f = build_fleet(&req(Priority::Spot, &["Standard_NC24ads_A100_v4"]), &opts).unwrap();
        let base = &f.properties.unwrap().compute_profile.unwrap().base_virtual_machine_profile;
        assert_eq!(base["osProfile"]["computerNamePrefix"], "spw-job-7-a2");
        let settings =
            crate::agents::settings_from_custom_data(base["osProfile"]["customData"].as_str().unwrap()).unwrap();
        assert_eq!((settings.job_id.as_str(), settings.attempt), ("job-7", 2));
        assert!(keys.verify(&settings.credential).is_some());
        let none =
            build_fleet(&req(Priority::Spot, &["Standard_NC24ads_A100_v4"]), &FleetBodyOptions::default()).unwrap();
        let base = none.properties.unwrap().compute_profile.unwrap().base_virtual_machine_profile;
        assert!(base.get("osProfile").is_none(), "no agent, no customData");
    }

    #[test]
    fn bad_requests_name_the_field() {
        let mut r = req(Priority::Spot, &["Standard_NC24ads_A100_v4"]);
        r.min_vms = 9;
        assert!(build_fleet(&r, &FleetBodyOptions::default()).unwrap_err().to_string().contains("min_vms"));
        let mut r = req(Priority::Spot, &[]);
        r.sizes.clear();
        assert!(build_fleet(&r, &FleetBodyOptions::default()).unwrap_err().to_string().contains("sizes"));
        let mut r = req(Priority::Spot, &["Standard_NC24ads_A100_v4"]);
        r.name = "bad name-".into();
        assert!(build_fleet(&r, &FleetBodyOptions::default()).unwrap_err().to_string().contains("name"));
        let mut r = req(Priority::Regular, &["Standard_NC24ads_A100_v4"]);
        r.max_price_per_vm = Some(1.0);
        assert!(build_fleet(&r, &FleetBodyOptions::default()).unwrap_err().to_string().contains("max_price_per_vm"));
        let mut r = req(Priority::Spot, &["Standard_NC24ads_A100_v4"]);
        r.max_price_per_vm = Some(f64::NAN);
        assert!(build_fleet(&r, &FleetBodyOptions::default()).is_err());
    }

    #[test]
    fn ranked_sizes_keep_the_demand() {
        let catalog = Catalog::builtin();
        for s in catalog.sizes() {
            let region = catalog.regions().into_iter().find(|r| catalog.price(&s.name, r).is_some()).unwrap();
            let ranked = ranked_sizes(&catalog, &s.name, &region, Priority::Regular, 10);
            assert_eq!(ranked[0], s.name, "the chosen size is rank 0");
            for alt in &ranked[1..] {
                let a = catalog.size(alt).unwrap();
                assert_eq!(a.gpus, s.gpus, "{alt} vs {}", s.name);
                assert_eq!(a.gpu_model, s.gpu_model, "{alt} vs {}", s.name);
                assert!(!s.infiniband || a.infiniband);
                assert!(catalog.price(alt, &region).and_then(|p| p.regular).is_some());
            }
            let families: Vec<bool> =
                ranked[1..].iter().map(|n| catalog.size(n).unwrap().family.eq_ignore_ascii_case(&s.family)).collect();
            assert!(families.windows(2).all(|w| w[0] || !w[1]), "same family first: {ranked:?}");
        }
        assert_eq!(ranked_sizes(&catalog, "Standard_Unknown", "eastus", Priority::Spot, 3), ["Standard_Unknown"]);
    }
}
