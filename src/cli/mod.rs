//! One module per command; each returns the process exit code.

pub mod advise;
pub mod agent;
pub mod budget;
pub mod cancel;
pub mod capacity;
pub mod catalog;
pub mod client;
pub mod dashboard_url;
pub mod emulate_arm;
pub mod jobs;
pub mod logs;
pub mod pipelines;
pub mod plan;
pub mod serve;
pub mod simulate;
pub mod state;
pub mod status;
pub mod submit;
pub mod table;
pub mod token;
pub mod validate;
