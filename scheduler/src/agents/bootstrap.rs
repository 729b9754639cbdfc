//! How a VM comes to run `spillway agent`: the settings file the agent reads ([`AgentSettings`]),
//! and the cloud-init `customData` that writes it and starts the agent ([`AgentBootstrap`]).
//!
//! The `customData` is a `#cloud-config` document written as JSON (JSON is YAML, so cloud-init
//! reads it, and our own emulator reads it back without a YAML parser). It writes
//! `/etc/spillway/agent.json` (mode 0600: it holds the attempt's credential) and a systemd unit,
//! optionally downloads the binary (when the image does not have it), and starts the unit. The
//! user's script is not in it: the agent fetches `run` with its credential once its gang is up.

use std::path::PathBuf;

use base64::Engine;
use serde::{Deserialize, Serialize};

use super::credential::AgentKeys;

/// Where the settings file lands on a VM.
pub const SETTINGS_PATH: &str = "/etc/spillway/agent.json";

/// The instance metadata service every Azure VM reaches.
pub const AZURE_IMDS: &str = "http://169.254.169.254";

/// What `spillway agent` runs with.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSettings {
    /// The scheduler's URL as the VM reaches it (`https://spillway.internal:7878`).
    pub scheduler_url: String,
    /// The job.
    pub job_id: String,
    /// The attempt.
    pub attempt: u32,
    /// The attempt's credential (never logged).
    pub credential: String,
    /// The VM's name; default: the instance metadata service's, else the host name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_name: Option<String>,
    /// The VM's private IP; default: the instance metadata service's, else the address the VM
    /// reaches the scheduler from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_ip: Option<String>,
    /// The instance metadata service (Scheduled Events, the VM's name and address).
    #[serde(default = "default_imds")]
    pub imds_endpoint: String,
    /// Poll Scheduled Events for preemption notices.
    #[serde(default = "yes")]
    pub scheduled_events: bool,
    /// Where the work runs (a relative `workdir` is under it).
    #[serde(default = "default_work_dir")]
    pub work_dir: PathBuf,
    /// Directory that outlives attempts: `SPILLWAY_CHECKPOINT_DIR` is `<checkpoint_root>/<job id>`.
    #[serde(default = "default_checkpoint_root")]
    pub checkpoint_root: PathBuf,
    /// PEM certificate(s) to trust for `scheduler_url`, besides the system's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<String>,
    /// The `nvidia-smi` program (its absence means: no GPU telemetry, reported as absent).
    #[serde(default = "default_nvidia_smi")]
    pub nvidia_smi: String,
    /// Seconds between SIGTERM and SIGKILL when the work must stop.
    #[serde(default = "default_stop_grace")]
    pub stop_grace_secs: u64,
}

fn default_imds() -> String {
    AZURE_IMDS.to_string()
}
fn yes() -> bool {
    true
}
fn default_work_dir() -> PathBuf {
    PathBuf::from("/var/lib/spillway/work")
}
fn default_checkpoint_root() -> PathBuf {
    PathBuf::from("/var/lib/spillway/checkpoints")
}
fn default_nvidia_smi() -> String {
    "nvidia-smi".to_string()
}
fn default_stop_grace() -> u64 {
    25
}

impl std::fmt::Debug for AgentSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSettings")
            .field("scheduler_url", &self.scheduler_url)
            .field("job_id", &self.job_id)
            .field("attempt", &self.attempt)
            .field("credential", &"<redacted>")
            .field("vm_name", &self.vm_name)
            .field("imds_endpoint", &self.imds_endpoint)
            .field("work_dir", &self.work_dir)
            .field("checkpoint_root", &self.checkpoint_root)
            .finish_non_exhaustive()
    }
}

impl AgentSettings {
    /// Settings with the defaults for everything a VM can find out by itself.
    pub fn new(scheduler_url: &str, job_id: &str, attempt: u32, credential: String) -> AgentSettings {
        AgentSettings {
            scheduler_url: scheduler_url.trim_end_matches('/').to_string(),
            job_id: job_id.to_string(),
            attempt,
            credential,
            vm_name: None,
            private_ip: None,
            imds_endpoint: default_imds(),
            scheduled_events: true,
            work_dir: default_work_dir(),
            checkpoint_root: default_checkpoint_root(),
            ca_cert: None,
            nvidia_smi: default_nvidia_smi(),
            stop_grace_secs: default_stop_grace(),
        }
    }

    /// `SPILLWAY_CHECKPOINT_DIR` on this VM.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.checkpoint_root.join(&self.job_id)
    }
}

/// What every fleet's VMs are given so that they run the agent: `[agent]` in the server's config.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentBootstrap {
    /// The scheduler's URL as VMs reach it.
    pub scheduler_url: String,
    /// The key attempt credentials are derived with.
    pub keys: AgentKeys,
    /// `checkpoint_root` on the VMs: a directory the VM profile mounts from storage (Azure Files,
    /// a blob container through blobfuse2), so that checkpoints outlive VMs and regions.
    pub checkpoint_root: String,
    /// Where the binary is on the VM.
    pub binary_path: String,
    /// When set, cloud-init downloads the binary from here if the image lacks it.
    pub binary_url: Option<String>,
    /// The download's SHA-256 (hex), checked before it is used.
    pub binary_sha256: Option<String>,
    /// PEM certificate(s) the agents trust for `scheduler_url`.
    pub ca_cert: Option<String>,
}

impl AgentBootstrap {
    /// Settings with defaults for the rest.
    pub fn new(scheduler_url: &str, keys: AgentKeys) -> AgentBootstrap {
        AgentBootstrap {
            scheduler_url: scheduler_url.trim_end_matches('/').to_string(),
            keys,
            checkpoint_root: default_checkpoint_root().display().to_string(),
            binary_path: "/usr/local/bin/spillway".into(),
            binary_url: None,
            binary_sha256: None,
            ca_cert: None,
        }
    }

    /// The agent settings of one attempt's VMs.
    pub fn settings(&self, job_id: &str, attempt: u32) -> AgentSettings {
        let mut s = AgentSettings::new(&self.scheduler_url, job_id, attempt, self.keys.mint(job_id, attempt));
        s.checkpoint_root = PathBuf::from(&self.checkpoint_root);
        s.ca_cert = self.ca_cert.clone();
        s
    }

    /// The `customData` (base64, as the VM profile's `osProfile.customData` takes it) of one
    /// attempt's VMs.
    pub fn custom_data(&self, job_id: &str, attempt: u32) -> String {
        let settings = serde_json::to_vec_pretty(&self.settings(job_id, attempt)).expect("settings serialise");
        let b64 = base64::engine::general_purpose::STANDARD;
        let unit = format!(
            "[Unit]\nDescription=spillway node agent\nAfter=network-online.target\nWants=network-online.target\n\n\
             [Service]\nExecStart={} agent --config {SETTINGS_PATH}\nRestart=on-failure\nRestartSec=5\n\
             KillMode=control-group\nTimeoutStopSec=60\n\n[Install]\nWantedBy=multi-user.target\n",
            self.binary_path
        );
        let mut runcmd = Vec::new();
        if let Some(url) = &self.binary_url {
            let path = &self.binary_path;
            let check = match &self.binary_sha256 {
                Some(sum) => format!(" && echo {} | sha256sum -c -", shell_quote(&format!("{sum}  {path}.download"))),
                None => String::new(),
            };
            runcmd.push(serde_json::json!([
                "sh",
                "-c",
                format!(
                    "set -e; if [ ! -x {p} ]; then curl -fsSL --retry 10 --retry-connrefused -o {p}.download {u}{check} \
                     && chmod 0755 {p}.download && mv {p}.download {p}; fi",
                    p = shell_quote(path),
                    u = shell_quote(url),
                )
            ]));
        }
        runcmd.push(serde_json::json!(["systemctl", "daemon-reload"]));
        runcmd.push(serde_json::json!(["systemctl", "enable", "--now", "spillway-agent.service"]));
        let config = serde_json::json!({
            "write_files": [
                {"path": SETTINGS_PATH, "permissions": "0600", "owner": "root:root", "encoding": "b64",
                 "content": b64.encode(settings)},
                {"path": "/etc/systemd/system/spillway-agent.service", "permissions": "0644", "content": unit},
            ],
            "runcmd": runcmd,
        });
        b64.encode(format!("#cloud-config\n{config}\n"))
    }
}

/// Reads the agent settings back out of a `customData` this module wrote (what a VM's cloud-init
/// does; the ARM emulator uses it to boot its simulated VMs). `None` for any other `customData`.
pub fn settings_from_custom_data(custom_data: &str) -> Option<AgentSettings> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let text = String::from_utf8(b64.decode(custom_data.trim()).ok()?).ok()?;
    let body = text.strip_prefix("#cloud-config\n")?;
    let config: serde_json::Value = serde_json::from_str(body).ok()?;
    let file = config["write_files"].as_array()?.iter().find(|f| f["path"] == SETTINGS_PATH)?;
    let content = b64.decode(file["content"].as_str()?).ok()?;
    serde_json::from_slice(&content).ok()
}

/// Single-quotes a word for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_data_carries_the_attempts_settings_and_reads_back() {
        let mut b = AgentBootstrap::new("https://spillway.internal:7878/", AgentKeys::from_bytes([1; 32]));
        b.binary_url = Some("https://example.org/spillway'x".into());
        b.binary_sha256 = Some("ab".repeat(32));
        b.checkpoint_root = "/mnt/ckpt".into();
        let data = b.custom_data("j-1", 2);
        let text = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(&data).unwrap()).unwrap();
        assert!(text.starts_with("#cloud-config\n{"), "{text}");
        assert!(text.contains("systemctl"), "{text}");
        let config: serde_json::Value = serde_json::from_str(text.strip_prefix("#cloud-config\n").unwrap()).unwrap();
        let install = config["runcmd"][0][2].as_str().unwrap();
        assert!(install.contains(r"'https://example.org/spillway'\''x'"), "the URL is quoted for sh: {install}");
        assert!(!text.contains("spwa."), "the credential is inside the base64 file content only");
        let s = settings_from_custom_data(&data).unwrap();
        assert_eq!(s.job_id, "j-1");
        assert_eq!(s.attempt, 2);
        assert_eq!(s.scheduler_url, "https://spillway.internal:7878");
        assert_eq!(s.checkpoint_dir(), PathBuf::from("/mnt/ckpt/j-1"));
        assert_eq!(b.keys.verify(&s.credential).unwrap().attempt, 2);
        assert!(!format!("{s:?}").contains("spwa."), "Debug hides the credential");
        assert_eq!(settings_from_custom_data("not base64"), None);
    }
}
