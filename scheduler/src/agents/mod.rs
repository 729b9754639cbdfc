//! The server side of the node agents (`spillway agent`, one per VM of an attempt): credentials
//! scoped to one attempt, registration and ranks, the work order each rank runs, logs, heartbeats
//! and GPU telemetry, exits and preemption notices, and the verdicts they lead to.
//!
//! ```text
//! VM boots ──customData──▶ spillway agent ──register──▶ rank ──work (long poll)──▶ gang complete
//!     ▶ setup, run (SPILLWAY_* variables) ──logs, heartbeats──▶ store / metrics
//!     ▶ exit codes ──▶ succeeded | restart in place | failed      notice ──▶ every rank stops
//! ```
//!
//! | module | job |
//! | --- | --- |
//! | [`protocol`] | the bodies of the agent routes, shared with the agent; the rank variables |
//! | [`credential`] | attempt-scoped credentials (HMAC), minted for fleets, verified per call |
//! | [`bootstrap`] | the agent's settings file and the cloud-init `customData` that starts it |
//! | [`records`] | how ranks, attempts' work, jobs' work and log chunks are stored |
//! | [`decide`] | the verdicts: what a rank does now, what an exit means |
//! | [`service`] | [`AgentService`]: the calls, their transactions, metrics, log reading |

pub mod bootstrap;
pub mod credential;
pub mod decide;
pub mod protocol;
pub mod records;
pub mod service;

pub use bootstrap::{AgentBootstrap, AgentSettings, settings_from_custom_data};
pub use credential::{AgentKeys, AttemptRef};
pub use service::{
    AgentConfig, AgentError, AgentMetrics, AgentService, LogCursor, LogEntry, LogFilter, LogPage, NodeView, cut_line,
};
