//! Watching quota: which pools keep waiting work out, since when, and the `quota_exhausted` /
//! `quota_recovered` events an alert is built on.
//!
//! After each fresh plan the round asks the solver which quota rows keep a waiting job off an
//! offer that nothing else rules out ([`solver::advise::blocking_pools`], the test the quota
//! advice starts from). A pool that does so without a break for
//! [`ControlConfig::quota_exhausted_after_ms`](super::ControlConfig::quota_exhausted_after_ms) is
//! an *episode*: one `quota_exhausted` event when it passes the threshold (not one per round), one
//! `quota_recovered` when no waiting work is held back by it any more. Both are cluster events
//! (no job, no tenant) in the global log: an unbound token's `GET /v1/events?kinds=quota_exhausted`
//! sees them. Blips shorter than the threshold (a pool full for a round while a fleet finishes)
//! raise nothing.

use std::collections::BTreeMap;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use serde::{Deserialize, Serialize};
use state::{Record, StoreError, TableDef};

use super::metrics::PoolLabel;
use super::snapshot::Snapshot;
use super::world::our_usage;
use super::{Controller, LoopState};
use crate::model::{EventKind, QuotaPool};

/// A pool that keeps waiting work out in the last plan: (region, pool as the cloud spells it) →
/// the solver ids of the demands it keeps out.
pub(crate) type Blocking = BTreeMap<(String, String), Vec<String>>;

/// The pools of `problem` that keep waiting work out of `plan`, the pools behind learnt quota
/// blocks included: `quota_blocked` are the offers the loop keeps from the solver only because a
/// quota refusal blocked them, with the pool each refusal named
/// ([`Feasibility::quota_blocked_offers`](super::feasibility::Feasibility::quota_blocked_offers)).
/// Such a pool keeps the work out as long as the block lasts, so its episode must run meanwhile
/// (it is what an increase would unblock); it is tested like any other pool, on the offers put
/// back and the pool taken as full, as the refusal said it was.
pub(crate) fn blocking(
    problem: &solver::Problem,
    plan: &solver::Plan,
    quota_blocked: &[(solver::Offer, (String, QuotaPool))],
) -> Blocking {
    let widened;
    let problem = if quota_blocked.is_empty() {
        problem
    } else {
        let mut p = problem.clone();
        for (offer, (region, pool)) in quota_blocked {
            p.offers.push(offer.clone());
            let key = pool.key();
            match p.quotas.iter_mut().find(|q| q.region == *region && QuotaPool::parse(&q.pool).key() == key) {
                Some(q) => q.vcpus = 0,
                None => p.quotas.push(solver::QuotaLimit {
                    region: region.clone(),
                    pool: pool.name().to_string(),
                    vcpus: 0,
                }),
            }
        }
        widened = p;
        &widened
    };
    let mut out = Blocking::new();
    for (q, jobs) in solver::advise::blocking_pools(problem, plan) {
        let row = &problem.quotas[q];
        out.insert((row.region.clone(), row.pool.clone()), jobs);
    }
    out
}

/// The quota gauges' values as last published, by (region, pool): limit, used, free, blocked
/// jobs, exhausted. A round sets only the gauges whose value changed; the what-if runs thousands
/// of rounds over dozens of pools, and re-creating five label sets per pool each round cost more
/// than the rest of the quota watch.
pub(crate) type QuotaGauges = BTreeMap<(String, String), [i64; 5]>;

/// One pool's run of rounds holding work back.
#[derive(Debug, Clone, PartialEq)]
struct Episode {
    since_ms: i64,
    /// Whether `quota_exhausted` was recorded for it.
    reported: bool,
}

/// An episode in progress as the store keeps it: the loop that leads next continues it (the same
/// start, reported or not) instead of starting it again, which would report the pool a second
/// time and date its `quota_recovered` from the change of leader. Written by the leader only, like
/// everything the loop writes (its store handle is fenced).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct QuotaEpisode {
    /// Region.
    pub region: String,
    /// The pool as the cloud spells it.
    pub pool: String,
    /// When the pool started holding work back, Unix milliseconds.
    pub since_ms: i64,
    /// Whether `quota_exhausted` was recorded for it.
    pub reported: bool,
}

impl Record for QuotaEpisode {
    const TABLE: TableDef = TableDef { name: "quota_episodes", indexes: &[] };
    fn key(&self) -> String {
        episode_key(&self.region, &self.pool)
    }
}

fn episode_key(region: &str, pool: &str) -> String {
    format!("{region}/{pool}")
}

/// The episodes in progress, by (region, pool).
#[derive(Debug, Default)]
pub(crate) struct QuotaWatch {
    episodes: BTreeMap<(String, String), Episode>,
    /// Whether the episodes were read from the store in this term (a new leader reads them once).
    loaded: bool,
}

/// What a round changes in the stored episodes.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct EpisodeWrites {
    /// Episodes started or reported.
    pub put: Vec<QuotaEpisode>,
    /// Keys of the episodes that ended.
    pub deleted: Vec<String>,
}

/// What a round records about quota.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct QuotaNotice {
    /// `quota_exhausted` or `quota_recovered`.
    #[serde(skip)]
    pub exhausted: bool,
    /// Region.
    pub region: String,
    /// The pool as the cloud spells it.
    pub pool: String,
    /// When the pool started holding work back, Unix milliseconds.
    pub since_ms: i64,
    /// The demands it holds back now (empty when it recovered).
    pub jobs: Vec<String>,
    /// Its limit and free vCPUs at the last read, when known.
    pub limit_vcpus: Option<u64>,
    /// Free vCPUs.
    pub free_vcpus: Option<u64>,
}

impl QuotaNotice {
    /// The event's message, for people.
    pub fn message(&self, now_ms: i64) -> String {
        let minutes = (now_ms - self.since_ms).max(0) / 60_000;
        if !self.exhausted {
            return format!(
                "{} quota in {} no longer holds waiting work back (it did for {minutes} min)",
                self.pool, self.region
            );
        }
        let n = self.jobs.len();
        let shown: Vec<&str> = self.jobs.iter().take(5).map(String::as_str).collect();
        let more = if n > shown.len() { format!(" and {} more", n - shown.len()) } else { String::new() };
        let limits = match (self.limit_vcpus, self.free_vcpus) {
            (Some(l), Some(f)) => format!(" (limit {l} vCPUs, {f} free)"),
            _ => String::new(),
        };
        format!(
            "{} quota in {}{limits} has kept {n} waiting job{} out for {minutes} min: {}{more}; \
             `spillway advise` says what increase would place them",
            self.pool,
            self.region,
            if n == 1 { "" } else { "s" },
            shown.join(", ")
        )
    }
}

impl QuotaWatch {
    /// Takes the pools holding work back at `now_ms` and returns what to record: a
    /// `quota_exhausted` for each pool that has held work back for `after_ms` and was not reported
    /// yet in this episode, a `quota_recovered` for each reported pool that holds nothing back any
    /// more. A pool that stops holding work back ends its episode (reported or not).
    pub fn observe(&mut self, now_ms: i64, blocking: &Blocking, after_ms: i64) -> Vec<QuotaNotice> {
        let mut out = Vec::new();
        let ended: Vec<(String, String)> =
            self.episodes.keys().filter(|k| !blocking.contains_key(*k)).cloned().collect();
        for key in ended {
            if let Some(e) = self.episodes.remove(&key)
                && e.reported
            {
                out.push(QuotaNotice {
                    exhausted: false,
                    region: key.0,
                    pool: key.1,
                    since_ms: e.since_ms,
                    jobs: Vec::new(),
                    limit_vcpus: None,
                    free_vcpus: None,
                });
            }
        }
        for (key, jobs) in blocking {
            let e = self.episodes.entry(key.clone()).or_insert(Episode { since_ms: now_ms, reported: false });
            if !e.reported && now_ms - e.since_ms >= after_ms {
                e.reported = true;
                out.push(QuotaNotice {
                    exhausted: true,
                    region: key.0.clone(),
                    pool: key.1.clone(),
                    since_ms: e.since_ms,
                    jobs: jobs.clone(),
                    limit_vcpus: None,
                    free_vcpus: None,
                });
            }
        }
        out
    }

    /// Continues the episodes stored by earlier leaders, once per term.
    pub fn load(&mut self, store: &state::Store) -> Result<(), StoreError> {
        if !self.loaded {
            let stored = store.scan::<QuotaEpisode>()?;
            self.episodes = stored
                .into_iter()
                .map(|e| ((e.region, e.pool), Episode { since_ms: e.since_ms, reported: e.reported }))
                .collect();
            self.loaded = true;
        }
        Ok(())
    }

    /// [`QuotaWatch::observe`], and what to write so that the store holds the episodes as they are
    /// after it.
    pub fn observe_stored(
        &mut self,
        now_ms: i64,
        blocking: &Blocking,
        after_ms: i64,
    ) -> (Vec<QuotaNotice>, EpisodeWrites) {
        let before = self.episodes.clone();
        let notices = self.observe(now_ms, blocking, after_ms);
        let mut writes = EpisodeWrites::default();
        for (key, e) in &self.episodes {
            if before.get(key) != Some(e) {
                writes.put.push(QuotaEpisode {
                    region: key.0.clone(),
                    pool: key.1.clone(),
                    since_ms: e.since_ms,
                    reported: e.reported,
                });
            }
        }
        for key in before.keys().filter(|k| !self.episodes.contains_key(*k)) {
            writes.deleted.push(episode_key(&key.0, &key.1));
        }
        (notices, writes)
    }

    /// Whether the pool's episode has passed the threshold (it was reported).
    pub fn exhausted(&self, region: &str, pool: &str) -> bool {
        self.episodes.get(&(region.to_string(), pool.to_string())).is_some_and(|e| e.reported)
    }
}

impl Controller {
    /// Records the quota episodes that passed the threshold or ended this round (after the last
    /// plan), and sets the quota gauges: limit, used and free per pool, the waiting jobs each keeps
    /// out, and whether it is exhausted.
    /// The five per-pool quota gauges, in the order [`QuotaGauges`] keeps their values.
    fn quota_families(&self) -> [&Family<PoolLabel, Gauge>; 5] {
        let m = &self.metrics;
        [&m.quota_limit, &m.quota_used, &m.quota_free, &m.quota_blocked_jobs, &m.quota_exhausted]
    }

    pub(super) fn watch_quota(&self, st: &mut LoopState, snap: &Snapshot) -> Result<(), StoreError> {
        let now = snap.now;
        let pools = st.world.pools(&our_usage(snap.active()));
        if let Some(after) = self.config.quota_exhausted_after_ms {
            st.quota_watch.load(&self.store)?;
            let (notices, writes) = st.quota_watch.observe_stored(now, &st.quota_blocking, after);
            let mut events = Vec::new();
            for mut n in notices {
                if let Some(p) = pools.iter().find(|p| p.region == n.region && p.pool == n.pool) {
                    (n.limit_vcpus, n.free_vcpus) = (Some(p.limit), Some(p.free));
                }
                let kind = if n.exhausted { EventKind::QuotaExhausted } else { EventKind::QuotaRecovered };
                let message = n.message(now);
                if n.exhausted {
                    tracing::warn!(region = %n.region, pool = %n.pool, "{message}");
                } else {
                    tracing::info!(region = %n.region, pool = %n.pool, "{message}");
                }
                let data = serde_json::to_value(&n).unwrap_or_default();
                events.push(state::EventDraft {
                    at_ms: now,
                    kind: kind.as_str().into(),
                    job_id: None,
                    tenant: None,
                    message,
                    data,
                });
            }
            // The events and the episodes they open or close are written together: a new leader
            // finds no episode reported without its event, nor an event whose episode it starts again.
            if !events.is_empty() || !writes.put.is_empty() || !writes.deleted.is_empty() {
                self.store.transaction(|tx| {
                    for e in &events {
                        tx.append_event(e.clone())?;
                    }
                    for e in &writes.put {
                        tx.put(e)?;
                    }
                    for k in &writes.deleted {
                        tx.delete::<QuotaEpisode>(k)?;
                    }
                    Ok(())
                })?;
            }
        }
        if st.quota_gauges.is_empty() {
            // A new loop (a restart, a new leader) sharing the registry starts from a clean slate.
            for family in self.quota_families() {
                family.clear();
            }
        }
        let mut now_published = BTreeMap::new();
        for p in pools {
            let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            let exhausted = i64::from(st.quota_watch.exhausted(&p.region, &p.pool));
            let (limit, free) = (p.limit, p.free);
            // The pool's names move into the key: this runs for every pool every round.
            let key = (p.region, p.pool);
            let blocked = st.quota_blocking.get(&key).map_or(0, Vec::len);
            let values =
                [gauge(limit), gauge(limit.saturating_sub(free)), gauge(free), gauge(blocked as u64), exhausted];
            if st.quota_gauges.remove(&key) != Some(values) {
                let label = PoolLabel { region: key.0.clone(), pool: key.1.clone() };
                for (family, v) in self.quota_families().into_iter().zip(values) {
                    family.get_or_create(&label).set(v);
                }
            }
            now_published.insert(key, values);
        }
        // What is left was published for a pool the world no longer knows.
        for (region, pool) in std::mem::replace(&mut st.quota_gauges, now_published).into_keys() {
            let label = PoolLabel { region, pool };
            for family in self.quota_families() {
                family.remove(&label);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked(pools: &[(&str, &str)]) -> Blocking {
        pools.iter().map(|(r, p)| ((r.to_string(), p.to_string()), vec!["j1".to_string()])).collect()
    }

    #[test]
    fn one_event_per_episode_past_the_threshold_and_one_when_it_clears() {
        let mut w = QuotaWatch::default();
        let min = 60_000;
        let east = blocked(&[("eastus", "standardNCADSA100v4Family")]);
        // Blocked from minute 0; nothing before 15 minutes.
        for t in 0..15 {
            assert!(w.observe(t * min, &east, 15 * min).is_empty(), "minute {t}");
        }
        let n = w.observe(15 * min, &east, 15 * min);
        assert_eq!(n.len(), 1);
        assert!(n[0].exhausted && n[0].since_ms == 0 && n[0].jobs == ["j1"]);
        assert!(
            n[0].message(15 * min).contains("has kept 1 waiting job out for 15 min: j1"),
            "{}",
            n[0].message(15 * min)
        );
        assert!(w.exhausted("eastus", "standardNCADSA100v4Family"));
        // Still blocked: no repeat.
        for t in 16..40 {
            assert!(w.observe(t * min, &east, 15 * min).is_empty());
        }
        let n = w.observe(40 * min, &Blocking::new(), 15 * min);
        assert_eq!(n.len(), 1);
        assert!(!n[0].exhausted);
        assert!(n[0].message(40 * min).contains("no longer holds waiting work back (it did for 40 min)"));
        // A new episode starts from scratch, and a blip shorter than the threshold says nothing.
        assert!(w.observe(41 * min, &east, 15 * min).is_empty());
        assert!(w.observe(50 * min, &Blocking::new(), 15 * min).is_empty());
        assert!(w.observe(51 * min, &east, 15 * min).is_empty());
        assert_eq!(w.observe(66 * min, &east, 15 * min).len(), 1);
    }
}
