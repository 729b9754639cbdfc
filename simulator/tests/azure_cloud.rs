//! `AzureCloud` against the ARM emulator on loopback: the real client (azure_core pipeline, bearer
//! policy, retries, LRO polling, paging, error classification) over real HTTP, with Azure's
//! paths, status codes, headers and error bodies served from a `SimCloud`.
//!
//! The simulated cloud runs on a `ManualClock`, so "creation takes 60 s" is decided by the test;
//! only `Retry-After` waits are real (1 s at most).

use std::sync::Arc;
use std::time::{Duration, Instant};

use scheduler::Catalog;
use scheduler::clock::ManualClock;
use scheduler::cloud::azure::fleet_body::attempt_request;
use scheduler::cloud::azure::{AzureCloud, AzureConfig, CredentialKind, RetryConfig};
use scheduler::cloud::{Cloud, CloudError, FleetRequest, OperationStatus, ProvisioningState};
use scheduler::model::{Priority, QuotaPool};
use simulator::arm_emulator::{EmulatorConfig, EmulatorHandle, serve};
use simulator::sim_cloud::RestrictionConfig;
use simulator::{SimCloud, SimCloudConfig};

#[path = "../../scheduler/tests/support/schema.rs"]
mod schema;

const TOKEN: &str = "test-token-5f2c";
const A100: &str = "Standard_NC24ads_A100_v4";

struct Env {
    emulator: EmulatorHandle,
    clock: Arc<ManualClock>,
}

async fn start(cloud_cfg: SimCloudConfig, tweak: impl FnOnce(&mut EmulatorConfig)) -> Env {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let sim = SimCloud::new(cloud_cfg, Catalog::builtin(), clock.clone()).expect("valid sim config");
    let mut cfg = EmulatorConfig::new(TOKEN);
    tweak(&mut cfg);
    let emulator = serve(cfg, Arc::new(sim)).await.expect("emulator starts");
    Env { emulator, clock }
}

fn sim_config() -> SimCloudConfig {
    let mut c = SimCloudConfig::modest(["eastus", "westus3"]);
    c.restrictions.push(RestrictionConfig {
        region: "eastus".into(),
        size: "Standard_ND96asr_v4".into(),
        zones: Vec::new(),
        reason: "NotAvailableForSubscription".into(),
    });
    c.restrictions.push(RestrictionConfig {
        region: "eastus".into(),
        size: "Standard_NC48ads_A100_v4".into(),
        zones: vec!["3".into()],
        reason: "NotAvailableForSubscription".into(),
    });
    c
}

fn azure_config(env: &Env, token: &str) -> AzureConfig {
    let mut c = AzureConfig::new(env.emulator.subscription(), "spillway");
    c.management_endpoint = env.emulator.base_url();
    c.regions = vec!["eastus".into(), "westus3".into()];
    c.credential = CredentialKind::StaticToken;
    c.token = Some(token.into());
    c.request_timeout_secs = 10.0;
    c.retry = RetryConfig { max_retries: 4, max_elapsed_secs: 10.0, initial_backoff_secs: 0.05, max_backoff_secs: 0.2 };
    c
}

fn client(env: &Env) -> AzureCloud {
    AzureCloud::new(azure_config(env, TOKEN), Catalog::builtin()).expect("client builds")
}

fn request(job: &str, region: &str, priority: Priority, vms: u32, cap: Option<f64>) -> FleetRequest {
    attempt_request(job, 1, region, priority, vec![A100.into()], vms, true, cap)
}

#[tokio::test]
async fn create_poll_succeed_get_list_delete() {
    // Pages of one fleet, so listing must follow nextLink.
    let env = start(sim_config(), |c| c.page_size = 1).await;
    let cloud = client(&env);

    let req = request("job-a", "eastus", Priority::Regular, 2, None);
    let op = cloud.begin_create_fleet(&req).await.unwrap();
    assert_eq!(op.fleet_name, req.name);
    assert!(op.status_url.as_deref().unwrap().starts_with(&env.emulator.base_url()), "{op:?}");
    assert_eq!(op.retry_after_ms, 1000, "the emulator's Retry-After: 1");
    assert!(matches!(cloud.poll_operation(&op).await.unwrap(), OperationStatus::InProgress { .. }));
    assert_eq!(cloud.get_fleet(&req.name).await.unwrap().provisioning_state, ProvisioningState::Creating);

    env.clock.advance_ms(61_000);
    assert_eq!(cloud.poll_operation(&op).await.unwrap(), OperationStatus::Succeeded);
    let fleet = cloud.get_fleet(&req.name).await.unwrap();
    assert_eq!(fleet.provisioning_state, ProvisioningState::Succeeded);
    assert_eq!(
        (fleet.region.as_str(), fleet.priority, fleet.capacity_vms, fleet.min_capacity_vms),
        ("eastus", Priority::Regular, 2, 2)
    );
    assert_eq!(fleet.sizes[..], [A100]);
    assert_eq!(fleet.tags.get("spillway-job").map(String::as_str), Some("job-a"));
    assert_eq!(fleet.tags.get("spillway-attempt").map(String::as_str), Some("1"));

    // The looping helper: time passes on the simulated cloud while it waits Retry-After.
    let req_b = request("job-b", "westus3", Priority::Spot, 1, Some(50.0));
    let clock = env.clock.clone();
    let ticker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        clock.advance_ms(61_000);
    });
    let fleet_b = cloud.create_fleet_and_wait(&req_b).await.unwrap();
    ticker.await.unwrap();
    assert_eq!(fleet_b.provisioning_state, ProvisioningState::Succeeded);
    assert_eq!(fleet_b.priority, Priority::Spot);

    let mut names: Vec<String> = cloud.list_fleets().await.unwrap().into_iter().map(|f| f.name).collect();
    names.sort();
    assert_eq!(names, [req.name.clone(), req_b.name.clone()], "both pages read");
    assert!(env.emulator.stats().count("GET", "fleets", Some(200)) >= 2);

    // What the emulator returns is a valid Fleet resource per the official definition of the
    // api-version asked for (read from shared/azure beside the checkout; skipped where absent).
    let resource = serde_json::to_value(cloud.get_fleet_resource(&req.name).await.unwrap()).unwrap();
    assert_eq!(resource["properties"]["provisioningState"], "Succeeded");
    let version = &cloud.config().api_versions.fleet;
    if let Some(specs) = schema::azure_definitions(&format!("azurefleet-{version}/azurefleet.json")) {
        let errors = schema::definition_errors(&specs, version, "Fleet", &resource, true);
        assert!(errors.is_empty(), "{errors:#?}\n{resource:#}");
    }

    let sets = cloud.fleet_scale_sets(&req.name).await.unwrap();
    assert!(!sets.is_empty());
    assert!(sets.iter().all(|s| s.error.is_none()), "{sets:?}");

    // Accepted at once; Azure takes a while (10 s here) and shows Deleting meanwhile.
    cloud.delete_fleet(&req.name).await.unwrap();
    let deleting = cloud.get_fleet(&req.name).await.unwrap();
    assert_eq!((deleting.provisioning_state, deleting.running_vms), (ProvisioningState::Deleting, Some(0)));
    env.clock.advance_ms(10_000);
    assert!(matches!(cloud.get_fleet(&req.name).await, Err(CloudError::NotFound { .. })));
    // Deleting what is gone (204) is fine.
    cloud.delete_fleet(&req.name).await.unwrap();
    assert!(env.emulator.stats().count("DELETE", "fleets", Some(204)) >= 1);
    assert_eq!(cloud.list_fleets().await.unwrap().len(), 1);
}

#[tokio::test]
async fn quota_skus_and_offers() {
    let env = start(sim_config(), |c| c.page_size = 3).await;
    let cloud = client(&env);
    let quota = cloud.quota("eastus").await.unwrap();
    let find = |pool: &QuotaPool| quota.iter().find(|q| q.pool.key() == pool.key()).cloned();
    assert_eq!(find(&QuotaPool::Cores).unwrap().limit, 200);
    assert_eq!(find(&QuotaPool::LowPriorityCores).unwrap().limit, 200);
    let a100_family = Catalog::builtin().size(A100).unwrap().family.clone();
    let fam = find(&QuotaPool::Family(a100_family.clone())).expect("the A100 family pool");
    assert_eq!((fam.limit, fam.usage), (96, 0));
    assert!(quota.iter().all(|q| q.region == "eastus"));

    // Usage shows up once a fleet holds quota.
    cloud.begin_create_fleet(&request("job-q", "eastus", Priority::Regular, 2, None)).await.unwrap();
    let quota = cloud.quota("eastus").await.unwrap();
    let fam = quota.iter().find(|q| q.pool.key() == QuotaPool::Family(a100_family.clone()).key()).unwrap();
    assert_eq!(fam.usage, 48, "2 × 24 vCPUs");

    let r = cloud.restrictions("eastus").await.unwrap();
    let nd = r.iter().find(|r| r.size == "Standard_ND96asr_v4").expect("region restriction");
    assert!(nd.zones.is_empty());
    assert_eq!(nd.reason, "NotAvailableForSubscription");
    let nc48 = r.iter().find(|r| r.size == "Standard_NC48ads_A100_v4").expect("zonal restriction");
    assert_eq!(nc48.zones, ["3"]);
    assert!(cloud.restrictions("westus3").await.unwrap().is_empty());

    let offers = cloud.offers().await.unwrap();
    assert!(
        !offers.iter().any(|o| o.region == "eastus" && o.size == "Standard_ND96asr_v4"),
        "restricted in the region"
    );
    assert!(offers.iter().any(|o| o.region == "eastus" && o.size == "Standard_NC48ads_A100_v4"), "zonal only");
    let catalog = Catalog::builtin();
    for o in &offers {
        let row = catalog.price(&o.size, &o.region).expect("catalog row");
        assert_eq!(o.price_per_hour, row.for_priority(o.priority), "catalog price for {o:?}");
    }
}

#[tokio::test]
async fn every_error_class_from_the_emulator_bodies() {
    let mut cfg = sim_config();
    cfg.capacity.push(simulator::sim_cloud::OfferCapacity {
        region: "westus3".into(),
        size: A100.into(),
        priority: Some(Priority::Regular),
        vms: Some(0),
        eviction_rate_per_hour: None,
    });
    let env = start(cfg, |_| {}).await;
    let cloud = client(&env);

    // Family quota, refused at once (409 OperationNotAllowed with the numbers).
    let e = cloud.begin_create_fleet(&request("job-q", "eastus", Priority::Regular, 5, None)).await.unwrap_err();
    match e {
        CloudError::Quota { region, pool: QuotaPool::Family(f), limit, usage, required } => {
            assert_eq!(region, "eastus");
            assert!(f.eq_ignore_ascii_case(&Catalog::builtin().size(A100).unwrap().family), "{f}");
            assert_eq!((limit, usage, required), (Some(96), Some(0), Some(120)));
        }
        other => panic!("expected family quota, got {other:?}"),
    }
    // Spot quota.
    env.emulator.cloud().set_quota_limit("eastus", &QuotaPool::LowPriorityCores, 10).unwrap();
    let e = cloud.begin_create_fleet(&request("job-s", "eastus", Priority::Spot, 1, Some(50.0))).await.unwrap_err();
    assert!(matches!(e, CloudError::Quota { pool: QuotaPool::LowPriorityCores, limit: Some(10), .. }), "{e:?}");

    // Size not available in the region (SKU restriction).
    let mut req = request("job-u", "eastus", Priority::Regular, 1, None);
    req.sizes = vec!["Standard_ND96asr_v4".into()];
    let e = cloud.begin_create_fleet(&req).await.unwrap_err();
    assert!(
        matches!(&e, CloudError::SizeUnavailable { region, size, .. } if region == "eastus" && size == "Standard_ND96asr_v4"),
        "{e:?}"
    );

    // No capacity: accepted, then the operation fails with AllocationFailed.
    let op = cloud.begin_create_fleet(&request("job-c", "westus3", Priority::Regular, 1, None)).await.unwrap();
    env.clock.advance_ms(61_000);
    match cloud.poll_operation(&op).await.unwrap() {
        OperationStatus::Failed(CloudError::Capacity { region, size, priority, .. }) => {
            assert_eq!(region, "westus3");
            assert_eq!(size.as_deref(), Some(A100));
            assert_eq!(priority, Some(Priority::Regular), "from the fleet, read back after the failure");
        }
        other => panic!("expected a capacity failure, got {other:?}"),
    }
    let sets = cloud.fleet_scale_sets(&op.fleet_name).await.unwrap();
    assert!(sets.iter().any(|s| matches!(s.error, Some(CloudError::Capacity { .. }))), "{sets:?}");

    // Spot price above the cap.
    let op = cloud.begin_create_fleet(&request("job-p", "westus3", Priority::Spot, 1, Some(0.01))).await.unwrap();
    env.clock.advance_ms(61_000);
    let status = cloud.poll_operation(&op).await.unwrap();
    assert!(
        matches!(&status, OperationStatus::Failed(CloudError::PriceAboveCap { region, .. }) if region == "westus3"),
        "{status:?}"
    );

    // Not found.
    let e = cloud.get_fleet("spw-nobody-a1").await.unwrap_err();
    assert!(matches!(e, CloudError::NotFound { .. }), "{e:?}");

    // Permanent: an api-version the service does not know (400 InvalidApiVersionParameter), not retried.
    let mut bad = azure_config(&env, TOKEN);
    bad.api_versions.fleet = "2019-01-01".into();
    let before = env.emulator.stats().total;
    let e = AzureCloud::new(bad, Catalog::builtin()).unwrap().list_fleets().await.unwrap_err();
    assert!(matches!(&e, CloudError::Permanent { code, .. } if code == "NoRegisteredProviderFound"), "{e:?}");
    assert_eq!(env.emulator.stats().total - before, 1, "a permanent error is not retried");
}

#[tokio::test]
async fn injected_faults_classify_as_transient_and_throttled() {
    // Every creation's operation fails with InternalOperationError.
    let env = start(sim_config(), |c| c.faults.lro_failure_rate = 1.0).await;
    let cloud = client(&env);
    let op = cloud.begin_create_fleet(&request("job-t", "eastus", Priority::Regular, 1, None)).await.unwrap();
    env.clock.advance_ms(61_000);
    let status = cloud.poll_operation(&op).await.unwrap();
    assert!(matches!(status, OperationStatus::Failed(CloudError::Transient { .. })), "{status:?}");

    // Always throttled, and no budget to wait: the classified 429 with its Retry-After.
    let env = start(sim_config(), |c| c.faults.throttle_rate = 1.0).await;
    let mut cfg = azure_config(&env, TOKEN);
    cfg.retry.max_retries = 0;
    let e = AzureCloud::new(cfg, Catalog::builtin()).unwrap().quota("eastus").await.unwrap_err();
    assert_eq!(e, CloudError::Throttled { retry_after_ms: Some(1000) });

    // Always 500: retried up to the budget, then Transient.
    let env = start(sim_config(), |c| c.faults.error_rate = 1.0).await;
    let mut cfg = azure_config(&env, TOKEN);
    cfg.retry.max_retries = 2;
    let e = AzureCloud::new(cfg, Catalog::builtin()).unwrap().quota("eastus").await.unwrap_err();
    assert!(matches!(e, CloudError::Transient { .. }), "{e:?}");
    assert_eq!(env.emulator.stats().count("GET", "usages", Some(500)), 3, "one try and two retries");
}

#[tokio::test]
async fn throttling_waits_retry_after_before_retrying() {
    let env = start(sim_config(), |c| {
        c.faults.throttle_rate = 0.5;
        c.faults.throttle_retry_after_seconds = 1;
        c.faults.seed = 7;
    })
    .await;
    let cloud = client(&env);
    let started = Instant::now();
    for _ in 0..2 {
        cloud.quota("eastus").await.unwrap();
    }
    let elapsed = started.elapsed();
    let log = env.emulator.stats().log;
    let throttled: Vec<usize> = (0..log.len()).filter(|&i| log[i].status == 429).collect();
    assert!(!throttled.is_empty(), "seed 7 at 50 % throttles some of: {log:?}");
    for &i in &throttled {
        let next = log.get(i + 1).expect("a retry follows every 429");
        let gap = next.at_ms - log[i].at_ms;
        assert!(gap >= 950, "retried {gap} ms after a 429 with Retry-After: 1");
    }
    assert!(elapsed >= Duration::from_millis(950 * throttled.len() as u64), "{elapsed:?}");
    assert_eq!(log.iter().filter(|r| r.status == 200).count(), 2, "both calls got through");
}

#[tokio::test]
async fn the_same_name_twice_is_one_fleet() {
    let env = start(sim_config(), |_| {}).await;
    let cloud = client(&env);
    let req = request("job-twice", "eastus", Priority::Regular, 2, None);
    let first = cloud.begin_create_fleet(&req).await.unwrap();
    let second = cloud.begin_create_fleet(&req).await.unwrap();
    assert_eq!(first.fleet_name, second.fleet_name);
    assert_eq!(cloud.list_fleets().await.unwrap().len(), 1);
    assert_eq!(env.emulator.cloud().fleets_snapshot().len(), 1);
    let quota = cloud.quota("eastus").await.unwrap();
    let cores = quota.iter().find(|q| q.pool == QuotaPool::Cores).unwrap();
    assert_eq!(cores.usage, 48, "quota held once");
}

#[tokio::test]
async fn a_wrong_token_is_refused_without_retries() {
    let env = start(sim_config(), |_| {}).await;
    let cloud = AzureCloud::new(azure_config(&env, "not-the-token"), Catalog::builtin()).unwrap();
    let e = cloud.quota("eastus").await.unwrap_err();
    assert!(matches!(&e, CloudError::Permanent { code, .. } if code == "AuthenticationFailed"), "{e:?}");
    assert!(!e.is_retryable());
    assert_eq!(env.emulator.stats().count("GET", "usages", Some(401)), 1);
    // The right token works against the same server.
    client(&env).quota("eastus").await.unwrap();
}

#[tokio::test]
async fn a_fleet_is_resized_by_a_put_of_the_new_capacity_and_a_missing_one_is_never_created() {
    let env = start(sim_config(), |_| {}).await;
    let cloud = client(&env);
    let req = request("job-grow", "eastus", Priority::Regular, 2, None);
    cloud.begin_create_fleet(&req).await.unwrap();
    env.clock.advance_ms(61_000);
    assert_eq!(cloud.get_fleet(&req.name).await.unwrap().running_vms, Some(2));
    let puts = env.emulator.stats().count("PUT", "fleets", None);

    // Grown to 3 with the minimum it was created with: one PUT on the same name, answered 200.
    let grown = FleetRequest { vms: 3, ..req.clone() };
    let op = cloud.begin_resize_fleet(&grown).await.unwrap();
    assert_eq!(op.fleet_name, req.name);
    assert_eq!(env.emulator.stats().count("PUT", "fleets", None), puts + 1);
    assert_eq!(env.emulator.stats().count("PUT", "fleets", Some(200)), 1, "an update, not a creation");
    assert_eq!(cloud.get_fleet(&req.name).await.unwrap().provisioning_state, ProvisioningState::Updating);
    env.clock.advance_ms(61_000);
    assert_eq!(cloud.poll_operation(&op).await.unwrap(), OperationStatus::Succeeded);
    let fleet = cloud.get_fleet(&req.name).await.unwrap();
    assert_eq!((fleet.capacity_vms, fleet.min_capacity_vms, fleet.running_vms), (3, 2, Some(3)));
    assert_eq!(cloud.list_fleets().await.unwrap().len(), 1);
    let quota = cloud.quota("eastus").await.unwrap();
    let cores = quota.iter().find(|q| q.pool == QuotaPool::Cores).unwrap();
    assert_eq!(cores.usage, 72, "the quota of 3 VMs, held once");

    // Azure refuses to change minCapacity: the refusal comes back classified, the fleet unchanged.
    let bad = FleetRequest { vms: 4, min_vms: 4, ..req.clone() };
    let err = cloud.begin_resize_fleet(&bad).await.unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("minCapacity"), "{err}");
    assert_eq!(cloud.get_fleet(&req.name).await.unwrap().capacity_vms, 3);

    // A resize of a fleet that is gone (or going) never creates it again.
    let other = request("job-gone", "eastus", Priority::Regular, 1, None);
    assert!(matches!(cloud.begin_resize_fleet(&other).await, Err(CloudError::NotFound { .. })));
    cloud.delete_fleet(&req.name).await.unwrap();
    assert!(matches!(cloud.begin_resize_fleet(&grown).await, Err(CloudError::NotFound { .. })));
    env.clock.advance_ms(10_000);
    assert!(matches!(cloud.begin_resize_fleet(&grown).await, Err(CloudError::NotFound { .. })));
    assert!(cloud.list_fleets().await.unwrap().is_empty());
}

/// Issue #22: `AzureCloud` reads the spot signals as Azure publishes them, from the emulator that
/// serves them out of the simulated cloud's hidden state: eviction-rate bands from Resource Graph
/// (paged with `$skipToken`), placement scores per location. They match what the simulated cloud
/// shows through the trait, no offer carries a capacity, the signals are cached for
/// `spot_signals_refresh_secs` on the scheduler's clock, and every call is counted.
#[tokio::test]
async fn offers_carry_the_published_spot_signals_cached_and_counted() {
    let mut cfg = sim_config();
    cfg.capacity.push(simulator::sim_cloud::OfferCapacity {
        region: "westus3".into(),
        size: A100.into(),
        priority: Some(Priority::Spot),
        vms: Some(0),
        eviction_rate_per_hour: Some(0.3),
    });
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let sim = Arc::new(SimCloud::new(cfg, Catalog::builtin(), clock.clone()).expect("valid sim config"));
    let mut ecfg = EmulatorConfig::new(TOKEN);
    ecfg.page_size = 3;
    let emulator = serve(ecfg, sim.clone()).await.expect("emulator starts");
    let env = Env { emulator, clock: clock.clone() };
    let cloud = client(&env).with_clock(clock.clone());

    let offers = cloud.offers().await.expect("offers");
    let direct = sim.offers().await.expect("sim offers");
    let mut compared = 0;
    for o in &offers {
        assert_eq!(o.capacity_vms, None, "{o:?}");
        if o.priority != Priority::Spot {
            assert_eq!((o.eviction_band, o.placement_score), (None, None), "{o:?}");
            continue;
        }
        let Some(d) = direct.iter().find(|d| d.region == o.region && d.size == o.size && d.priority == o.priority)
        else {
            continue;
        };
        assert_eq!(
            (o.eviction_band, o.placement_score),
            (d.eviction_band, d.placement_score),
            "{}/{}",
            o.region,
            o.size
        );
        compared += 1;
    }
    assert!(compared >= 4, "spot offers of both regions compared: {compared}");
    let west = offers.iter().find(|o| o.region == "westus3" && o.size == A100 && o.priority == Priority::Spot).unwrap();
    assert_eq!(west.eviction_band, Some(scheduler::model::EvictionBand::Over20));
    assert_eq!(west.placement_score, Some(scheduler::model::PlacementScore::Low), "nothing free: Low");
    assert!(west.eviction_rate_per_hour > 0.25, "the prior is the band's midpoint plus the score's risk");

    let stats = env.emulator.stats();
    let graph_pages = stats.count("POST", "ResourceGraph", Some(200));
    let score_posts = stats.count("POST", "placementScores", Some(200));
    assert!(graph_pages >= 2, "pages of 3 rows: the $skipToken was followed ({graph_pages})");
    assert!(score_posts >= 1);
    let calls = cloud.signal_calls();
    assert_eq!(calls, graph_pages + score_posts, "every call counted");

    cloud.offers().await.expect("offers");
    assert_eq!(cloud.signal_calls(), calls, "cached within the refresh interval");
    clock.advance_ms(601_000);
    cloud.offers().await.expect("offers");
    assert_eq!(cloud.signal_calls(), 2 * calls, "read again after it");
}
