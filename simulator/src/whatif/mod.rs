//! What-if simulation: a scenario (regions, quota, capacity, outages, spot behaviour, a workload)
//! replayed against the simulated cloud in virtual time, once per policy, with the same control
//! loop that runs in production for the `spillway` and `regular-only` policies and per-job
//! brokers for the baselines. `spillway simulate FILE` runs files whose `[experiment] kind` is
//! `what-if`; `spillway simulate` with no file runs the bundled [`DEFAULT_SCENARIO`].
//!
//! - [`scenario`]: the TOML file, parsed strictly; every problem names its field.
//! - [`fit`]: figures fitted to the Philly trace, kept as our own data (`scenarios/philly-fit.toml`).
//! - [`philly`]: the Philly job trace's reader, shared by the fit and the workload.
//! - [`workload`]: the synthetic generator and the trace readers (Philly, Alibaba, JSON lines) with
//!   their mapping onto `JobSpec`s.
//! - [`engine`]: discrete events in virtual time, reconcile rounds every `interval_seconds`, each
//!   policy run by a driver (`driver`: the trait; `loop_driver`: the production control loop).
//! - [`baselines`]: `greedy-failover`, `skypilot-like` and `single-region`, per-job brokers on the
//!   same cloud, seen through the `Cloud` trait only.
//! - [`report`]: the table, the JSON and the self-contained HTML report.
//! - [`advise`]: the quota increases that would have helped a week, confirmed by simulating it again.
//!
//! Determinism: the same scenario and seed give byte-identical JSON, apart from `wall_ms`
//! ([`RunOptions::timing`] = false writes 0 there).

pub mod advise;
pub mod baselines;
mod driver;
pub mod engine;
pub mod fit;
mod loop_driver;
pub mod philly;
pub mod report;
pub mod scenario;
pub mod workload;

use std::path::Path;

use scheduler::model::FieldErrors;

pub use engine::{RunOptions, run_scenario, run_scenario_blocking};
pub use report::{PolicyReport, PolicySeries, Report};
pub use scenario::{Policy, Scenario};
pub use workload::{TraceJob, load_workload};

/// The `[experiment] kind` of a what-if scenario file.
pub const KIND: &str = "what-if";

/// The bundled `default` scenario: what `spillway simulate` runs with no file.
pub const DEFAULT_SCENARIO: &str = include_str!("../../../scenarios/default.toml");

/// Why a what-if run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum WhatIfError {
    /// The scenario (or a file it names) is invalid; every problem names its field.
    #[error("invalid scenario {origin}:\n{errors}")]
    Invalid {
        /// The scenario file (or `default`).
        origin: String,
        /// Every problem, with its field path.
        errors: FieldErrors,
    },
    /// A file the scenario needs cannot be read.
    #[error("{what} {path}: {reason}")]
    Io {
        /// What the file is for (`job trace`, `spot trace`, …).
        what: String,
        /// The path as resolved.
        path: String,
        /// Why, with a hint when the file is simply absent.
        reason: String,
    },
    /// The store of a run failed (disk full, temp dir not writable, …).
    #[error("store: {0}")]
    Store(String),
    /// The control loop failed.
    #[error("control loop: {0}")]
    Control(String),
}

impl WhatIfError {
    pub(crate) fn invalid(origin: &str, field: &str, problem: impl Into<String>) -> WhatIfError {
        let mut errors = FieldErrors::default();
        errors.push(field, problem);
        WhatIfError::Invalid { origin: origin.to_string(), errors }
    }

    pub(crate) fn io(what: &str, path: &Path, e: &std::io::Error) -> WhatIfError {
        let reason = if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "not found ({e}); trace files are not part of the project: put the shared data folder \
                 next to the project (../shared) or point the scenario at your copy"
            )
        } else {
            e.to_string()
        };
        WhatIfError::Io { what: what.to_string(), path: path.display().to_string(), reason }
    }
}

/// True when a scenario text is a what-if scenario (its `[experiment] kind` is `what-if`), so a
/// caller can dispatch between experiment kinds without parsing the whole file.
pub fn is_what_if(text: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head {
        experiment: Option<Exp>,
    }
    #[derive(serde::Deserialize)]
    struct Exp {
        kind: Option<String>,
    }
    toml::from_str::<Head>(text).ok().and_then(|h| h.experiment).and_then(|e| e.kind).is_some_and(|k| k == KIND)
}
