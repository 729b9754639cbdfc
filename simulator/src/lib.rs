//! The simulated cloud, virtual time, workloads, scenarios, baselines and reports.
