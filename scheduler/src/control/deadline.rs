//! Deadline jobs in the control loop: every round, each job with a deadline, known work and spot
//! allowed gets its configured [`DeadlinePolicy`](crate::deadline::DeadlinePolicy) (the same code
//! the `spot-deadline` simulator experiment runs), fed with the spot availability the loop has
//! observed per region; the policy's choice (spot in a region, regular in a region, or nothing)
//! narrows the job's solver demand, and a change of choice moves a running job make-before-break.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::LoopState;
use super::deadline_choice::DeadlineChoice;
use super::demand::RESTART_MARGIN_HOURS;
use super::feasibility::{Feasibility, OurUsage};
use super::world::SpotHistory;
use crate::catalog::Catalog;
use crate::deadline::{Choice, DeadlinePolicy, DeadlinePolicyKind, RegionTick, TickView};
use crate::model::{Attempt, AttemptState, FailureClass, Job, OfferFilter, PlacementScore, Priority};

/// A deadline job's policy instance and the regions its indices refer to.
struct JobPolicy {
    kind: DeadlinePolicyKind,
    regions: Vec<String>,
    policy: Box<dyn DeadlinePolicy>,
}

/// The control loop's in-memory deadline state: the spot availability history it observes, one
/// policy instance per deadline job, and this round's choices. Lost on a restart (the history then
/// starts empty and policies afresh: their latches re-trigger from the job's slack).
#[derive(Default)]
pub(crate) struct DeadlineState {
    pub(crate) history: SpotHistory,
    /// Regions where one of our spot fleets lost VMs in this round.
    pub(crate) evicted_spot: BTreeSet<String>,
    /// When one of our spot fleets last lost VMs in each region: evidence against spot VMs that
    /// run there, which a refusal of new ones is not (see [`holding`]).
    pub(crate) spot_lost_at: BTreeMap<String, i64>,
    policies: BTreeMap<String, JobPolicy>,
    pub(crate) choices: BTreeMap<String, DeadlineChoice>,
}

impl std::fmt::Debug for DeadlineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadlineState")
            .field("history", &self.history)
            .field("evicted_spot", &self.evicted_spot)
            .field("spot_lost_at", &self.spot_lost_at)
            .field("jobs", &self.policies.keys().collect::<Vec<_>>())
            .field("choices", &self.choices)
            .finish()
    }
}

impl DeadlineState {
    /// True when `a` holds something other than what its job's policy chose (and the policy chose
    /// to run somewhere): the job is placed again, and `a` is retired once the new attempt runs.
    pub(crate) fn retiring(&self, a: &Attempt) -> bool {
        self.choices.get(&a.job_id).is_some_and(|c| c.hold.is_some() && !c.allows(&a.region, a.priority))
    }

    /// True when `new`, now running, carries out its job's choice and `old` does not: make before
    /// break, `old` goes now.
    pub(crate) fn replaces(&self, new: &Attempt, old: &Attempt) -> bool {
        new.job_id == old.job_id
            && self
                .choices
                .get(&new.job_id)
                .is_some_and(|c| c.allows(&new.region, new.priority) && !c.allows(&old.region, old.priority))
    }
}

const HOUR_MS: f64 = 3_600_000.0;

/// The cheapest offer of one tier in one region for a job: USD per hour for the whole job, and
/// whether it can be used now.
#[derive(Clone, Copy)]
struct TierOffer {
    price: f64,
    usable: bool,
}

/// A region's cheapest regular and spot offer for a job.
type Tiers = (Option<TierOffer>, Option<TierOffer>);

/// Records this round's spot availability per region in the history (the rule of [`SpotHistory`]:
/// a spot GPU offer is listed whose placement score is not `Low` (Azure publishes no free
/// capacity; its score is the prior, and a hand-built world's known capacity must not be 0), no
/// capacity block learned from a refusal or an eviction covers a spot offer there, and none of our
/// spot fleets there lost VMs this round).
pub(crate) fn observe_spot(st: &mut LoopState, catalog: &Catalog, now: i64, tick_ms: i64) {
    let mut available: BTreeMap<String, bool> = BTreeMap::new();
    for o in &st.world.offers {
        // Runs every round over every offer: a region's name is copied once, and the offer is
        // looked at only while its region has no spot offer listed yet.
        let e = match available.get_mut(o.region.as_str()) {
            Some(e) => e,
            None => available.entry(o.region.clone()).or_insert(false),
        };
        *e = *e
            || (o.priority == Priority::Spot
                && o.price_per_hour.is_some()
                && o.capacity_vms != Some(0)
                && o.placement_score != Some(PlacementScore::Low)
                && catalog.size(&o.size).is_some_and(|s| s.gpus > 0));
    }
    for (region, up) in available.iter_mut() {
        let blocked = st.world.blocked.iter().any(|b| {
            b.is_active(now)
                && b.zone.is_none()
                && &b.region == region
                && b.class == FailureClass::Capacity
                && b.priority.is_none_or(|p| p == Priority::Spot)
        });
        if blocked || st.deadline.evicted_spot.contains(region) {
            *up = false;
        }
    }
    for region in std::mem::take(&mut st.deadline.evicted_spot) {
        st.deadline.spot_lost_at.insert(region, now);
    }
    st.deadline.history.observe(now, tick_ms, &available);
}

/// Starts a round's choices: forgets the policies of jobs no longer open (`open` lists the open
/// deadline jobs) and returns the last round's choices.
pub(crate) fn begin_choices(st: &mut LoopState, open: &BTreeSet<&str>) -> BTreeMap<String, DeadlineChoice> {
    st.deadline.policies.retain(|id, _| open.contains(id.as_str()));
    std::mem::take(&mut st.deadline.choices)
}

/// The job's active placements its choice leaves behind, once a placement that carries the choice
/// out runs (with a choice to hold nothing: all but the newest running one). A job never keeps two
/// placements after a move.
pub(crate) fn leftovers(attempts: &[&Attempt], choice: &DeadlineChoice) -> Vec<Attempt> {
    let running = attempts.iter().filter(|a| a.state == AttemptState::Running);
    let keep = match &choice.hold {
        Some(_) => running.filter(|a| choice.allows(&a.region, a.priority)).max_by_key(|a| a.number),
        None => running.max_by_key(|a| a.number),
    };
    let Some(keep) = keep else { return Vec::new() };
    let carried = |a: &Attempt| match &choice.hold {
        Some(_) => choice.allows(&a.region, a.priority),
        None => a.number == keep.number,
    };
    attempts.iter().filter(|a| a.is_active() && !carried(a)).map(|a| (*a).clone()).collect()
}

/// What the job's policy holds it to this round: builds the job's view (see `deadline::TickView`)
/// and runs its policy (the same instance from round to round). `None` when the job has no region
/// with an offer for it.
#[allow(clippy::too_many_arguments)] // the round's view of one job, every part needed
pub(crate) fn choose(
    st: &mut LoopState,
    catalog: &Catalog,
    (kind, tick_ms): (DeadlinePolicyKind, i64),
    job: &Job,
    attempts: &[&Attempt],
    ours: &OurUsage,
    (input, afford): (Option<&(String, Option<f64>)>, Option<f64>),
    now: i64,
) -> Option<DeadlineChoice> {
    // Spot VMs lost in the region lately (ours, to an eviction) say what a refusal does not: that
    // running spot VMs there are being taken; the policy then judges the held spot placement as
    // any other.
    let lost_lately = |region: &str| {
        st.deadline.spot_lost_at.get(region).is_some_and(|&t| now - t < super::error_policy::SPOT_EVICTION_BLOCK_MS)
    };
    let held = holding(attempts).filter(|a| a.priority != Priority::Spot || !lost_lately(&a.region));
    // A tier the job's budget (its own, its pipeline's) cannot pay for over its remaining work is
    // not usable: chosen, the solver could not place it within the budget and the job would wait
    // for good (a pipeline with 1.5x its cheapest cost left 44 of 64 pipelines unstarted).
    let afford_per_hour = afford.map(|usd| usd / super::demand::planning_hours(job));
    let (names, tiers) = tier_offers(st, catalog, job, ours, (held, afford_per_hour), now);
    if names.is_empty() {
        return None;
    }
    let histories = histories(&st.deadline.history, &names, &tiers, held);
    let observed = st.deadline.history.observed();
    let regions: Vec<RegionTick<'_>> = names
        .iter()
        .zip(&tiers)
        .zip(&histories)
        .map(|((name, (regular, spot)), history)| RegionTick {
            name,
            regular_price: regular.map_or(f64::INFINITY, |r| r.price),
            spot_price: spot.map_or(f64::INFINITY, |s| s.price),
            regular_available: regular.is_some_and(|r| r.usable),
            spot_history: history,
            spot_observed: observed,
        })
        .collect();
    // Moving between regions costs the catalog's transfer price (the solver's) for the data that
    // must follow the job.
    let egress: Vec<f64> =
        names.iter().flat_map(|from| names.iter().map(|to| catalog.egress_usd_per_gb(from, to))).collect();
    let data = job_data(job, input);
    let view = tick_view(job, attempts, &names, &regions, &egress, data, now, tick_ms)?;
    let entry = st.deadline.policies.entry(job.id.clone()).or_insert_with(|| JobPolicy {
        kind,
        regions: names.clone(),
        policy: kind.make(),
    });
    if entry.kind != kind || entry.regions != names {
        *entry = JobPolicy { kind, regions: names.clone(), policy: kind.make() };
    }
    let hold = match entry.policy.choose(&view) {
        Choice::Spot(r) => Some((Priority::Spot, names.get(r)?.clone())),
        Choice::Regular(r) => Some((Priority::Regular, names.get(r)?.clone())),
        Choice::Idle => None,
    };
    Some(DeadlineChoice { policy: kind.name(), hold })
}

/// The job's placement that runs whole (every VM it asked for, none lost): the newest such one.
/// What it holds is there for it: its VMs keep running whatever a new allocation of that offer
/// would meet (a block learnt from a refusal, an open breaker, a `Low` placement score, a pool the
/// others filled); only our spot VMs lost in its region lately (`DeadlineState::spot_lost_at`)
/// count against a held spot placement, as they did before. Judged as a new allocation, the offer the job ran on looked
/// unusable, its policy moved it, and a pipeline stage paid its input's egress again: on the
/// Philly pipelines week 2,000 of the 2,543 stage moves were such policy changes, most of them
/// away from a healthy fleet whose own offer only a block or a breaker had closed.
fn holding<'a>(attempts: &[&'a Attempt]) -> Option<&'a Attempt> {
    attempts
        .iter()
        .filter(|a| a.state == AttemptState::Running && a.running_vms >= a.vms && a.below_min_since_ms.is_none())
        .max_by_key(|a| a.number)
        .copied()
}

/// Per allowed region with an offer for the job: the cheapest usable (else cheapest) regular and
/// spot offer, as the feasibility chain judges them for the whole job (a spot offer whose
/// placement score is `Low` is not usable). The placement the job holds ([`holding`]) is usable
/// in its region and tier at the price it is billed.
fn tier_offers(
    st: &LoopState,
    catalog: &Catalog,
    job: &Job,
    ours: &OurUsage,
    (held, afford_per_hour): (Option<&Attempt>, Option<f64>),
    now: i64,
) -> (Vec<String>, Vec<Tiers>) {
    let spec = &job.spec;
    let sizes = spec.acceptable_sizes(catalog);
    let wanted = job.wanted_gpus().max(1);
    let chain = Feasibility { world: &st.world, breakers: &st.breakers, catalog, now };
    let mut names = Vec::new();
    let mut tiers = Vec::new();
    for region in spec.allowed_regions(catalog) {
        let mut regular: Option<TierOffer> = None;
        let mut spot: Option<TierOffer> = None;
        for o in st.world.offers.iter().filter(|o| o.region == region) {
            let Some(size) = sizes.iter().find(|s| s.name == o.size) else { continue };
            if size.gpus == 0 || spec.min_gpus_per_vm.is_some_and(|m| size.gpus < m) {
                continue;
            }
            let vms = wanted.div_ceil(size.gpus);
            let (price, passes) = match chain.offer(o, size) {
                Ok(price) => (price, true),
                // Not a candidate at all: no price, or not for this subscription.
                Err(OfferFilter::Priced | OfferFilter::NotRestricted) => continue,
                Err(_) => (o.price_per_hour.unwrap_or(f64::INFINITY), false),
            };
            // A spot offer Azure scores `Low` is one its allocations are unlikely to succeed on
            // (or its VMs to last): not usable this tick, as if its capacity were known to be 0.
            let scored_out = o.priority == Priority::Spot && o.placement_score == Some(PlacementScore::Low);
            let affordable = afford_per_hour.is_none_or(|a| price * vms as f64 <= a);
            let usable = passes && !scored_out && affordable && chain.room(o, size, vms, ours).is_ok();
            let offer = TierOffer { price: price * vms as f64, usable };
            let slot = match o.priority {
                Priority::Regular => &mut regular,
                Priority::Spot => &mut spot,
            };
            // Usable offers first, then the cheapest.
            if slot.is_none_or(|s| (!s.usable && usable) || (s.usable == usable && offer.price < s.price)) {
                *slot = Some(offer);
            }
        }
        if let Some(a) = held.filter(|a| a.region == region) {
            let offer = TierOffer { price: a.price_per_hour * a.vms as f64, usable: true };
            let slot = match a.priority {
                Priority::Regular => &mut regular,
                Priority::Spot => &mut spot,
            };
            if slot.is_none_or(|s| !s.usable || offer.price < s.price) {
                *slot = Some(offer);
            }
        }
        if regular.is_some() || spot.is_some() {
            names.push(region);
            tiers.push((regular, spot));
        }
    }
    (names, tiers)
}

/// Each region's spot history as the job sees it: a region whose history says "available" but
/// whose spot offers this job cannot use now (quota, a block on its sizes) shows this job an
/// unavailable current tick; the region where the job's spot placement runs whole ([`holding`])
/// shows it an available one, whatever a new allocation there would meet.
fn histories<'h>(
    history: &'h SpotHistory,
    names: &[String],
    tiers: &[Tiers],
    held: Option<&Attempt>,
) -> Vec<Cow<'h, [bool]>> {
    names
        .iter()
        .zip(tiers)
        .map(|(name, (_, spot))| match spot {
            None => Cow::Borrowed(&[][..]),
            Some(_) if held.is_some_and(|a| a.priority == Priority::Spot && &a.region == name) => {
                now_reads(history.window(name), true)
            }
            Some(s) if !s.usable => now_reads(history.window(name), false),
            Some(_) => Cow::Borrowed(history.window(name)),
        })
        .collect()
}

/// A region's spot history with its current (last) tick read as `available`: borrowed when it
/// already reads so (or is empty), copied otherwise.
fn now_reads(window: &[bool], available: bool) -> Cow<'_, [bool]> {
    match window.split_last() {
        Some((&last, before)) if last != available => Cow::Owned([before, &[available]].concat()),
        _ => Cow::Borrowed(window),
    }
}

/// The job's state as the policies see it: work, deadline and progress in milliseconds from its
/// submission, what it holds now and how much restart overhead that still owes, what a spot loss
/// would cost, and where its checkpoint is.
/// Where a deadline job's data lies before it first runs, and how many GB must follow it when it
/// moves: its own `data_region` and `data_gb`, else its dependencies' output (`input`, a pipeline
/// stage's). Without a size, moving costs nothing, as in the solver.
fn job_data<'j>(job: &'j Job, input: Option<&'j (String, Option<f64>)>) -> (Option<&'j str>, f64) {
    let spec = &job.spec;
    let region = spec.data_region.as_deref().or(input.map(|(r, _)| r.as_str()));
    let gb = spec.data_gb.or(input.and_then(|(_, gb)| *gb)).unwrap_or(0.0);
    (region, gb)
}

#[allow(clippy::too_many_arguments)] // one view of the job, every field needed
fn tick_view<'v>(
    job: &Job,
    attempts: &[&Attempt],
    names: &[String],
    regions: &'v [RegionTick<'v>],
    egress: &'v [f64],
    (data_region, data_gb): (Option<&str>, f64),
    now: i64,
    tick_ms: i64,
) -> Option<TickView<'v>> {
    let spec = &job.spec;
    let deadline = spec.deadline?;
    let work_h = spec.duration_hours?;
    let index = |region: &str| names.iter().position(|n| n == region);
    let overhead_ms = (RESTART_MARGIN_HOURS * HOUR_MS).round() as i64;
    let newest_active = attempts.iter().filter(|a| a.is_active()).max_by_key(|a| a.number);
    let (running, overhead_left_ms) = match newest_active.and_then(|a| index(&a.region).map(|i| (a, i))) {
        Some((a, i)) => {
            let c = match a.priority {
                Priority::Spot => Choice::Spot(i),
                Priority::Regular => Choice::Regular(i),
            };
            let left = match a.state {
                AttemptState::Provisioning => (overhead_ms - (now - a.started_at_ms)).clamp(0, overhead_ms),
                _ => 0,
            };
            (c, left)
        }
        None => (Choice::Idle, 0),
    };
    // The data (and the checkpoint) lie where the job last ran; before its first start, in its
    // data region.
    let checkpoint_region = match attempts.iter().max_by_key(|a| a.number) {
        Some(a) => index(&a.region),
        None => data_region.and_then(index),
    };
    let start = job.submitted_at_ms;
    let deadline_at = (deadline.unix_timestamp_nanos() / 1_000_000) as i64;
    let work_ms = (work_h * HOUR_MS).round() as i64;
    // Rounded up: the view never believes more time is left than there is.
    let tick = (((now - start).max(0) + tick_ms - 1) / tick_ms) as usize;
    // What an eviction would cost on top of the restart: the work since the last checkpoint, at
    // worst a whole interval; without checkpoints, everything done so far (at least an hour's
    // worth, as the work to come is not saved either).
    let remaining_h = job.remaining_hours().unwrap_or(work_h);
    let at_risk_h = match spec.checkpoint_interval_minutes {
        Some(m) => (m as f64 / 60.0).min(remaining_h),
        None => job.progress_hours.max(remaining_h.min(1.0)),
    };
    Some(TickView {
        regions,
        egress_usd_per_gb: egress,
        checkpoint_gb: data_gb,
        tick,
        tick_ms,
        work_ms,
        deadline_ms: deadline_at - start,
        overhead_ms,
        progress_ms: ((job.progress_hours * HOUR_MS).round() as i64).clamp(0, work_ms),
        running,
        overhead_left_ms,
        spot_loss_ms: (at_risk_h * HOUR_MS).round() as i64,
        checkpoint_region,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipeline stage whose input (500 GB) lies in westus3: moving it to eastus costs egress, so
    /// the policy takes westus3's spot though eastus's is a little cheaper. Before, the loop told the
    /// policy that moving was free, and stages left their data (the pipelines week paid 5× the
    /// egress of greedy-failover).
    #[test]
    fn a_deadline_job_starts_where_its_input_lies_unless_moving_pays() {
        let spec = "name = \"score\"\nkind = \"batch\"\ngpus = 8\nspot = \"allowed\"\n\
                    duration_hours = 4.0\ndeadline = \"2030-01-01T00:00:00Z\"\n";
        let j = Job::new("j".into(), crate::model::JobSpec::parse(spec, crate::model::SpecFormat::Toml).unwrap(), 0);
        let names = vec!["eastus".to_string(), "westus3".to_string()];
        let up = [true; 4];
        let tick = |name: &'static str, spot_price: f64| RegionTick {
            name,
            regular_price: 30.0,
            spot_price,
            regular_available: true,
            spot_history: &up,
            spot_observed: 4,
        };
        let regions = [tick("eastus", 9.0), tick("westus3", 10.0)];
        let egress = [0.0, 0.02, 0.02, 0.0];
        let input = ("westus3".to_string(), Some(500.0));
        let choose = |data| {
            let view = tick_view(&j, &[], &names, &regions, &egress, data, 3 * 60_000, 60_000).unwrap();
            (view.move_cost(0), DeadlinePolicyKind::Spillway.make().choose(&view))
        };
        let (cost, choice) = choose(job_data(&j, Some(&input)));
        assert!((cost - 10.0).abs() < 1e-9, "500 GB at $0.02: {cost}");
        assert_eq!(choice, Choice::Spot(1), "stays with its data");
        // With moving free (no size known), the cheaper spot wins.
        let (cost, choice) = choose(job_data(&j, Some(&("westus3".to_string(), None))));
        assert_eq!((cost, choice), (0.0, Choice::Spot(0)));
    }
}
