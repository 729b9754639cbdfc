//! `spillway agent`: the node agent (see the `agent` crate). Reads its settings from `--config`
//! (the JSON file cloud-init writes, `/etc/spillway/agent.json` on Azure VMs), with flags and
//! `SPILLWAY_AGENT_*` variables over it; runs until its attempt ends or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use scheduler::agents::AgentSettings;

/// Arguments of `spillway agent`.
#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Settings file (JSON).
    #[arg(long, env = "SPILLWAY_AGENT_CONFIG")]
    pub config: Option<PathBuf>,
    /// The scheduler's URL as this VM reaches it.
    #[arg(long, env = "SPILLWAY_AGENT_SCHEDULER_URL")]
    pub scheduler_url: Option<String>,
    /// The job.
    #[arg(long, env = "SPILLWAY_AGENT_JOB")]
    pub job: Option<String>,
    /// The attempt.
    #[arg(long, env = "SPILLWAY_AGENT_ATTEMPT")]
    pub attempt: Option<u32>,
    /// A file holding the attempt's credential (or SPILLWAY_AGENT_CREDENTIAL; never a flag: the
    /// command line is visible to every user of the VM).
    #[arg(long)]
    pub credential_file: Option<PathBuf>,
    /// This VM's name [default: the instance metadata service's, else the host name].
    #[arg(long, env = "SPILLWAY_AGENT_VM_NAME")]
    pub vm_name: Option<String>,
    /// This VM's private IP [default: the instance metadata service's, else the route to the scheduler].
    #[arg(long, env = "SPILLWAY_AGENT_PRIVATE_IP")]
    pub private_ip: Option<String>,
    /// The instance metadata service [default: http://169.254.169.254].
    #[arg(long, env = "SPILLWAY_AGENT_IMDS_ENDPOINT")]
    pub imds_endpoint: Option<String>,
    /// Where the work runs [default: /var/lib/spillway/work].
    #[arg(long, env = "SPILLWAY_AGENT_WORK_DIR")]
    pub work_dir: Option<PathBuf>,
    /// Parent of SPILLWAY_CHECKPOINT_DIR (`<root>/<job id>`) [default: /var/lib/spillway/checkpoints].
    #[arg(long, env = "SPILLWAY_AGENT_CHECKPOINT_ROOT")]
    pub checkpoint_root: Option<PathBuf>,
    /// Do not poll Scheduled Events.
    #[arg(long)]
    pub no_scheduled_events: bool,
    /// The nvidia-smi program [default: nvidia-smi].
    #[arg(long, env = "SPILLWAY_AGENT_NVIDIA_SMI")]
    pub nvidia_smi: Option<String>,
    /// Seconds between SIGTERM and SIGKILL when the work must stop [default: 25].
    #[arg(long)]
    pub stop_grace_secs: Option<u64>,
}

fn settings(args: AgentArgs) -> Result<AgentSettings, String> {
    let mut s: Option<AgentSettings> = match &args.config {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            Some(serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?)
        }
        None => None,
    };
    let credential = match (&args.credential_file, std::env::var("SPILLWAY_AGENT_CREDENTIAL").ok()) {
        (Some(f), _) => Some(
            std::fs::read_to_string(f)
                .map_err(|e| format!("cannot read the credential file {}: {e}", f.display()))?
                .trim()
                .to_string(),
        ),
        (None, c) => c.map(|c| c.trim().to_string()),
    };
    if s.is_none() {
        let missing: Vec<&str> = [
            ("--scheduler-url", args.scheduler_url.is_none()),
            ("--job", args.job.is_none()),
            ("--attempt", args.attempt.is_none()),
            ("--credential-file or SPILLWAY_AGENT_CREDENTIAL", credential.is_none()),
        ]
        .into_iter()
        .filter_map(|(name, absent)| absent.then_some(name))
        .collect();
        if !missing.is_empty() {
            return Err(format!("without --config, give {}", missing.join(", ")));
        }
        s = Some(AgentSettings::new(
            args.scheduler_url.as_deref().unwrap_or_default(),
            args.job.as_deref().unwrap_or_default(),
            args.attempt.unwrap_or_default(),
            credential.clone().unwrap_or_default(),
        ));
    }
    let mut s = s.expect("set above");
    if let Some(v) = args.scheduler_url {
        s.scheduler_url = v.trim_end_matches('/').to_string();
    }
    if let Some(v) = args.job {
        s.job_id = v;
    }
    if let Some(v) = args.attempt {
        s.attempt = v;
    }
    if let Some(v) = credential {
        s.credential = v;
    }
    s.vm_name = args.vm_name.or(s.vm_name);
    s.private_ip = args.private_ip.or(s.private_ip);
    if let Some(v) = args.imds_endpoint {
        s.imds_endpoint = v;
    }
    if let Some(v) = args.work_dir {
        s.work_dir = v;
    }
    if let Some(v) = args.checkpoint_root {
        s.checkpoint_root = v;
    }
    if args.no_scheduled_events {
        s.scheduled_events = false;
    }
    if let Some(v) = args.nvidia_smi {
        s.nvidia_smi = v;
    }
    if let Some(v) = args.stop_grace_secs {
        s.stop_grace_secs = v;
    }
    if !(s.scheduler_url.starts_with("http://") || s.scheduler_url.starts_with("https://")) {
        return Err(format!("scheduler_url {:?} must start with http:// or https://", s.scheduler_url));
    }
    if s.credential.is_empty() {
        return Err("the credential is empty".into());
    }
    Ok(s)
}

/// Runs the agent; exit 0 when its attempt ended or it was told to stop, 1 on an error.
pub fn run(args: AgentArgs) -> ExitCode {
    let settings = match settings(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SPILLWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let outcome = runtime.block_on(async move {
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            super::serve::wait_for_signal().await;
            let _ = stop_tx.send(true);
        });
        agent::run(settings, stop_rx).await
    });
    match outcome {
        Ok(finish) => {
            tracing::info!(?finish, "agent done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
