//! Step 1 of a round: the cloud reconciliation. Every tagged fleet that no live attempt owns is
//! deleted (recorded once as an `orphan_fleet` event), and the deletions the loop owns that are due
//! are tried again, until the cloud confirms each fleet gone. The decisions are `cleanup.rs`'s and
//! `deletions.rs`'s; this file only drives them.

use std::collections::BTreeSet;

use state::StoreError;

use super::actions::Action;
use super::round::{ControlError, RoundReport};
use super::snapshot::Snapshot;
use super::{Controller, LoopState, cleanup};
use crate::model::EventKind;

impl Controller {
    /// Every tagged fleet without a live attempt is deleted (recorded once as an `orphan_fleet`
    /// event; with `delete_orphans` off, only recorded), and the deletions the loop owns that are
    /// due are tried again.
    pub(super) async fn reconcile_cloud(
        &self,
        st: &mut LoopState,
        snap: &mut Snapshot,
        report: &mut RoundReport,
    ) -> Result<(), ControlError> {
        let mut actions: Vec<Action> =
            st.deletions.due(snap.now).into_iter().map(|fleet| Action::Delete { fleet, then: None }).collect();
        if let Some(fleets) = snap.cloud_fleets.take() {
            let known: BTreeSet<String> =
                fleets.iter().filter(|f| st.deletions.knows(&f.name)).map(|f| f.name.clone()).collect();
            let orphans = cleanup::orphans(snap, &fleets, &known);
            if !st.orphans_reported.is_empty() {
                let live: BTreeSet<&str> = fleets.iter().map(|f| f.name.as_str()).collect();
                st.orphans_reported.retain(|f| live.contains(f.as_str()));
            }
            for o in orphans {
                report.orphans += 1;
                if st.orphans_reported.insert(o.fleet.clone()) {
                    self.record_orphan(snap.now, &o)?;
                }
                if self.config.delete_orphans {
                    actions.push(Action::Delete { fleet: o.fleet, then: None });
                }
            }
        }
        self.act(st, snap, report, actions).await?;
        Ok(())
    }

    fn record_orphan(&self, now: i64, o: &cleanup::Orphan) -> Result<(), StoreError> {
        let what = if self.config.delete_orphans { "; deleting it" } else { "; left alone" };
        tracing::warn!(fleet = %o.fleet, job = %o.job_id, "{}{what}", o.why);
        self.store.transaction(|tx| {
            tx.append_event(state::EventDraft {
                at_ms: now,
                kind: EventKind::OrphanFleet.as_str().into(),
                job_id: Some(o.job_id.clone()),
                tenant: None,
                message: format!("{}{what}", o.why),
                data: serde_json::Value::Null,
            })?;
            Ok(())
        })
    }
}
