//! The quota advisor's requests validate against the official `Microsoft.Quota` 2025-09-01
//! definition, and the official examples parse into our wire models. The definition and its
//! examples are read at run time from `shared/azure/quota-2025-09-01/` (Microsoft's
//! azure-rest-api-specs, as published in the project's shared reference folder), never copied into
//! the repository; each test skips with a message when the folder is absent.

use scheduler::Catalog;
use scheduler::advice::{KnownPools, MANAGEMENT_ENDPOINT, filing};
use scheduler::cloud::azure::quota::{CurrentQuotaLimitBase, QuotaRequestDetails, QuotaRequestState, limit_request};
use std::path::Path;

use scheduler::model::QuotaPool;
use serde_json::Value;

#[path = "support/schema.rs"]
mod schema;

const BODY: &str = "#/definitions/CurrentQuotaLimitBase";

fn example(spec: &Path, name: &str) -> Value {
    let path = spec.parent().unwrap().join("examples").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn every_request_body_we_file_validates_against_the_official_schema() {
    let Some(spec) = schema::quota_spec() else { return };
    let known = KnownPools::from_catalog(&Catalog::builtin());
    let mut pools = vec![QuotaPool::Cores, QuotaPool::LowPriorityCores];
    for s in Catalog::builtin().sizes() {
        pools.push(known.pool(&s.family).expect("catalog families are known"));
    }
    pools.dedup();
    assert!(pools.len() > 8, "cores, lowPriorityCores and the catalog's families");
    for pool in &pools {
        for limit in [0u64, 24, 96, 4_800, i32::MAX as u64] {
            let f = filing(MANAGEMENT_ENDPOINT, "00000000-0000-0000-0000-000000000000", "eastus", pool, 0, limit);
            let errors = schema::errors_against(&spec, BODY, &f.body, false);
            assert!(errors.is_empty(), "{pool} {limit}: {errors:#?}\n{}", f.body);
            assert!(
                f.url.contains(&format!("/providers/Microsoft.Quota/quotas/{}?api-version=2025-09-01", pool.name()))
            );
        }
    }
}

#[test]
fn the_validator_refuses_what_the_schema_refuses() {
    let Some(spec) = schema::quota_spec() else { return };
    let good = serde_json::to_value(limit_request("cores", 100)).unwrap();
    assert!(schema::errors_against(&spec, BODY, &good, false).is_empty());
    // Read-only fields must not be sent; the limit's value is required by the derived LimitObject
    // (reached through the LimitJsonObject discriminator) and must be an int32.
    let mut read_only = good.clone();
    read_only["properties"]["unit"] = "Count".into();
    let mut no_value = good.clone();
    no_value["properties"]["limit"].as_object_mut().unwrap().remove("value");
    let mut too_big = good.clone();
    too_big["properties"]["limit"]["value"] = Value::from(1u64 << 40);
    let mut unknown_kind = good.clone();
    unknown_kind["properties"]["limit"]["limitObjectType"] = "LimitRange".into();
    for (name, body, want) in [
        ("read-only unit", read_only, "read-only"),
        ("no value", no_value, "required property value"),
        ("too big", too_big, "not an int32"),
        ("unknown kind", unknown_kind, "discriminator"),
    ] {
        let errors = schema::errors_against(&spec, BODY, &body, false);
        assert!(errors.iter().any(|e| e.contains(want)), "{name}: {errors:#?}");
    }
}

#[test]
fn the_official_examples_parse_into_our_models_and_our_put_matches_the_compute_example() {
    let Some(spec) = schema::quota_spec() else { return };
    let put = example(&spec, "putComputeOneSkuQuotaRequest.json");
    let request: CurrentQuotaLimitBase =
        serde_json::from_value(put["parameters"]["createQuotaRequest"].clone()).unwrap();
    assert_eq!(request.resource_name(), Some("standardFSv2Family"));
    assert_eq!(
        serde_json::to_value(limit_request("standardFSv2Family", 10)).unwrap(),
        put["parameters"]["createQuotaRequest"]
    );
    let answer: CurrentQuotaLimitBase = serde_json::from_value(put["responses"]["200"]["body"].clone()).unwrap();
    assert_eq!(answer.limit_value(), Some(10));

    let get = example(&spec, "getComputeOneSkuQuotaLimit.json");
    let body = &get["responses"]["200"]["body"];
    let limit: CurrentQuotaLimitBase = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(limit.limit_value(), Some(100));
    assert!(schema::errors_against(&spec, BODY, body, true).is_empty());
    // Round trip: what we read is what we would write back.
    assert_eq!(&serde_json::to_value(&limit).unwrap(), body);

    let status = example(&spec, "getQuotaRequestStatusById.json");
    let body = &status["responses"]["200"]["body"];
    let details: QuotaRequestDetails = serde_json::from_value(body.clone()).unwrap();
    let props = details.properties.as_ref().unwrap();
    assert_eq!(props.provisioning_state, Some(QuotaRequestState::Succeeded));
    assert_eq!(props.value[0].limit.as_ref().map(|l| l.value), Some(50));
    let errors = schema::errors_against(&spec, "#/definitions/QuotaRequestDetails", body, true);
    assert!(errors.is_empty(), "{errors:#?}");
}
