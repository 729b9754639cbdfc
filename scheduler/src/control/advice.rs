//! The live quota advice (`GET /v1/advice`): [`solver::advise`] on the problem the next round
//! would plan (the open jobs' unmet demands, the offers the feasibility chain lets through with
//! the blocks the loop learnt, the free quota it last read), built by the same
//! `placement::plan_input` the round uses, with the pools' limits from the same read.

use super::Controller;
use super::placement;
use super::round::ControlError;
use super::world::our_usage;

impl Controller {
    /// Quota advice on the pending work as the loop sees it now: at most `max` recommendations,
    /// each confirmed by solving again with the increases applied. The loop's state is held only
    /// while the problem is built; the solves run on a blocking thread.
    pub async fn advise(&self, max: usize) -> Result<solver::advise::Advice, ControlError> {
        let (problem, in_use) = {
            let st = self.state.lock().await;
            let now = self.clock.now_ms();
            let snap = self.read_records(now)?;
            let input = placement::plan_input(&snap, &st, &self.config, &self.catalog);
            // The problem lists free vCPUs; the limits are free + everything used (by others and
            // by our attempts, in flight included), from the same view.
            let in_use: Vec<solver::QuotaLimit> = st
                .world
                .pools(&our_usage(snap.active()))
                .into_iter()
                .map(|p| solver::QuotaLimit { region: p.region, pool: p.pool, vcpus: p.limit.saturating_sub(p.free) })
                .collect();
            (input.problem, in_use)
        };
        let options = solver::advise::AdviseOptions {
            max_recommendations: max,
            solve: solver::SolveOptions {
                method: solver::Method::Round,
                time_limit_ms: self.config.solve_time_limit_ms,
            },
            ..Default::default()
        };
        let advice = tokio::task::spawn_blocking(move || solver::advise::advise(&problem, &in_use, &options)).await;
        // The advice only panics on a solver bug; the caller answers 503 like a store failure.
        advice.map_err(|e| ControlError::Advice(e.to_string()))
    }
}
