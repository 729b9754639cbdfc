//! `Microsoft.Quota` on the ARM emulator, through `AzureCloud`'s quota client and over raw HTTP:
//! a modest increase is granted and shows in the Compute usages, a large one is escalated and
//! changes nothing, a limit below the vCPUs in use is invalid, a request takes its time on the
//! simulated clock, and bad requests are refused naming the field. Bodies are checked against
//! Microsoft's definition in `shared/azure` when it is there.

use std::sync::Arc;

use reqwest::StatusCode;
use scheduler::Catalog;
use scheduler::clock::ManualClock;
use scheduler::cloud::azure::fleet_body::attempt_request;
use scheduler::cloud::azure::quota::QuotaRequestState;
use scheduler::cloud::azure::{AzureCloud, AzureConfig, CredentialKind, RetryConfig};
use scheduler::cloud::{Cloud, CloudError};
use scheduler::model::{Priority, QuotaPool};
use serde_json::{Value, json};
use simulator::arm_emulator::{EmulatorConfig, EmulatorHandle, serve};
use simulator::{SimCloud, SimCloudConfig};

#[path = "../../scheduler/tests/support/schema.rs"]
mod schema;

const TOKEN: &str = "quota-token-7e1d";
const A100: &str = "Standard_NC24ads_A100_v4";

struct Env {
    emulator: EmulatorHandle,
    clock: Arc<ManualClock>,
}

async fn start(tweak: impl FnOnce(&mut EmulatorConfig)) -> Env {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let sim = SimCloud::new(SimCloudConfig::modest(["eastus", "westus3"]), Catalog::builtin(), clock.clone())
        .expect("valid sim config");
    let mut cfg = EmulatorConfig::new(TOKEN);
    cfg.retry_after_seconds = 0;
    cfg.quota_request_seconds = 0;
    tweak(&mut cfg);
    let emulator = serve(cfg, Arc::new(sim)).await.expect("emulator starts");
    Env { emulator, clock }
}

fn client(env: &Env) -> AzureCloud {
    let mut c = AzureConfig::new(env.emulator.subscription(), "spillway");
    c.management_endpoint = env.emulator.base_url();
    c.regions = vec!["eastus".into(), "westus3".into()];
    c.credential = CredentialKind::StaticToken;
    c.token = Some(TOKEN.into());
    c.request_timeout_secs = 10.0;
    c.retry = RetryConfig { max_retries: 2, max_elapsed_secs: 5.0, initial_backoff_secs: 0.05, max_backoff_secs: 0.1 };
    AzureCloud::new(c, Catalog::builtin()).expect("client builds")
}

fn a100_family() -> String {
    Catalog::builtin().size(A100).unwrap().family.clone()
}

async fn family_limit(cloud: &AzureCloud, region: &str) -> (u64, u64) {
    let family = QuotaPool::Family(a100_family());
    let q = cloud.quota(region).await.unwrap();
    let row = q.iter().find(|q| q.pool.key() == family.key()).expect("the A100 family in the usages");
    (row.limit, row.usage)
}

#[tokio::test]
async fn a_modest_increase_is_granted_and_the_usages_show_it() {
    let env = start(|_| {}).await;
    let cloud = client(&env);
    let family = a100_family();
    assert_eq!(cloud.quota_limit("westus3", &family).await.unwrap(), 96);
    let out = cloud.request_quota_limit("westus3", &family, 312).await.unwrap();
    assert_eq!(out.state, QuotaRequestState::Succeeded, "{out:?}");
    assert_eq!((out.limit_before, out.requested_limit, out.limit_after), (96, 312, 312));
    assert!(out.request_id.is_some());
    assert_eq!(family_limit(&cloud, "westus3").await, (312, 0), "Compute usages show the new limit");
    assert_eq!(family_limit(&cloud, "eastus").await.0, 96, "another region is untouched");
    // The granted quota is real: 13 A100 VMs (312 vCPUs) now fit where 4 did; cores were raised too.
    cloud.request_quota_limit("westus3", "cores", 400).await.unwrap();
    let fleet = attempt_request("job-q", 1, "westus3", Priority::Regular, vec![A100.into()], 13, true, None);
    cloud.begin_create_fleet(&fleet).await.expect("the raised quota holds 13 VMs");
}

#[tokio::test]
async fn a_large_increase_is_escalated_and_changes_nothing() {
    let env = start(|c| c.quota_auto_approve_vcpus = 200).await;
    let cloud = client(&env);
    let out = cloud.request_quota_limit("westus3", &a100_family(), 96 + 960).await.unwrap();
    assert_eq!(out.state.as_str(), "Escalated", "{out:?}");
    assert!(out.state.is_final());
    assert!(out.message.as_deref().unwrap_or("").contains("support ticket"), "{out:?}");
    assert_eq!(out.limit_after, 96);
    assert_eq!(family_limit(&cloud, "westus3").await.0, 96);
}

#[tokio::test]
async fn a_limit_below_what_is_in_use_is_invalid() {
    let env = start(|_| {}).await;
    let cloud = client(&env);
    let fleet = attempt_request("job-u", 1, "eastus", Priority::Regular, vec![A100.into()], 2, true, None);
    cloud.begin_create_fleet(&fleet).await.unwrap();
    assert_eq!(family_limit(&cloud, "eastus").await, (96, 48));
    let out = cloud.request_quota_limit("eastus", &a100_family(), 24).await.unwrap();
    assert_eq!(out.state, QuotaRequestState::Invalid, "{out:?}");
    assert!(out.message.as_deref().unwrap_or("").contains("below the 48 vCPUs in use"), "{out:?}");
    assert_eq!(out.limit_after, 96);
}

#[tokio::test]
async fn an_unknown_pool_is_not_found() {
    let env = start(|_| {}).await;
    let cloud = client(&env);
    match cloud.quota_limit("westus3", "standardWarpDriveFamily").await {
        Err(CloudError::NotFound { .. }) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    match cloud.request_quota_limit("westus3", "a/b", 10).await {
        Err(CloudError::Permanent { code, .. }) => assert_eq!(code, "InvalidQuotaResource"),
        other => panic!("a resource name with a slash never reaches a URL: {other:?}"),
    }
}

/// Raw HTTP: a request waits its simulated time, and every body has the definition's shape.
#[tokio::test]
async fn a_request_runs_on_the_simulated_clock_and_answers_in_the_definitions_shape() {
    let env = start(|c| c.quota_request_seconds = 30).await;
    let http = reqwest::Client::new();
    let family = a100_family();
    let scope = format!(
        "{}/subscriptions/{}/providers/Microsoft.Compute/locations/westus3/providers/Microsoft.Quota",
        env.emulator.base_url(),
        env.emulator.subscription()
    );
    let api = "api-version=2025-09-01";
    let get = |url: String| {
        let http = http.clone();
        async move {
            let r = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
            let status = r.status();
            let text = r.text().await.unwrap();
            (status, if text.is_empty() { Value::Null } else { serde_json::from_str::<Value>(&text).unwrap() })
        }
    };
    let body =
        json!({"properties": {"name": {"value": family}, "limit": {"limitObjectType": "LimitValue", "value": 192}}});
    let put = http.put(format!("{scope}/quotas/{family}?{api}")).bearer_auth(TOKEN).json(&body).send().await.unwrap();
    assert_eq!(put.status(), StatusCode::ACCEPTED);
    let location = put.headers()["location"].to_str().unwrap().to_string();
    assert!(location.contains("/providers/Microsoft.Quota/operationsStatus/"), "{location}");
    assert!(put.headers().contains_key("retry-after"));
    let id = location.split("/operationsStatus/").nth(1).unwrap().split('?').next().unwrap().to_string();

    let (status, _) = get(location.clone()).await;
    assert_eq!(status, StatusCode::ACCEPTED, "undecided before its 30 s");
    let (status, running) = get(format!("{scope}/quotaRequests/{id}?{api}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(running["properties"]["provisioningState"], "InProgress");
    let (_, limit) = get(format!("{scope}/quotas/{family}?{api}")).await;
    assert_eq!(limit["properties"]["limit"]["value"], 96, "nothing applied yet");

    env.clock.advance_ms(30_000);
    let (status, done) = get(location).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(done["properties"]["provisioningState"], "Succeeded");
    assert_eq!(done["properties"]["value"][0]["limit"]["value"], 192);
    let (_, limit) = get(format!("{scope}/quotas/{family}?{api}")).await;
    assert_eq!(limit["properties"]["limit"]["value"], 192);
    let (_, list) = get(format!("{scope}/quotas?{api}")).await;
    let names: Vec<&str> = list["value"].as_array().unwrap().iter().filter_map(|q| q["name"].as_str()).collect();
    assert!(names.contains(&"cores") && names.contains(&"lowPriorityCores") && names.contains(&family.as_str()));

    if let Some(spec) = schema::quota_spec() {
        for (what, pointer, value) in [
            ("request status", "#/definitions/QuotaRequestDetails", &done),
            ("request status while running", "#/definitions/QuotaRequestDetails", &running),
            ("quota", "#/definitions/CurrentQuotaLimitBase", &limit),
            ("a listed quota", "#/definitions/CurrentQuotaLimitBase", &list["value"][0]),
        ] {
            let errors = schema::errors_against(&spec, pointer, value, true);
            assert!(errors.is_empty(), "{what}: {errors:#?}");
        }
    }
}

#[tokio::test]
async fn bad_requests_are_refused_naming_the_field() {
    let env = start(|_| {}).await;
    let http = reqwest::Client::new();
    let family = a100_family();
    let base = format!(
        "{}/subscriptions/{}/providers/Microsoft.Compute/locations/westus3/providers/Microsoft.Quota/quotas/{family}",
        env.emulator.base_url(),
        env.emulator.subscription()
    );
    let put = |url: String, body: Value| {
        let http = http.clone();
        async move {
            let r = http.put(&url).bearer_auth(TOKEN).json(&body).send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let limit = |kind: &str, value: i64| json!({"properties": {"limit": {"limitObjectType": kind, "value": value}}});
    let url = format!("{base}?api-version=2025-09-01");
    for (body, code, says) in [
        (limit("LimitRange", 10), "InvalidRequestContent", "properties.limit.limitObjectType"),
        (limit("LimitValue", -5), "InvalidRequestContent", "properties.limit.value"),
        (json!({"properties": {}}), "InvalidRequestContent", "properties.limit"),
        (
            json!({"properties": {"name": {"value": "cores"}, "limit": {"limitObjectType": "LimitValue", "value": 10}}}),
            "InvalidRequestContent",
            "properties.name.value",
        ),
    ] {
        let (status, answer) = put(url.clone(), body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
        assert!(answer["error"]["message"].as_str().unwrap().contains(says), "{body} → {answer}");
    }
    let (status, answer) = put(base.clone(), limit("LimitValue", 10)).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("MissingApiVersionParameter"))
    );
    let (status, answer) = put(format!("{base}?api-version=2024-11-01"), limit("LimitValue", 10)).await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("NoRegisteredProviderFound"))
    );
    let unauth = http.get(&url).send().await.unwrap();
    assert_eq!(unauth.status(), StatusCode::UNAUTHORIZED);
}
