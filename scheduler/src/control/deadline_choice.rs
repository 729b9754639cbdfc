//! What a deadline job's policy chose for it this round (spot or regular in one region, or nothing),
//! how that choice narrows the job's solver demand, and which jobs the loop runs a deadline policy
//! for. `deadline.rs` makes the choices; placement, growth and watching read them.

use crate::model::{Job, JobKind, Priority, SpotPolicy};

/// True when the loop runs the configured deadline policy for this job: it has a deadline, known
/// work (`duration_hours`), may use spot or regular (a spot-only job has nothing to choose), and is
/// not an inference service (which has no end).
pub fn deadline_managed(job: &Job) -> bool {
    job.spec.deadline.is_some()
        && job.spec.duration_hours.is_some()
        && matches!(job.spec.spot_policy(), SpotPolicy::Allowed | SpotPolicy::Preferred)
        && job.spec.kind != JobKind::Inference
}

/// What a deadline job's policy wants it to hold this round.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadlineChoice {
    /// The policy that chose.
    pub policy: &'static str,
    /// Where to run (`Spot` or `Regular` in a region), or `None` to wait with nothing placed.
    pub hold: Option<(Priority, String)>,
}

impl DeadlineChoice {
    /// Whether a placement in `region` at `priority` carries out this choice.
    pub fn allows(&self, region: &str, priority: Priority) -> bool {
        self.hold.as_ref().is_some_and(|(p, r)| *p == priority && r == region)
    }

    /// Why the job waits when the choice is to hold nothing.
    pub fn waiting_reason(&self) -> String {
        format!("waiting for spot: the {} deadline policy has slack to spare", self.policy)
    }
}

impl std::fmt::Display for DeadlineChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.hold {
            Some((p, r)) => write!(f, "{p} in {r}"),
            None => f.write_str("nothing (wait)"),
        }
    }
}

/// Narrows a deadline job's demands to its policy's choice: spot in `r` becomes spot only
/// ([`solver::SpotPolicy::Only`]) in `r` only, regular in `r` becomes regular in `r` only. A choice
/// to hold nothing leaves the demands alone: the loop does not pass them on.
pub fn apply_deadline_choice(demands: &mut [solver::JobDemand], choice: &DeadlineChoice) {
    let Some((priority, region)) = &choice.hold else { return };
    for d in demands {
        d.regions = Some(vec![region.clone()]);
        d.deny_regions.retain(|r| r != region);
        d.spot = match priority {
            Priority::Spot => solver::SpotPolicy::Only,
            Priority::Regular => solver::SpotPolicy::Never,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demand() -> solver::JobDemand {
        solver::JobDemand {
            id: "j".into(),
            regions: Some(vec!["eastus".into(), "westus3".into()]),
            deny_regions: vec!["westus3".into()],
            spot: solver::SpotPolicy::Allowed,
            ..solver::JobDemand::default()
        }
    }

    #[test]
    fn a_choice_narrows_the_demand_to_one_region_and_one_tier() {
        let spot = DeadlineChoice { policy: "spillway", hold: Some((Priority::Spot, "westus3".into())) };
        let mut d = vec![demand()];
        apply_deadline_choice(&mut d, &spot);
        assert_eq!(d[0].regions, Some(vec!["westus3".to_string()]));
        assert!(d[0].deny_regions.is_empty(), "the chosen region is not denied");
        assert_eq!(d[0].spot, solver::SpotPolicy::Only);
        assert!(spot.allows("westus3", Priority::Spot));
        assert!(!spot.allows("westus3", Priority::Regular), "spot only");
        assert!(!spot.allows("eastus", Priority::Spot), "that region only");

        let regular = DeadlineChoice { policy: "greedy", hold: Some((Priority::Regular, "eastus".into())) };
        let mut d = vec![demand()];
        apply_deadline_choice(&mut d, &regular);
        assert_eq!((d[0].regions.clone(), d[0].spot), (Some(vec!["eastus".to_string()]), solver::SpotPolicy::Never));

        let idle = DeadlineChoice { policy: "spillway", hold: None };
        let mut d = vec![demand()];
        apply_deadline_choice(&mut d, &idle);
        assert_eq!(d, vec![demand()]);
        assert!(!idle.allows("eastus", Priority::Regular));
        assert!(idle.waiting_reason().contains("waiting for spot"));
    }
}
