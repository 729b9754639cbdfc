//! SimCloud semantics in virtual time: quota, capacity, idempotency, evictions, outages, config.

use std::collections::BTreeMap;
use std::sync::Arc;

use scheduler::Catalog;
use scheduler::clock::ManualClock;
use scheduler::cloud::{Cloud, CloudError, FailureClass, FleetRequest, OperationStatus, ProvisioningState};
use scheduler::model::{EvictionBand, PlacementScore, Priority, QuotaPool, spot_eviction_prior};
use simulator::sim_cloud::{OfferCapacity, RegionQuota, RestrictionConfig, SimCloud, SimCloudConfig};

const A100: &str = "Standard_NC24ads_A100_v4"; // 24 vCPUs, standardNCADSA100v4Family
const A100X2: &str = "Standard_NC48ads_A100_v4"; // 48 vCPUs, same family
const FAMILY: &str = "standardNCADSA100v4Family";
const T0: i64 = 1_700_000_000_000;

fn cloud(cfg: SimCloudConfig) -> (SimCloud, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let c = SimCloud::new(cfg, Catalog::builtin(), clock.clone()).expect("valid config");
    (c, clock)
}

fn req(name: &str, priority: Priority, sizes: &[&str], vms: u32, min_vms: u32) -> FleetRequest {
    FleetRequest {
        name: name.into(),
        region: "eastus".into(),
        priority,
        sizes: sizes.iter().map(|s| s.to_string()).collect(),
        vms,
        min_vms,
        max_price_per_vm: None,
        zones: vec![],
        tags: BTreeMap::from([("spillway-job".to_string(), name.to_string())]),
        regular: None,
    }
}

fn usage(quota: &[scheduler::model::Quota], pool: &QuotaPool) -> (u64, u64) {
    let q = quota.iter().find(|q| q.pool.key() == pool.key()).expect("pool listed");
    (q.usage, q.limit)
}

fn family() -> QuotaPool {
    QuotaPool::Family(FAMILY.into())
}

async fn poll(c: &SimCloud, op: &scheduler::cloud::FleetOperation) -> OperationStatus {
    c.poll_operation(op).await.expect("poll works")
}

#[tokio::test]
async fn family_quota_refuses_at_once_with_real_numbers() {
    let (c, _) = cloud(SimCloudConfig::modest(["eastus"])); // family 96, cores 200
    let e = c.begin_create_fleet(&req("big", Priority::Regular, &[A100], 5, 5)).await.unwrap_err();
    assert_eq!(
        e,
        CloudError::Quota {
            region: "eastus".into(),
            pool: family(),
            limit: Some(96),
            usage: Some(0),
            required: Some(120)
        }
    );
    // 4 VMs fit (96 vCPUs) and hold the quota while being created: the next VM is refused.
    c.begin_create_fleet(&req("four", Priority::Regular, &[A100], 4, 4)).await.unwrap();
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()), (96, 96));
    let e = c.begin_create_fleet(&req("one", Priority::Regular, &[A100], 1, 1)).await.unwrap_err();
    assert_eq!(
        e,
        CloudError::Quota {
            region: "eastus".into(),
            pool: family(),
            limit: Some(96),
            usage: Some(96),
            required: Some(24)
        }
    );
    let n = c.counters();
    assert_eq!((n.creates_attempted, n.creates_refused), (3, 2));
    assert_eq!(n.failures_by_class.get(&FailureClass::Quota), Some(&2));
}

#[tokio::test]
async fn regional_cores_and_spot_pools_are_separate() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.quota.push(RegionQuota {
        region: "eastus".into(),
        cores: Some(48),
        low_priority_cores: Some(72),
        family: None,
        families: BTreeMap::from([(FAMILY.to_string(), 500)]),
    });
    let (c, _) = cloud(cfg);
    // Regular: the family has room, `cores` does not.
    let e = c.begin_create_fleet(&req("r", Priority::Regular, &[A100], 3, 3)).await.unwrap_err();
    assert!(
        matches!(e, CloudError::Quota { pool: QuotaPool::Cores, limit: Some(48), required: Some(72), .. }),
        "{e:?}"
    );
    // Spot draws on lowPriorityCores only: 3 × 24 = 72 fits although `cores` is 48.
    c.begin_create_fleet(&req("s", Priority::Spot, &[A100], 3, 3)).await.unwrap();
    let q = c.quota("eastus").await.unwrap();
    assert_eq!(usage(&q, &QuotaPool::LowPriorityCores), (72, 72));
    assert_eq!(usage(&q, &QuotaPool::Cores), (0, 48));
    assert_eq!(usage(&q, &family()).0, 0);
    let e = c.begin_create_fleet(&req("s2", Priority::Spot, &[A100], 1, 1)).await.unwrap_err();
    assert!(matches!(e, CloudError::Quota { pool: QuotaPool::LowPriorityCores, usage: Some(72), .. }), "{e:?}");
}

#[tokio::test]
async fn creation_takes_the_provisioning_time_then_runs() {
    let (c, clock) = cloud(SimCloudConfig::modest(["eastus"])); // 60 s, 8 VMs per offer
    let op = c.begin_create_fleet(&req("f", Priority::Regular, &[A100], 2, 2)).await.unwrap();
    assert!(op.retry_after_ms > 0 && op.retry_after_ms <= 15_000);
    assert!(matches!(poll(&c, &op).await, OperationStatus::InProgress { .. }));
    assert_eq!(c.get_fleet("f").await.unwrap().provisioning_state, ProvisioningState::Creating);
    clock.advance_ms(59_999);
    assert!(matches!(poll(&c, &op).await, OperationStatus::InProgress { .. }));
    clock.advance_ms(1);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
    let f = c.get_fleet("f").await.unwrap();
    assert_eq!(f.provisioning_state, ProvisioningState::Succeeded);
    assert_eq!(f.running_vms, Some(2));
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()), (48, 96));
    assert_eq!(c.free_capacity("eastus", A100, Priority::Regular).unwrap(), 6);
    let sets = c.fleet_scale_sets("f").await.unwrap();
    assert_eq!(sets.len(), 1);
    assert_eq!(sets[0].operation_status, ProvisioningState::Succeeded);
}

#[tokio::test]
async fn no_capacity_fails_the_operation_and_releases_quota() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.capacity.push(OfferCapacity {
        region: "eastus".into(),
        size: A100.into(),
        priority: Some(Priority::Regular),
        vms: Some(2),
        eviction_rate_per_hour: None,
    });
    let (c, clock) = cloud(cfg);
    let op = c.begin_create_fleet(&req("gang", Priority::Regular, &[A100], 3, 3)).await.unwrap();
    clock.advance_ms(60_000);
    let want = CloudError::Capacity {
        region: "eastus".into(),
        size: Some(A100.into()),
        priority: Some(Priority::Regular),
        zone: None,
    };
    assert_eq!(poll(&c, &op).await, OperationStatus::Failed(want.clone()));
    let f = c.get_fleet("gang").await.unwrap();
    assert_eq!((f.provisioning_state, f.running_vms), (ProvisioningState::Failed, Some(0)));
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()).0, 0, "a failed fleet holds no quota");
    let sets = c.fleet_scale_sets("gang").await.unwrap();
    assert_eq!(sets[0].operation_status, ProvisioningState::Failed);
    assert_eq!(sets[0].error, Some(want));
    // A non-gang fleet takes what there is when that meets its minimum.
    let op = c.begin_create_fleet(&req("elastic", Priority::Regular, &[A100], 3, 1)).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
    assert_eq!(c.get_fleet("elastic").await.unwrap().running_vms, Some(2));
    let n = c.counters();
    assert_eq!((n.creates_failed, n.creates_succeeded), (1, 1));
    assert_eq!(n.failures_by_class.get(&FailureClass::Capacity), Some(&1));
}

#[tokio::test]
async fn ranked_sizes_are_tried_in_order() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.capacity.push(OfferCapacity {
        region: "eastus".into(),
        size: A100.into(),
        priority: None,
        vms: Some(0),
        eviction_rate_per_hour: None,
    });
    let (c, clock) = cloud(cfg);
    let op = c.begin_create_fleet(&req("f", Priority::Regular, &[A100, A100X2], 1, 1)).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
    let snap = c.fleet_snapshot("f").unwrap();
    assert_eq!(snap.size.as_deref(), Some(A100X2));
    let sets = c.fleet_scale_sets("f").await.unwrap();
    assert_eq!(sets.len(), 2);
    assert!(matches!(sets[0].error, Some(CloudError::Capacity { .. })));
    assert_eq!(sets[1].operation_status, ProvisioningState::Succeeded);
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()).0, 48, "quota follows the size that runs");
}

#[tokio::test]
async fn the_same_name_twice_is_one_fleet() {
    let (c, clock) = cloud(SimCloudConfig::modest(["eastus"]));
    let r = req("twice", Priority::Regular, &[A100], 2, 2);
    let op1 = c.begin_create_fleet(&r).await.unwrap();
    let op2 = c.begin_create_fleet(&r).await.unwrap();
    assert_eq!(op1.status_url, op2.status_url);
    assert_eq!(c.list_fleets().await.unwrap().len(), 1);
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()).0, 48, "no double quota");
    clock.advance_ms(60_000);
    // Even after success, a repeat finds the same fleet and its finished operation.
    let op3 = c.begin_create_fleet(&r).await.unwrap();
    assert_eq!(poll(&c, &op3).await, OperationStatus::Succeeded);
    assert_eq!(c.free_capacity("eastus", A100, Priority::Regular).unwrap(), 6);
    assert_eq!(c.counters().creates_repeated, 2);
}

#[tokio::test]
async fn delete_frees_capacity_and_quota_and_is_idempotent() {
    let (c, clock) = cloud(SimCloudConfig::modest(["eastus"]));
    let op = c.begin_create_fleet(&req("d", Priority::Regular, &[A100], 4, 4)).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
    assert_eq!(c.free_capacity("eastus", A100, Priority::Regular).unwrap(), 4);
    c.delete_fleet("d").await.unwrap();
    c.delete_fleet("d").await.unwrap();
    assert_eq!(c.free_capacity("eastus", A100, Priority::Regular).unwrap(), 8);
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()).0, 0);
    assert!(matches!(c.get_fleet("d").await, Err(CloudError::NotFound { .. })));
    assert_eq!(c.counters().deletes, 1);
    // Deleting while creating cancels the operation; the name can be used again.
    let op = c.begin_create_fleet(&req("d", Priority::Regular, &[A100], 1, 1)).await.unwrap();
    c.delete_fleet("d").await.unwrap();
    assert!(
        matches!(poll(&c, &op).await, OperationStatus::Failed(CloudError::Permanent { code, .. }) if code == "Canceled")
    );
    let op2 = c.begin_create_fleet(&req("d", Priority::Regular, &[A100], 1, 1)).await.unwrap();
    assert_ne!(op.status_url, op2.status_url);
}

#[tokio::test]
async fn bad_requests_are_classified() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.restrictions.push(RestrictionConfig {
        region: "eastus".into(),
        size: A100X2.into(),
        zones: vec![],
        reason: "NotAvailableForSubscription".into(),
    });
    let (c, _) = cloud(cfg);
    let e = c.begin_create_fleet(&req("x", Priority::Regular, &["Standard_Nope_v9"], 1, 1)).await.unwrap_err();
    assert!(matches!(e, CloudError::SizeUnavailable { ref size, .. } if size == "Standard_Nope_v9"), "{e:?}");
    let e = c.begin_create_fleet(&req("x", Priority::Regular, &[A100X2], 1, 1)).await.unwrap_err();
    assert!(matches!(e, CloudError::SizeUnavailable { ref size, .. } if size == A100X2), "restricted: {e:?}");
    let mut r = req("x", Priority::Regular, &[A100], 1, 1);
    r.region = "mars".into();
    assert!(matches!(c.begin_create_fleet(&r).await, Err(CloudError::Permanent { .. })));
    let e = c.begin_create_fleet(&req("-bad", Priority::Regular, &[A100], 1, 1)).await.unwrap_err();
    assert!(matches!(e, CloudError::Permanent { ref code, .. } if code == "InvalidResourceName"));
    let e = c.begin_create_fleet(&req("x", Priority::Regular, &[A100], 1, 2)).await.unwrap_err();
    assert!(matches!(e, CloudError::Permanent { ref code, .. } if code == "InvalidParameter"));
    // A restricted alternative is skipped, not fatal.
    c.begin_create_fleet(&req("ok", Priority::Regular, &[A100X2, A100], 1, 1)).await.unwrap();
    let r = c.restrictions("eastus").await.unwrap();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].size, A100X2);
    assert!(c.list_fleets().await.unwrap().iter().all(|f| f.name == "ok"));
}

#[tokio::test]
async fn spot_above_the_price_cap_fails() {
    let (c, clock) = cloud(SimCloudConfig::modest(["eastus"]));
    let spot = Catalog::builtin().price(A100, "eastus").and_then(|p| p.spot).expect("catalog has an A100 spot price");
    let mut r = req("cheap", Priority::Spot, &[A100], 1, 1);
    r.max_price_per_vm = Some(spot / 2.0);
    let op = c.begin_create_fleet(&r).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(
        poll(&c, &op).await,
        OperationStatus::Failed(CloudError::PriceAboveCap { region: "eastus".into(), size: Some(A100.into()) })
    );
    let mut r = req("fair", Priority::Spot, &[A100], 1, 1);
    r.max_price_per_vm = Some(spot);
    let op = c.begin_create_fleet(&r).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
}

fn eviction_cloud(seed: u64) -> (SimCloud, Arc<ManualClock>) {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.seed = seed;
    cfg.default_capacity_vms = 64;
    cfg.default_quota.low_priority_cores = 10_000;
    cfg.default_spot_eviction_rate_per_hour = 0.1;
    cloud(cfg)
}

/// Runs 8 spot VMs for 24 virtual hours, sampling `running_vms` every 10 minutes.
async fn eviction_trace(seed: u64) -> (Vec<u32>, u64) {
    let (c, clock) = eviction_cloud(seed);
    c.begin_create(
        &req("s", Priority::Spot, &[A100], 8, 1),
        &simulator::sim_cloud::CreateOptions { maintain: false, fail_with: None },
    )
    .unwrap();
    let mut trace = Vec::new();
    for _ in 0..144 {
        clock.advance_ms(600_000);
        trace.push(c.get_fleet("s").await.unwrap().running_vms.unwrap());
    }
    (trace, c.counters().evictions)
}

#[tokio::test]
async fn spot_evictions_are_seeded_and_follow_the_rate() {
    let (a, evicted_a) = eviction_trace(7).await;
    let (b, _) = eviction_trace(7).await;
    let (other, _) = eviction_trace(8).await;
    assert_eq!(a, b, "same seed, same evictions");
    assert_ne!(a, other, "another seed, other evictions");
    assert!(a.windows(2).all(|w| w[1] <= w[0]), "without maintain, running only falls: {a:?}");
    // 8 VMs at 0.1/VM-hour: P(a VM survives 24 h) = e^-2.4 ≈ 9%, so most are gone.
    assert!((4..=8).contains(&evicted_a), "evicted {evicted_a}");
    assert_eq!(u64::from(8 - a.last().unwrap()), evicted_a);
}

#[tokio::test]
async fn sampling_often_or_rarely_sees_the_same_evictions() {
    let (c1, k1) = eviction_cloud(3);
    let (c2, k2) = eviction_cloud(3);
    for c in [&c1, &c2] {
        c.begin_create_fleet(&req("s", Priority::Spot, &[A100], 8, 1)).await.unwrap();
    }
    for _ in 0..600 {
        k1.advance_ms(60_000);
        c1.get_fleet("s").await.unwrap();
    }
    k2.advance_ms(600 * 60_000);
    assert_eq!(c1.fleet_snapshot("s"), c2.fleet_snapshot("s"), "lazy evaluation is independent of call frequency");
    assert_eq!(c1.counters(), c2.counters());
}

#[tokio::test]
async fn maintain_refills_when_reclaimed_capacity_returns() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.default_capacity_vms = 4;
    cfg.eviction_reclaim_seconds = 600;
    let (c, clock) = cloud(cfg);
    let op = c.begin_create_fleet(&req("m", Priority::Spot, &[A100], 4, 4)).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
    assert_eq!(c.evict("m", 2).unwrap(), 2);
    assert_eq!(c.get_fleet("m").await.unwrap().running_vms, Some(2));
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &QuotaPool::LowPriorityCores).0, 48);
    clock.advance_ms(120_000);
    assert_eq!(c.get_fleet("m").await.unwrap().running_vms, Some(2), "evicted capacity is still held back");
    assert_eq!(c.free_capacity("eastus", A100, Priority::Spot).unwrap(), 0);
    // Reclaim ends at +600 s after eviction; the refill follows one provisioning delay later.
    clock.advance_ms(480_000);
    assert_eq!(c.free_capacity("eastus", A100, Priority::Spot).unwrap(), 2);
    clock.advance_ms(60_000);
    let f = c.get_fleet("m").await.unwrap();
    assert_eq!((f.running_vms, f.provisioning_state), (Some(4), ProvisioningState::Succeeded));
    let n = c.counters();
    assert_eq!((n.evictions, n.vms_refilled), (2, 2));
}

#[tokio::test]
async fn outages_take_vms_and_block_creation_until_they_end() {
    let (c, clock) = cloud(SimCloudConfig::modest(["eastus", "westus3"]));
    let op = c.begin_create_fleet(&req("o", Priority::Regular, &[A100], 2, 2)).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded);
    c.set_outage("eastus", None, None, true).unwrap();
    assert_eq!(c.get_fleet("o").await.unwrap().running_vms, Some(0));
    assert_eq!(usage(&c.quota("eastus").await.unwrap(), &family()).0, 0, "lost VMs hold no quota");
    let op = c.begin_create_fleet(&req("during", Priority::Regular, &[A100], 1, 1)).await.unwrap();
    clock.advance_ms(60_000);
    assert!(matches!(poll(&c, &op).await, OperationStatus::Failed(CloudError::Capacity { .. })));
    let mut west = req("west", Priority::Regular, &[A100], 1, 1);
    west.region = "westus3".into();
    let op = c.begin_create_fleet(&west).await.unwrap();
    clock.advance_ms(60_000);
    assert_eq!(poll(&c, &op).await, OperationStatus::Succeeded, "other regions are unaffected");
    c.set_outage("eastus", None, None, false).unwrap();
    clock.advance_ms(60_000);
    assert_eq!(c.get_fleet("o").await.unwrap().running_vms, Some(2), "maintain refills after the outage");
    assert_eq!(c.counters().vms_lost_to_outages, 2);
}

#[tokio::test]
async fn shrinking_spot_capacity_evicts_but_regular_stays() {
    let (c, clock) = cloud(SimCloudConfig::modest(["eastus"]));
    c.begin_create_fleet(&req("spot", Priority::Spot, &[A100], 4, 1)).await.unwrap();
    c.begin_create_fleet(&req("reg", Priority::Regular, &[A100], 4, 1)).await.unwrap();
    clock.advance_ms(60_000);
    c.set_capacity("eastus", A100, Priority::Spot, 1).unwrap();
    c.set_capacity("eastus", A100, Priority::Regular, 1).unwrap();
    assert_eq!(c.get_fleet("spot").await.unwrap().running_vms, Some(1));
    assert_eq!(c.get_fleet("reg").await.unwrap().running_vms, Some(4));
    assert_eq!(c.free_capacity("eastus", A100, Priority::Regular).unwrap(), 0);
    c.set_capacity("eastus", A100, Priority::Spot, 8).unwrap();
    clock.advance_ms(60_000);
    assert_eq!(c.get_fleet("spot").await.unwrap().running_vms, Some(4), "capacity back: maintain refills");
}

/// Issue #22: offers show what Azure publishes (prices; for spot the eviction-rate band and a
/// placement score), never the free capacity, the exact rate or an outage as such. Also the guard
/// on the `bench-oracle` feature (a benchmark instrument that shows the hidden capacity): if
/// anything in the workspace turned it on, this test fails.
#[tokio::test]
async fn offers_carry_prices_and_published_spot_signals_but_hide_capacity_and_outages() {
    let mut cfg = SimCloudConfig::modest(["eastus"]);
    cfg.sizes = vec![A100.into(), A100X2.into()];
    cfg.capacity.push(OfferCapacity {
        region: "eastus".into(),
        size: A100.into(),
        priority: Some(Priority::Spot),
        vms: Some(3),
        eviction_rate_per_hour: Some(0.12),
    });
    let (c, _) = cloud(cfg);
    let offers = c.offers().await.unwrap();
    assert_eq!(offers.len(), 4, "2 sizes × 2 priorities in one region");
    let cat = Catalog::builtin();
    for o in &offers {
        assert_eq!(o.price_per_hour, cat.price(&o.size, "eastus").and_then(|p| p.for_priority(o.priority)));
        assert_eq!(o.capacity_vms, None, "free capacity is never published: {o:?}");
    }
    let spot = offers.iter().find(|o| o.size == A100 && o.priority == Priority::Spot).unwrap();
    assert_eq!(spot.eviction_band, Some(EvictionBand::From10To15), "0.12/h is published as the 10-15 % band");
    let score = spot.placement_score.expect("spot offers have a placement score");
    assert_eq!(
        spot.eviction_rate_per_hour,
        spot_eviction_prior(spot.eviction_band, Some(score), 0.0),
        "the solver's rate is the prior from the published signals, not the hidden 0.12"
    );
    let reg = offers.iter().find(|o| o.size == A100 && o.priority == Priority::Regular).unwrap();
    assert_eq!((reg.eviction_rate_per_hour, reg.eviction_band, reg.placement_score), (0.0, None, None));

    // An outage of regular capacity changes nothing the offers show: it is found by asking.
    let before: Vec<_> = offers.iter().filter(|o| o.priority == Priority::Regular).cloned().collect();
    c.set_outage("eastus", None, Some(Priority::Regular), true).unwrap();
    let during: Vec<_> = c.offers().await.unwrap().into_iter().filter(|o| o.priority == Priority::Regular).collect();
    assert_eq!(before, during, "a regular outage is invisible in the offers");
    // A spot offer with nothing free scores Low, whatever the noise: the score is the one hint.
    c.set_outage("eastus", None, Some(Priority::Spot), true).unwrap();
    for o in c.offers().await.unwrap().iter().filter(|o| o.priority == Priority::Spot) {
        assert_eq!(o.placement_score, Some(PlacementScore::Low), "{o:?}");
        assert_eq!(o.capacity_vms, None);
    }
}

#[test]
fn scenario_cloud_section_parses_and_validates() {
    let text = r#"
        [workload]            # belongs to the simulator, ignored here
        jobs = 3

        [cloud]
        regions = ["eastus", "westus3"]
        seed = 9
        provisioning_seconds = 30

        [cloud.default_quota]
        cores = 300
        lowPriorityCores = 100

        [[cloud.quota]]
        region = "eastus"
        families = { "Standard NCADSA100v4 Family" = 48 }

        [[cloud.capacity]]
        region = "westus3"
        size = "Standard_NC24ads_A100_v4"
        priority = "spot"
        vms = 2
        eviction_rate_per_hour = 0.3
    "#;
    let cfg = SimCloudConfig::from_scenario_str(text, "test").unwrap();
    cfg.validate(&Catalog::builtin()).unwrap();
    assert_eq!(cfg.quota_limit("eastus", &family()), 48, "family names match across spellings");
    assert_eq!(cfg.quota_limit("westus3", &family()), 96);
    assert_eq!(cfg.quota_limit("eastus", &QuotaPool::LowPriorityCores), 100);
    assert_eq!(cfg.capacity_vms("westus3", A100, Priority::Spot), 2);
    assert_eq!(cfg.capacity_vms("westus3", A100, Priority::Regular), 8);
    assert_eq!(cfg.eviction_rate("westus3", A100, Priority::Spot), 0.3);

    let bad_field = SimCloudConfig::from_scenario_str("[cloud]\nregions=[\"eastus\"]\nregion=1\n", "t").unwrap_err();
    assert!(bad_field.to_string().contains("region"), "{bad_field}");
    assert!(SimCloudConfig::from_scenario_str("[other]\n", "t").unwrap_err().to_string().contains("[cloud]"));

    let bad = SimCloudConfig::from_scenario_str(
        r#"
        [cloud]
        regions = ["eastus", "atlantis"]
        default_spot_eviction_rate_per_hour = -1.0
        [[cloud.capacity]]
        region = "westus3"
        size = "Standard_Nope"
        "#,
        "t",
    )
    .unwrap();
    let errs = bad.validate(&Catalog::builtin()).unwrap_err().to_string();
    for field in [
        "cloud.regions[1]",
        "cloud.default_spot_eviction_rate_per_hour",
        "cloud.capacity[0].region",
        "cloud.capacity[0].size",
    ] {
        assert!(errs.contains(field), "{field} missing from:\n{errs}");
    }
}

#[test]
fn bundled_scenario_is_valid() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/cloud-basic.toml");
    let cfg = SimCloudConfig::from_scenario_file(&path).unwrap();
    cfg.validate(&Catalog::builtin()).unwrap();
}
