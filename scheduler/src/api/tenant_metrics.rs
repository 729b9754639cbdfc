//! Per-tenant metrics, read from the store at each scrape: what each tenant has spent, is spending
//! now, holds in GPUs, and has open. They carry a `tenant` label, so a tenant-bound token's scrape
//! ([`super::exposition`]) shows its own and nobody else's.
//!
//! Read at scrape time rather than kept by the control loop: the store already holds the truth
//! (tenants' spend survives restarts and retention there), and a scrape reads a few records: the
//! tenants, the open jobs and the active attempts.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use state::Store;

use crate::model::{AttemptState, JobState};
use crate::records::{AttemptsBy, JobsBy, Lookup, Tenant};

/// Label: a tenant.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantLabel {
    tenant: String,
}

/// Labels: a tenant and a job state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TenantStateLabel {
    tenant: String,
    state: String,
}

/// The collector registered in the API's registry.
pub struct TenantMetrics {
    store: Store,
}

impl std::fmt::Debug for TenantMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TenantMetrics")
    }
}

impl TenantMetrics {
    /// Metrics over `store`.
    pub fn new(store: Store) -> TenantMetrics {
        TenantMetrics { store }
    }
}

/// What a scrape reads.
#[derive(Default)]
struct Snapshot {
    spent: BTreeMap<String, f64>,
    rate: BTreeMap<String, f64>,
    gpus: BTreeMap<String, i64>,
    jobs: BTreeMap<(String, &'static str), i64>,
}

impl TenantMetrics {
    fn snapshot(&self) -> Result<Snapshot, state::StoreError> {
        let mut s = Snapshot::default();
        for t in self.store.scan::<Tenant>()? {
            s.spent.insert(t.name, t.spent_usd.max(0.0));
        }
        let mut tenant_of = BTreeMap::new();
        for state in [JobState::Pending, JobState::Provisioning, JobState::Running, JobState::Migrating] {
            for j in self.store.find(JobsBy::State(state))? {
                *s.jobs.entry((j.spec.tenant.clone(), state.as_str())).or_default() += 1;
                tenant_of.insert(j.id.clone(), j.spec.tenant.clone());
            }
        }
        for a in self.store.find(AttemptsBy::State(AttemptState::Running))? {
            let Some(t) = tenant_of.get(&a.job_id) else { continue };
            *s.rate.entry(t.clone()).or_default() += a.running_usd_per_hour();
            let gpus =
                if a.vms == 0 { 0 } else { u64::from(a.gpus) * u64::from(a.running_vms.min(a.vms)) / u64::from(a.vms) };
            *s.gpus.entry(t.clone()).or_default() += gpus as i64;
        }
        Ok(s)
    }
}

impl Collector for TenantMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = match self.snapshot() {
            Ok(s) => s,
            Err(e) => {
                // A scrape without these series beats a failed scrape; the next one will have them.
                tracing::warn!(error = %e, "cannot read per-tenant metrics from the store");
                return Ok(());
            }
        };
        let spent: Family<TenantLabel, Counter<f64, AtomicU64>> = Family::default();
        for (t, v) in &s.spent {
            spent.get_or_create(&TenantLabel { tenant: t.clone() }).inc_by(*v);
        }
        let rate: Family<TenantLabel, Gauge<f64, AtomicU64>> = Family::default();
        let gpus: Family<TenantLabel, Gauge> = Family::default();
        for t in s.spent.keys().chain(s.rate.keys()) {
            let l = TenantLabel { tenant: t.clone() };
            rate.get_or_create(&l).set(s.rate.get(t).copied().unwrap_or(0.0));
            gpus.get_or_create(&l).set(s.gpus.get(t).copied().unwrap_or(0));
        }
        let jobs: Family<TenantStateLabel, Gauge> = Family::default();
        for ((t, st), n) in &s.jobs {
            jobs.get_or_create(&TenantStateLabel { tenant: t.clone(), state: (*st).to_string() }).set(*n);
        }
        let m = encoder.encode_descriptor(
            "spillway_tenant_spent_usd",
            "USD a tenant's jobs have cost, over the store's life",
            None,
            spent.metric_type(),
        )?;
        spent.encode(m)?;
        let m = encoder.encode_descriptor(
            "spillway_tenant_cost_rate_usd_per_hour",
            "USD per hour a tenant's running VMs cost now",
            None,
            rate.metric_type(),
        )?;
        rate.encode(m)?;
        let m = encoder.encode_descriptor(
            "spillway_tenant_gpus_in_use",
            "GPUs on a tenant's running VMs now",
            None,
            gpus.metric_type(),
        )?;
        gpus.encode(m)?;
        let m = encoder.encode_descriptor(
            "spillway_tenant_jobs",
            "A tenant's open jobs by state",
            None,
            jobs.metric_type(),
        )?;
        jobs.encode(m)?;
        Ok(())
    }
}
