//! Spend over time: what each tenant spends, in all and per region, recorded by the server so a
//! chart of it survives a page reload and a restart (`GET /v1/spend`).
//!
//! The control loop accrues cost on attempts (per region) and on tenants (in all); nothing keeps
//! how that grew. [`record_spend`] samples it every [`SAMPLE_EVERY_MS`] of loop time into the
//! `spend_samples` table: per tenant × region, USD spent so far and USD per hour being spent now.
//!
//! Per-region totals are kept by deltas, because retention deletes old attempts (their cost would
//! vanish from a sum over the attempts in the store): each sample adds, per attempt that could have
//! changed since the last one, its cost now minus its cost then. The attempts that could have
//! changed are the ones open at the last sample (their costs are in the cursor), the ones open now,
//! and every attempt of a job named by an event since the last sample (an attempt that started and
//! ended in between is found that way). The cursor is written with the sample, in one transaction,
//! so a restart continues exactly where the last sample left off.
//!
//! Where several servers share a store, only the leader records ([`record_once`]), through the
//! fenced handle the control loop writes with.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde::{Deserialize, Serialize};
use state::{Fence, IndexDef, Record, Store, StoreError, TableDef};
use tokio::sync::watch;

use super::ApiState;
use super::auth::Caller;
use super::error::{ApiError, ErrorBody, blocking};
use super::views::ClockView;
use crate::clock::Clock;
use crate::model::{Attempt, AttemptState, Job};
use crate::records::{AttemptsBy, Lookup, Tenant, attempt_key};

/// Loop time between two samples.
pub const SAMPLE_EVERY_MS: i64 = 5 * 60_000;
/// Loop time a sample is kept.
pub const KEEP_MS: i64 = 30 * 24 * 3_600_000;
/// Most samples one answer holds (older ones are thinned out evenly).
pub const MAX_POINTS: usize = 400;
/// Longest window an answer covers, hours.
const MAX_WINDOW_HOURS: f64 = 720.0;
/// Where the recorder's cursor is kept.
const CURSOR_SETTING: &str = "spend.cursor";
/// How often (real time) the recorder looks at the loop clock.
const TICK: Duration = Duration::from_secs(1);
/// Samples past their keep time deleted per tick, at most.
const TRIM_PER_TICK: usize = 64;
/// Events read per batch when looking for the jobs touched since the last sample.
const EVENT_BATCH: usize = 4096;

/// One tenant in one region: spent so far and spending now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpendPoint {
    /// The tenant.
    pub tenant: String,
    /// The region.
    pub region: String,
    /// USD spent so far by the tenant's attempts in the region (since the server began recording).
    pub spent_usd: f64,
    /// USD per hour the tenant's running VMs in the region cost at this moment.
    pub usd_per_hour: f64,
}

/// One sample of every tenant × region's spend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpendSample {
    /// Loop time of the sample, Unix milliseconds.
    pub at_ms: i64,
    /// The currency of every figure (always `USD`). Indexed, so the oldest samples can be read
    /// first and trimmed without scanning the table.
    pub unit: String,
    /// Per tenant × region.
    pub series: Vec<SpendPoint>,
}

impl Record for SpendSample {
    const TABLE: TableDef = TableDef { name: "spend_samples", indexes: &[IndexDef { name: "unit", pointer: "/unit" }] };
    fn key(&self) -> String {
        // Zero-padded, so keys sort by time and `Store::last` reads the newest.
        format!("{:020}", self.at_ms.max(0))
    }
}

/// Where the recorder left off: the last sample's time and totals, the event sequence it has
/// read up to, and the cost of each attempt that was open then.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Cursor {
    at_ms: i64,
    event_seq: u64,
    totals: Vec<SpendPoint>,
    open: BTreeMap<String, f64>,
}

type Series = BTreeMap<(String, String), (f64, f64)>;

/// The tenant of each job looked up, read once per sample.
struct Tenants<'a> {
    store: &'a Store,
    by_job: HashMap<String, Option<String>>,
}

impl Tenants<'_> {
    fn of(&mut self, job_id: &str) -> Result<Option<String>, StoreError> {
        if let Some(t) = self.by_job.get(job_id) {
            return Ok(t.clone());
        }
        let t = self.store.get::<Job>(job_id)?.map(|j| j.spec.tenant.clone());
        self.by_job.insert(job_id.to_string(), t.clone());
        Ok(t)
    }
}

fn open_attempts(store: &Store) -> Result<Vec<Attempt>, StoreError> {
    let mut v = store.find(AttemptsBy::State(AttemptState::Provisioning))?;
    v.extend(store.find(AttemptsBy::State(AttemptState::Running))?);
    Ok(v)
}

/// USD per hour an attempt costs now: its running VMs at its price (what the loop accrues).
fn rate(a: &Attempt) -> f64 {
    if a.state == AttemptState::Running { a.running_usd_per_hour() } else { 0.0 }
}

/// USD per hour per tenant × region, from the attempts open now.
fn current_rates(store: &Store, tenants: &mut Tenants<'_>) -> Result<Series, StoreError> {
    let mut out = Series::new();
    for a in open_attempts(store)? {
        let r = rate(&a);
        if r <= 0.0 {
            continue;
        }
        if let Some(t) = tenants.of(&a.job_id)? {
            out.entry((t, a.region.clone())).or_default().1 += r;
        }
    }
    Ok(out)
}

/// Takes one sample at `now_ms` (if the last one is at least [`SAMPLE_EVERY_MS`] old) and trims
/// samples past [`KEEP_MS`]. Returns whether a sample was written.
pub fn sample(store: &Store, now_ms: i64) -> Result<bool, StoreError> {
    let cursor: Option<Cursor> = store.setting(CURSOR_SETTING)?;
    if cursor.as_ref().is_some_and(|c| now_ms - c.at_ms < SAMPLE_EVERY_MS) {
        return Ok(false);
    }
    let mut tenants = Tenants { store, by_job: HashMap::new() };
    let mut totals: BTreeMap<(String, String), f64> = BTreeMap::new();
    let mut open: BTreeMap<String, f64> = BTreeMap::new();
    let event_seq = store.last_seq();
    match cursor {
        None => {
            // First sample of this store: what the attempts still in the store have cost.
            for a in store.scan::<Attempt>()? {
                if let Some(t) = tenants.of(&a.job_id)? {
                    *totals.entry((t, a.region.clone())).or_default() += a.cost_usd;
                }
                if a.is_active() {
                    open.insert(attempt_key(&a.job_id, a.number), a.cost_usd);
                }
            }
        }
        Some(c) => {
            for p in &c.totals {
                totals.insert((p.tenant.clone(), p.region.clone()), p.spent_usd);
            }
            let mut touched: BTreeMap<String, Attempt> = BTreeMap::new();
            for a in open_attempts(store)? {
                touched.insert(attempt_key(&a.job_id, a.number), a);
            }
            for key in c.open.keys() {
                if !touched.contains_key(key)
                    && let Some(a) = store.get::<Attempt>(key)?
                {
                    touched.insert(key.clone(), a);
                }
            }
            let mut jobs: BTreeSet<String> = BTreeSet::new();
            let mut from = c.event_seq + 1;
            while from <= event_seq {
                let batch = store.events_from(from, EVENT_BATCH)?;
                let Some(last) = batch.last() else { break };
                from = last.seq + 1;
                jobs.extend(batch.into_iter().filter_map(|e| e.job_id));
            }
            for job in jobs {
                for a in store.find(AttemptsBy::Job(&job))? {
                    touched.entry(attempt_key(&a.job_id, a.number)).or_insert(a);
                }
            }
            for (key, a) in touched {
                let before = match c.open.get(&key) {
                    Some(&cost) => cost,
                    // Not open at the last sample: new since (counts from 0), or already final then
                    // (fully counted, nothing changed).
                    None if a.started_at_ms >= c.at_ms => 0.0,
                    None => continue,
                };
                let delta = a.cost_usd - before;
                if delta != 0.0
                    && let Some(t) = tenants.of(&a.job_id)?
                {
                    *totals.entry((t, a.region.clone())).or_default() += delta;
                }
                if a.is_active() {
                    open.insert(key, a.cost_usd);
                }
            }
        }
    }
    let rates = current_rates(store, &mut tenants)?;
    let mut series: Series = totals.into_iter().map(|(k, spent)| (k, (spent, 0.0))).collect();
    for (k, (_, r)) in rates {
        series.entry(k).or_default().1 = r;
    }
    let points: Vec<SpendPoint> = series
        .into_iter()
        .map(|((tenant, region), (spent_usd, usd_per_hour))| SpendPoint { tenant, region, spent_usd, usd_per_hour })
        .collect();
    let sample = SpendSample { at_ms: now_ms, unit: "USD".into(), series: points.clone() };
    let cursor = Cursor { at_ms: now_ms, event_seq, totals: points, open };
    store.transaction(|tx| {
        tx.put(&sample)?;
        tx.set_setting(CURSOR_SETTING, &cursor)?;
        Ok(())
    })?;
    let horizon = now_ms - KEEP_MS;
    for old in store.first_by_index::<SpendSample>("unit", "USD", TRIM_PER_TICK)? {
        if old.at_ms >= horizon {
            break;
        }
        store.delete::<SpendSample>(&old.key())?;
    }
    Ok(true)
}

/// One tick of the recorder on a server whose leadership `fence` follows: samples (see [`sample`])
/// through the fenced handle while this server leads, and does nothing otherwise. Several servers
/// sharing a store each run a recorder; only the leader's writes, so samples are neither doubled nor
/// interleaved with two cursors, and a former leader that has not noticed yet is refused by the
/// store (the fence is checked in the same transaction as the sample). Returns whether a sample was
/// written.
pub fn record_once(store: &Store, fence: &Fence, now_ms: i64) -> Result<bool, StoreError> {
    if fence.epoch().is_none() {
        return Ok(false);
    }
    sample(&store.fenced(fence), now_ms)
}

/// Samples spend every [`SAMPLE_EVERY_MS`] of loop time, while this server holds the leader lease
/// that `fence` follows ([`record_once`]), until `stop` turns true. `spillway serve` runs it beside
/// the control loop; the first sample is taken as soon as the server leads.
pub async fn record_spend(store: Store, fence: Fence, clock: Arc<dyn Clock>, mut stop: watch::Receiver<bool>) {
    loop {
        let (s, f, now) = (store.clone(), fence.clone(), clock.now_ms());
        match tokio::task::spawn_blocking(move || record_once(&s, &f, now)).await {
            Ok(Ok(_)) => {}
            // Leadership lost between the check and the write: the next tick sees it.
            Ok(Err(StoreError::Fenced(_))) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot record spend; retrying"),
            Err(e) => tracing::warn!(error = %e, "spend recorder failed; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// Query of `GET /v1/spend`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpendQuery {
    /// Hours of history to return, counted back from now (default 24, at most 720).
    #[param(exclusive_minimum = 0, maximum = 720)]
    hours: Option<f64>,
    /// Only this tenant (a tenant-bound token always sees only its own).
    tenant: Option<String>,
}

/// A tenant's spend, budget and what is left of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantSpend {
    /// The tenant.
    pub tenant: String,
    /// USD spent by the tenant's jobs in all (kept when finished jobs are forgotten).
    pub spent_usd: f64,
    /// The tenant's budget, USD; absent when unlimited.
    pub budget_usd: Option<f64>,
    /// Budget minus spent (negative once over); absent when unlimited.
    pub left_usd: Option<f64>,
    /// USD per hour the tenant's running VMs cost now.
    pub usd_per_hour: f64,
}

/// The answer of `GET /v1/spend`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpendView {
    /// The server's clock now, Unix milliseconds: every time in this answer is on it.
    pub now_ms: i64,
    /// The server's clock (`wall` or `simulated`, with its speed-up).
    pub clock: ClockView,
    /// Loop time between two samples, milliseconds.
    pub sample_every_ms: i64,
    /// The history's window, hours.
    pub window_hours: f64,
    /// Per tenant: spent, budget, left, spending now.
    pub tenants: Vec<TenantSpend>,
    /// Per tenant × region: spent as of the newest sample, spending now.
    pub regions: Vec<SpendPoint>,
    /// Samples in the window, oldest first (at most 400: thinned out evenly when there are more).
    pub history: Vec<SpendSample>,
}

fn thin(mut samples: Vec<SpendSample>, max: usize) -> Vec<SpendSample> {
    if samples.len() <= max || max < 2 {
        return samples;
    }
    let n = samples.len();
    let keep: BTreeSet<usize> = (0..max).map(|i| i * (n - 1) / (max - 1)).collect();
    let mut i = 0;
    samples.retain(|_| {
        let k = keep.contains(&i);
        i += 1;
        k
    });
    samples
}

/// Builds the view for `tenant` (all tenants when `None`) at the clock's time.
pub fn spend_view(store: &Store, clock: ClockView, hours: f64, tenant: Option<&str>) -> Result<SpendView, StoreError> {
    let now_ms = clock.now_ms;
    let wanted = |t: &str| tenant.is_none_or(|w| w == t);
    let window_ms = (hours * 3_600_000.0) as i64;
    let n = (window_ms / SAMPLE_EVERY_MS) as usize + 2;
    let mut history: Vec<SpendSample> = store
        .last::<SpendSample>(n.min((KEEP_MS / SAMPLE_EVERY_MS) as usize + 2))?
        .into_iter()
        .filter(|s| s.at_ms >= now_ms - window_ms)
        .collect();
    for s in &mut history {
        s.series.retain(|p| wanted(&p.tenant));
    }
    let mut tenants_read = Tenants { store, by_job: HashMap::new() };
    let rates = current_rates(store, &mut tenants_read)?;
    let mut regions: Series = BTreeMap::new();
    if let Some(latest) = history.last() {
        for p in &latest.series {
            regions.insert((p.tenant.clone(), p.region.clone()), (p.spent_usd, 0.0));
        }
    }
    for ((t, r), (_, rate)) in &rates {
        if wanted(t) {
            regions.entry((t.clone(), r.clone())).or_default().1 = *rate;
        }
    }
    let mut by_tenant: BTreeMap<String, TenantSpend> = BTreeMap::new();
    for t in store.scan::<Tenant>()? {
        if wanted(&t.name) {
            let left_usd = t.budget_usd.map(|b| b - t.spent_usd);
            by_tenant.insert(
                t.name.clone(),
                TenantSpend {
                    tenant: t.name,
                    spent_usd: t.spent_usd,
                    budget_usd: t.budget_usd,
                    left_usd,
                    usd_per_hour: 0.0,
                },
            );
        }
    }
    for ((t, _), (_, rate)) in &regions {
        by_tenant
            .entry(t.clone())
            .or_insert_with(|| TenantSpend {
                tenant: t.clone(),
                spent_usd: 0.0,
                budget_usd: None,
                left_usd: None,
                usd_per_hour: 0.0,
            })
            .usd_per_hour += rate;
    }
    Ok(SpendView {
        now_ms,
        clock,
        sample_every_ms: SAMPLE_EVERY_MS,
        window_hours: hours,
        tenants: by_tenant.into_values().collect(),
        regions: regions
            .into_iter()
            .map(|((tenant, region), (spent_usd, usd_per_hour))| SpendPoint { tenant, region, spent_usd, usd_per_hour })
            .collect(),
        history: thin(history, MAX_POINTS),
    })
}

/// Spend per tenant (spent, budget, left, USD per hour now), per tenant × region, and its history
/// as sampled by the server every 5 minutes of loop time. A tenant-bound token sees its tenant only.
#[utoipa::path(
    get, path = "/v1/spend", tag = "cluster", params(SpendQuery),
    responses((status = 200, body = SpendView), (status = 400, body = ErrorBody), (status = 503, body = ErrorBody))
)]
pub(crate) async fn spend(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    q: Result<Query<SpendQuery>, QueryRejection>,
) -> Result<Json<SpendView>, ApiError> {
    let q = q.map(|Query(v)| v).map_err(|e| ApiError::bad_field("query", e.body_text()))?;
    let hours = q.hours.unwrap_or(24.0);
    if !hours.is_finite() || hours <= 0.0 || hours > MAX_WINDOW_HOURS {
        return Err(ApiError::bad_field("hours", format!("must be a number of hours in (0, {MAX_WINDOW_HOURS}]")));
    }
    let clock = state.clock_view();
    let now = clock.now_ms;
    let tenant = match (caller.tenant.clone(), q.tenant.filter(|t| !t.is_empty())) {
        // Another tenant's spend: nothing, as `GET /v1/jobs?tenant=` answers.
        (Some(own), Some(asked)) if own != asked => {
            return Ok(Json(SpendView {
                now_ms: now,
                clock,
                sample_every_ms: SAMPLE_EVERY_MS,
                window_hours: hours,
                tenants: Vec::new(),
                regions: Vec::new(),
                history: Vec::new(),
            }));
        }
        (Some(own), _) => Some(own),
        (None, asked) => asked,
    };
    let store = state.jobs().store().clone();
    let view = blocking(move || spend_view(&store, clock, hours, tenant.as_deref()).map_err(ApiError::from)).await?;
    Ok(Json(view))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{JobSpec, Priority};

    fn job(store: &Store, id: &str, tenant: &str) {
        let spec: JobSpec =
            serde_json::from_value(serde_json::json!({"name": id, "tenant": tenant, "kind": "batch", "gpus": 1}))
                .unwrap();
        store.put(&Job::new(id.into(), spec, 0)).unwrap();
    }

    fn attempt(job_id: &str, number: u32, region: &str, state: AttemptState, cost: f64, started: i64) -> Attempt {
        Attempt {
            job_id: job_id.into(),
            number,
            fleet_name: format!("spw-{job_id}-a{number}"),
            region: region.into(),
            size: "Standard_NC4as_T4_v3".into(),
            alternatives: vec![],
            priority: Priority::Regular,
            vms: 2,
            min_vms: None,
            growing_to: None,
            gpus: 2,
            vcpus: 8,
            family: "standardNCASv3_T4Family".into(),
            price_per_hour: 0.5,
            max_price_per_vm: None,
            state,
            started_at_ms: started,
            running_since_ms: Some(started),
            ended_at_ms: None,
            operation: None,
            running_vms: 2,
            below_min_since_ms: None,
            cost_usd: cost,
            egress_usd: 0.0,
            egress_gb: 0.0,
            accounted_until_ms: None,
            failure: None,
            failure_class: None,
            regular: None,
        }
    }

    fn event(store: &Store, job_id: &str, at: i64) {
        store
            .transaction(|tx| {
                tx.append_event(state::EventDraft {
                    at_ms: at,
                    kind: "placed".into(),
                    job_id: Some(job_id.into()),
                    tenant: None,
                    message: String::new(),
                    data: serde_json::Value::Null,
                })?;
                Ok(())
            })
            .unwrap();
    }

    fn at(now_ms: i64) -> ClockView {
        ClockView { kind: super::super::views::ClockKindView::Simulated, speedup: None, now_ms }
    }

    fn spent(view: &SpendView, tenant: &str, region: &str) -> f64 {
        view.regions.iter().find(|p| p.tenant == tenant && p.region == region).map(|p| p.spent_usd).unwrap_or(0.0)
    }

    #[test]
    fn totals_survive_forgotten_attempts_and_count_short_lived_ones() {
        let store = Store::in_memory().unwrap();
        job(&store, "a", "ml");
        job(&store, "b", "search");
        store.put(&attempt("a", 1, "eastus", AttemptState::Running, 1.0, 0)).unwrap();
        assert!(sample(&store, 0).unwrap());
        assert!(!sample(&store, SAMPLE_EVERY_MS - 1).unwrap(), "too soon");

        // a's attempt accrues; b gets an attempt that runs and ends between two samples.
        let t1 = SAMPLE_EVERY_MS;
        store.put(&attempt("a", 1, "eastus", AttemptState::Running, 3.0, 0)).unwrap();
        store.put(&attempt("b", 1, "westus3", AttemptState::Ended, 2.5, t1 - 1000)).unwrap();
        event(&store, "b", t1 - 1000);
        assert!(sample(&store, t1).unwrap());
        let v = spend_view(&store, at(t1), 24.0, None).unwrap();
        assert_eq!(spent(&v, "ml", "eastus"), 3.0);
        assert_eq!(spent(&v, "search", "westus3"), 2.5);
        assert_eq!(v.regions.iter().find(|p| p.tenant == "ml").unwrap().usd_per_hour, 1.0, "2 VMs at 0.5");

        // a's attempt ends (cost settled) and is then forgotten by retention: the total stays.
        let t2 = 2 * SAMPLE_EVERY_MS;
        store.put(&attempt("a", 1, "eastus", AttemptState::Ended, 4.0, 0)).unwrap();
        assert!(sample(&store, t2).unwrap());
        store.delete::<Attempt>(&attempt_key("a", 1)).unwrap();
        assert!(sample(&store, 3 * SAMPLE_EVERY_MS).unwrap());
        let v = spend_view(&store, at(3 * SAMPLE_EVERY_MS), 24.0, None).unwrap();
        assert_eq!(spent(&v, "ml", "eastus"), 4.0);
        assert_eq!(spent(&v, "search", "westus3"), 2.5, "an ended attempt is not counted twice");
        assert_eq!(v.history.len(), 4);
        assert!(v.regions.iter().all(|p| p.usd_per_hour == 0.0), "nothing runs now");

        // A tenant's view holds only its own series.
        let mine = spend_view(&store, at(3 * SAMPLE_EVERY_MS), 24.0, Some("ml")).unwrap();
        assert!(mine.regions.iter().all(|p| p.tenant == "ml"));
        assert!(mine.history.iter().flat_map(|s| &s.series).all(|p| p.tenant == "ml"));
    }

    #[test]
    fn old_samples_are_trimmed_and_answers_are_thinned() {
        let store = Store::in_memory().unwrap();
        for i in 0..10 {
            sample(&store, i * SAMPLE_EVERY_MS).unwrap();
        }
        sample(&store, KEEP_MS + 5 * SAMPLE_EVERY_MS).unwrap();
        let left = store.scan::<SpendSample>().unwrap();
        assert_eq!(left.first().unwrap().at_ms, 5 * SAMPLE_EVERY_MS, "samples older than KEEP_MS are gone");
        let many: Vec<SpendSample> =
            (0..1000).map(|i| SpendSample { at_ms: i, unit: "USD".into(), series: vec![] }).collect();
        let thinned = thin(many, MAX_POINTS);
        assert_eq!(thinned.len(), MAX_POINTS);
        assert_eq!(thinned.first().unwrap().at_ms, 0);
        assert_eq!(thinned.last().unwrap().at_ms, 999, "the newest sample is always kept");
    }

    #[test]
    fn only_the_leader_records_spend() {
        let store = Store::in_memory().unwrap();
        job(&store, "a", "ml");
        store.put(&attempt("a", 1, "eastus", AttemptState::Running, 1.0, 0)).unwrap();
        let (leader, follower) = (Fence::new(), Fence::new());
        let grant = store.acquire_lease("server-1", Duration::from_secs(10)).unwrap().unwrap();
        assert!(store.acquire_lease("server-2", Duration::from_secs(10)).unwrap().is_none(), "one leader");
        leader.hold(&grant);

        assert!(!record_once(&store, &follower, 0).unwrap(), "a follower records nothing");
        assert!(store.scan::<SpendSample>().unwrap().is_empty());
        assert!(store.setting::<Cursor>(CURSOR_SETTING).unwrap().is_none(), "nor moves the cursor");
        assert!(record_once(&store, &leader, 0).unwrap());
        assert_eq!(store.scan::<SpendSample>().unwrap().len(), 1);

        // Leadership lost (the election clears the fence): the former leader records no more.
        leader.clear();
        assert!(!record_once(&store, &leader, SAMPLE_EVERY_MS).unwrap());
        assert_eq!(store.scan::<SpendSample>().unwrap().len(), 1);
        // A write through the fenced handle after the lease is gone is refused by the store.
        assert!(matches!(sample(&store.fenced(&leader), SAMPLE_EVERY_MS), Err(StoreError::Fenced(_))));
        assert_eq!(store.scan::<SpendSample>().unwrap().len(), 1);
    }
}
