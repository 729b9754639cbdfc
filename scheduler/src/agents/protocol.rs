//! What a node agent and the scheduler say to each other: the bodies of the agent routes
//! (`/v1/agent/...`), shared by the server (`api::agent_routes`) and the agent (`spillway agent`).
//!
//! Every call names its job, attempt and (after registration) rank in the path, and carries the
//! attempt's credential ([`super::AgentKeys`]). All times are the sender's clock in Unix ms; the
//! server keeps its own clock for everything it decides on.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The first call of an agent: who it is and what it sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Registration {
    /// The VM's name in the cloud (Azure: the instance name from the instance metadata service);
    /// a VM that registers again gets its rank back.
    #[schema(min_length = 1, max_length = 128)]
    pub vm_name: String,
    /// The VM's host name.
    #[schema(max_length = 255)]
    pub hostname: String,
    /// The VM's private IP address, which the other ranks use (`SPILLWAY_NODE_IPS`, `MASTER_ADDR`).
    #[schema(max_length = 64)]
    pub private_ip: String,
    /// The GPUs the agent sees; `None` when it cannot tell (no NVML / `nvidia-smi`): absent, never
    /// an empty list standing for "no GPUs".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuInfo>>,
    /// Random per agent process start: tells a restarted agent from a retried request.
    #[schema(min_length = 1, max_length = 64)]
    pub boot_id: String,
    /// The agent's version (the `spillway` binary's).
    #[serde(default)]
    #[schema(max_length = 64)]
    pub agent_version: String,
}

/// One GPU as the agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuInfo {
    /// Index on the VM (0-based).
    pub index: u32,
    /// Model name, e.g. `NVIDIA A100 80GB PCIe`.
    pub name: String,
    /// Memory in MiB, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_mib: Option<u64>,
}

/// The answer to a registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Registered {
    /// This VM's rank, 0-based, stable within the attempt.
    pub rank: u32,
    /// VMs in the attempt (the gang waits for all of them).
    pub num_nodes: u32,
    /// How often to send heartbeats.
    pub heartbeat_interval_ms: u64,
}

/// What a rank should do now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Not yet: the gang is still gathering. Ask again.
    Wait,
    /// Run the work as start number `restart` (SPILLWAY_RESTART). A rank running another number
    /// stops it first.
    Run {
        /// The job-wide start number.
        restart: u32,
    },
    /// Stop the work (SIGTERM, then SIGKILL after the grace) and do not start it again.
    Stop {
        /// Why, for the logs.
        reason: String,
    },
}

/// What a rank runs: the job's `setup` and `run` with the variables of its rank.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkOrder {
    /// What to do now.
    pub action: Action,
    /// The job's `run` script.
    pub run: String,
    /// The job's `setup` script (once per VM, before the first `run`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<String>,
    /// Directory to start in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Container image to run `run` in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// The variables of this rank: `SPILLWAY_*`, `MASTER_ADDR`, `MASTER_PORT` and the job's `envs`
    /// (the agent adds `SPILLWAY_CHECKPOINT_DIR`, a path on its VM).
    pub env: BTreeMap<String, String>,
}

/// The answer of `GET …/work`: the order once the gang is complete, else how far it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkStatus {
    /// VMs registered so far.
    pub registered: u32,
    /// VMs in the attempt.
    pub num_nodes: u32,
    /// The order, once every VM has registered (or a stop before that).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<WorkOrder>,
}

/// Which output a log line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    /// The work's standard output.
    Stdout,
    /// The work's standard error.
    Stderr,
    /// The agent itself (setup started, exit codes, signals, errors).
    Agent,
}

impl LogStream {
    /// The lower-case word used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
            LogStream::Agent => "agent",
        }
    }
}

/// One line of output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLine {
    /// When the agent read it, Unix ms (the VM's clock).
    pub at_ms: i64,
    /// Which output.
    pub stream: LogStream,
    /// The text, without its line break; lines longer than the agent's limit arrive cut, with a
    /// marker saying how much was cut.
    pub text: String,
}

/// A batch of lines; batches of one agent process are numbered from 1 and sent in order, so a
/// retried batch is recognised and stored once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogBatch {
    /// The agent process's `boot_id` (as registered).
    pub boot_id: String,
    /// 1, 2, … within the agent process.
    pub batch: u64,
    /// The start number the lines belong to.
    pub restart: u32,
    /// The lines, oldest first.
    pub lines: Vec<LogLine>,
}

/// The answer to a log batch, sent once the lines are on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogAck {
    /// The last batch stored.
    pub batch: u64,
    /// True once the rank's log reached its cap: later lines are not stored (send none; the
    /// exit report still carries the last lines).
    pub truncated: bool,
}

/// Where a rank is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Registered; waiting for the rest of the gang.
    Waiting,
    /// Running `setup`.
    Setup,
    /// Running `run`.
    Running,
    /// The work exited; waiting for the next order.
    Exited,
    /// Stopping the work (SIGTERM sent).
    Stopping,
}

/// A heartbeat: the rank is alive, where it is, and its GPUs' utilisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// Where the rank is.
    pub phase: Phase,
    /// The start number it runs (or last ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<u32>,
    /// GPU samples; `None` when the agent has no NVML / `nvidia-smi` (absent, not zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuSample>>,
}

/// One GPU's utilisation at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    /// Index on the VM.
    pub index: u32,
    /// Percent of time a kernel ran over the sample period (0–100).
    pub utilization_percent: f64,
    /// Memory used, MiB.
    pub memory_used_mib: u64,
    /// Memory in all, MiB.
    pub memory_total_mib: u64,
}

/// Why the work exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExitReason {
    /// It ended by itself: its exit code decides.
    Finished,
    /// The scheduler told it to stop (a restart, the job ending, a replacement).
    Stopped,
    /// A preemption notice for this VM: SIGTERM was forwarded to it.
    Preempted,
    /// It could not start (no container runtime, no shell, workdir not creatable): a failure.
    Error,
}

/// Which script exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Script {
    /// `setup`.
    Setup,
    /// `run`.
    Run,
}

/// Something that happened on a rank, reported as it happens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Report {
    /// `setup` started.
    SetupStarted {
        /// The start number.
        restart: u32,
    },
    /// `run` started.
    RunStarted {
        /// The start number.
        restart: u32,
        /// Milliseconds from the agent's start to this `run` (registration, gang wait, setup).
        startup_ms: u64,
    },
    /// A script exited.
    Exited {
        /// The start number.
        restart: u32,
        /// Which script.
        script: Script,
        /// The exit code, when it exited by itself.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        /// The signal that ended it, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Why.
        reason: ExitReason,
        /// What went wrong, when the agent knows (e.g. "no container runtime on this VM").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// The last lines of output (at most [`TAIL_LINES`]).
        #[serde(default)]
        tail: Vec<String>,
    },
    /// The cloud announced it will take this VM (Azure Scheduled Events `Preempt` or `Terminate`);
    /// the agent has sent SIGTERM to the work.
    Notice {
        /// The event's id.
        event_id: String,
        /// `Preempt`, `Terminate`, …
        event_type: String,
        /// When the cloud will act (the event's `NotBefore`), as it gave it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        not_before: Option<String>,
    },
}

/// Most lines an exit report carries.
pub const TAIL_LINES: usize = 20;

/// The port `MASTER_PORT` gets unless the job's `envs` set it.
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// The variables of one rank of a started gang, before the job's `envs` are added.
#[derive(Debug, Clone, PartialEq)]
pub struct RankVars<'a> {
    /// Job id.
    pub job_id: &'a str,
    /// Attempt number.
    pub attempt: u32,
    /// This rank.
    pub rank: u32,
    /// Every rank's IP, in rank order.
    pub ips: &'a [String],
    /// GPUs per VM (the size's).
    pub gpus_per_node: u32,
    /// Region.
    pub region: &'a str,
    /// `spot` or `regular`.
    pub priority: &'a str,
    /// The job-wide start number.
    pub restart: u32,
}

impl RankVars<'_> {
    /// The variables, with the job's `envs` added where they do not name a `SPILLWAY_` variable
    /// (validation refuses those; this keeps the rule even for specs stored before it).
    pub fn env(&self, user: &BTreeMap<String, String>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for (k, v) in user {
            if !k.to_ascii_uppercase().starts_with(crate::model::RESERVED_ENV_PREFIX) {
                env.insert(k.clone(), v.clone());
            }
        }
        env.entry("MASTER_PORT".into()).or_insert_with(|| DEFAULT_MASTER_PORT.to_string());
        env.insert("MASTER_ADDR".into(), self.ips.first().cloned().unwrap_or_default());
        let ours = [
            ("SPILLWAY_JOB_ID", self.job_id.to_string()),
            ("SPILLWAY_ATTEMPT", self.attempt.to_string()),
            ("SPILLWAY_NODE_RANK", self.rank.to_string()),
            ("SPILLWAY_NUM_NODES", self.ips.len().to_string()),
            ("SPILLWAY_NODE_IPS", self.ips.join("\n")),
            ("SPILLWAY_NUM_GPUS_PER_NODE", self.gpus_per_node.to_string()),
            ("SPILLWAY_REGION", self.region.to_string()),
            ("SPILLWAY_PRIORITY", self.priority.to_string()),
            ("SPILLWAY_RESTART", self.restart.to_string()),
        ];
        for (k, v) in ours {
            env.insert(k.to_string(), v);
        }
        env
    }
}

/// What a dependant's ranks are told of one of its pipeline dependencies.
#[derive(Debug, Clone, PartialEq)]
pub struct DependencyVars<'a> {
    /// Its name within the pipeline.
    pub name: &'a str,
    /// The region its last attempt that ran ran in (where its output lies).
    pub region: Option<&'a str>,
    /// The `outputs` it declared.
    pub outputs: &'a BTreeMap<String, String>,
}

/// The variables a dependant's ranks get of its dependencies: `SPILLWAY_DEPS` (their names, one
/// a line), and for each `SPILLWAY_DEP_<NAME>_REGION` (where it last ran) and
/// `SPILLWAY_DEP_<NAME>_OUTPUT_<KEY>` for each of its `outputs`.
pub fn dependency_env(deps: &[DependencyVars<'_>]) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    if deps.is_empty() {
        return env;
    }
    env.insert("SPILLWAY_DEPS".to_string(), deps.iter().map(|d| d.name).collect::<Vec<_>>().join("\n"));
    for d in deps {
        let name = crate::model::env_name_part(d.name);
        if let Some(region) = d.region {
            env.insert(format!("SPILLWAY_DEP_{name}_REGION"), region.to_string());
        }
        for (key, value) in d.outputs {
            env.insert(format!("SPILLWAY_DEP_{name}_OUTPUT_{}", crate::model::env_name_part(key)), value.clone());
        }
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dependants_variables_name_each_dependency_its_region_and_outputs() {
        let outputs: BTreeMap<String, String> = [("model".to_string(), "az://m/7".to_string())].into();
        let none = BTreeMap::new();
        let env = dependency_env(&[
            DependencyVars { name: "pre-process", region: Some("westus3"), outputs: &outputs },
            DependencyVars { name: "never_ran", region: None, outputs: &none },
        ]);
        assert_eq!(env["SPILLWAY_DEPS"], "pre-process\nnever_ran");
        assert_eq!(env["SPILLWAY_DEP_PRE_PROCESS_REGION"], "westus3");
        assert_eq!(env["SPILLWAY_DEP_PRE_PROCESS_OUTPUT_MODEL"], "az://m/7");
        assert!(!env.contains_key("SPILLWAY_DEP_NEVER_RAN_REGION"));
        assert!(dependency_env(&[]).is_empty());
    }

    #[test]
    fn rank_variables_win_over_user_envs_and_master_port_defaults() {
        let ips = vec!["10.0.0.4".to_string(), "10.0.0.5".to_string()];
        let vars = RankVars {
            job_id: "j-1",
            attempt: 2,
            rank: 1,
            ips: &ips,
            gpus_per_node: 8,
            region: "eastus",
            priority: "spot",
            restart: 3,
        };
        let user: BTreeMap<String, String> = [("SPILLWAY_NODE_RANK", "9"), ("A", "1"), ("MASTER_PORT", "1234")]
            .map(|(k, v)| (k.into(), v.into()))
            .into();
        let env = vars.env(&user);
        assert_eq!(env["SPILLWAY_NODE_RANK"], "1");
        assert_eq!(env["SPILLWAY_NODE_IPS"], "10.0.0.4\n10.0.0.5");
        assert_eq!(env["SPILLWAY_NUM_NODES"], "2");
        assert_eq!(env["MASTER_ADDR"], "10.0.0.4");
        assert_eq!(env["MASTER_PORT"], "1234", "a user may pick the rendezvous port");
        assert_eq!(env["A"], "1");
        assert_eq!(env["SPILLWAY_RESTART"], "3");
        let env = vars.env(&BTreeMap::new());
        assert_eq!(env["MASTER_PORT"], "29500");
    }

    #[test]
    fn reports_and_actions_have_a_readable_wire_form() {
        let r = Report::Exited {
            restart: 0,
            script: Script::Run,
            code: Some(3),
            signal: None,
            reason: ExitReason::Finished,
            message: None,
            tail: vec!["boom".into()],
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["kind"], "exited");
        assert_eq!(v["reason"], "finished");
        assert_eq!(
            serde_json::to_value(Action::Run { restart: 2 }).unwrap(),
            serde_json::json!({"action": "run", "restart": 2})
        );
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }
}
