//! Runs one script (`setup` or `run`) as its own process group, so that stopping the work stops
//! every process it started (a `torchrun` and its workers, a shell pipeline), and reads its two
//! outputs into the log buffer line by line.
//!
//! With an `image`, `run` goes through the VM's container runtime (docker, else podman) with the
//! GPUs, the host network, the workdir and the checkpoint directory passed through; without a
//! runtime the script does not start, and the caller reports why (a clear error, not a hang).

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use scheduler::agents::protocol::LogStream;
use tokio::io::AsyncReadExt;

use crate::output::{LineSplitter, Tail};
use crate::shipper::LogBuffer;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScriptSpec<'a> {
    /// The shell script.
    pub script: &'a str,
    /// Variables added to the agent's environment.
    pub env: &'a BTreeMap<String, String>,
    /// Where it starts.
    pub workdir: &'a Path,
    /// Run inside this image (through a container runtime).
    pub image: Option<&'a str>,
    /// Mounted into the container at the same path.
    pub checkpoint_dir: &'a Path,
    /// A name for the container.
    pub name: String,
    /// Where to look for the container runtime (`None`: the `PATH`).
    pub search_path: Option<&'a std::ffi::OsStr>,
}

/// How a script ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    /// Exit code, when it exited.
    pub code: Option<i32>,
    /// Signal, when one ended it.
    pub signal: Option<i32>,
}

impl From<ExitStatus> for Ended {
    fn from(s: ExitStatus) -> Ended {
        Ended { code: s.code(), signal: s.signal() }
    }
}

/// A running script.
pub struct Running {
    child: tokio::process::Child,
    pgid: i32,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

/// The first program of `names` found in `path` (a `PATH`-style list).
pub fn find_program(path: &std::ffi::OsStr, names: &[&str]) -> Option<PathBuf> {
    for dir in std::env::split_paths(path) {
        for name in names {
            let candidate = dir.join(name);
            if let Ok(meta) = std::fs::metadata(&candidate) {
                use std::os::unix::fs::PermissionsExt;
                if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                    return Some(candidate);
                }
            }
        }
    }
    None
}

/// Starts a script; `Err` says why it could not start.
pub fn spawn(
    spec: &ScriptSpec<'_>,
    restart: u32,
    buffer: Arc<LogBuffer>,
    tail: Arc<Mutex<Tail>>,
    max_line: usize,
) -> Result<Running, String> {
    std::fs::create_dir_all(spec.workdir)
        .map_err(|e| format!("cannot create the work directory {}: {e}", spec.workdir.display()))?;
    let mut cmd = match spec.image {
        None => {
            let mut c = tokio::process::Command::new("sh");
            c.arg("-c").arg(spec.script);
            c.envs(spec.env);
            c
        }
        Some(image) => {
            let path =
                spec.search_path.map(|p| p.to_os_string()).or_else(|| std::env::var_os("PATH")).unwrap_or_default();
            let runtime = find_program(&path, &["docker", "podman"]).ok_or_else(|| {
                format!("image {image} needs a container runtime (docker or podman) on the VM, and none is on the PATH")
            })?;
            let mut c = tokio::process::Command::new(runtime);
            let wd = spec.workdir.display().to_string();
            let ck = spec.checkpoint_dir.display().to_string();
            c.args(["run", "--rm", "--name", &spec.name, "--gpus", "all", "--network", "host", "--ipc", "host"]);
            c.args(["-v", &format!("{wd}:{wd}"), "-w", &wd, "-v", &format!("{ck}:{ck}")]);
            for (k, v) in spec.env {
                // Passed by name: the values stay out of the runtime's command line.
                c.args(["-e", k]);
                c.env(k, v);
            }
            c.args([image, "sh", "-c", spec.script]);
            c
        }
    };
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SPILLWAY_AGENT_") {
            cmd.env_remove(&k);
        }
    }
    // SAFETY: prctl is async-signal-safe. Should the agent die, its script dies with it (systemd does
    // the same for the whole unit on a VM; a simulated VM has no systemd).
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.current_dir(spec.workdir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start the script: {e}"))?;
    let pgid = child.id().map(|p| p as i32).ok_or("the script exited before it could be watched")?;
    let mut readers = Vec::new();
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(read_lines(out, LogStream::Stdout, restart, buffer.clone(), tail.clone(), max_line)));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(read_lines(err, LogStream::Stderr, restart, buffer, tail, max_line)));
    }
    Ok(Running { child, pgid, readers })
}

async fn read_lines<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    stream: LogStream,
    restart: u32,
    buffer: Arc<LogBuffer>,
    tail: Arc<Mutex<Tail>>,
    max_line: usize,
) {
    let mut split = LineSplitter::new(max_line);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for line in split.push(&chunk[..n]) {
            tail.lock().unwrap_or_else(|p| p.into_inner()).push(&line);
            buffer.push(restart, stream, line);
        }
    }
    if let Some(line) = split.finish() {
        tail.lock().unwrap_or_else(|p| p.into_inner()).push(&line);
        buffer.push(restart, stream, line);
    }
}

impl Running {
    /// Sends `signal` to every process of the script's group.
    pub fn signal(&self, signal: i32) {
        // SAFETY: killpg only sends a signal; a group that is gone makes it fail with ESRCH.
        unsafe {
            libc::killpg(self.pgid, signal);
        }
    }

    /// Waits for the script to exit, then (briefly) for its outputs to be read to the end.
    pub async fn wait(&mut self) -> Ended {
        let status = self.child.wait().await;
        self.finish_output().await;
        match status {
            Ok(s) => s.into(),
            Err(_) => Ended { code: None, signal: None },
        }
    }

    /// Processes the script started in the background may hold its outputs open: give the readers
    /// a moment, then stop reading.
    async fn finish_output(&mut self) {
        for r in &mut self.readers {
            if tokio::time::timeout(Duration::from_secs(2), &mut *r).await.is_err() {
                r.abort();
            }
        }
        self.readers.clear();
    }

    /// SIGTERM to the group, then SIGKILL after `grace` if it has not exited.
    pub async fn stop(&mut self, grace: Duration) -> Ended {
        self.signal(libc::SIGTERM);
        self.wait_or_kill(grace).await
    }

    /// Waits up to `grace` (the signal has been sent), then SIGKILLs the group.
    pub async fn wait_or_kill(&mut self, grace: Duration) -> Ended {
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => {
                // Leftovers of the group (background jobs) go too.
                self.signal(libc::SIGKILL);
                self.finish_output().await;
                status.map(Ended::from).unwrap_or(Ended { code: None, signal: None })
            }
            Err(_) => {
                self.signal(libc::SIGKILL);
                self.wait().await
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec<'a>(script: &'a str, env: &'a BTreeMap<String, String>, dir: &'a Path) -> ScriptSpec<'a> {
        ScriptSpec { script, env, workdir: dir, image: None, checkpoint_dir: dir, name: "t".into(), search_path: None }
    }

    #[tokio::test]
    async fn a_script_runs_with_its_variables_and_its_output_is_read() {
        let dir = std::env::temp_dir().join(format!("spillway-agent-proc-{}", std::process::id()));
        let env: BTreeMap<String, String> = [("SPILLWAY_NODE_RANK".to_string(), "3".to_string())].into();
        let buffer = Arc::new(LogBuffer::default());
        let tail = Arc::new(Mutex::new(Tail::default()));
        let mut r = spawn(
            &spec("echo rank=$SPILLWAY_NODE_RANK; echo oops >&2; exit 7", &env, &dir),
            0,
            buffer,
            tail.clone(),
            1024,
        )
        .unwrap();
        let ended = r.wait().await;
        assert_eq!(ended, Ended { code: Some(7), signal: None });
        let mut lines = tail.lock().unwrap().take();
        lines.sort();
        assert_eq!(lines, vec!["oops", "rank=3"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn stopping_reaches_every_process_of_the_group() {
        let dir = std::env::temp_dir().join(format!("spillway-agent-stop-{}", std::process::id()));
        let env = BTreeMap::new();
        let buffer = Arc::new(LogBuffer::default());
        let tail = Arc::new(Mutex::new(Tail::default()));
        // The child traps SIGTERM and says so; a grandchild sleeps.
        let script = "trap 'echo got-term; exit 143' TERM; sleep 30 & wait";
        let mut r = spawn(&spec(script, &env, &dir), 0, buffer, tail.clone(), 1024).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let t0 = std::time::Instant::now();
        let ended = r.stop(Duration::from_secs(5)).await;
        assert!(t0.elapsed() < Duration::from_secs(4), "the sleeping grandchild did not hold the stop");
        assert_eq!(ended.code, Some(143));
        assert_eq!(tail.lock().unwrap().take(), vec!["got-term"]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn an_image_without_a_container_runtime_does_not_start() {
        let dir = std::env::temp_dir().join(format!("spillway-agent-img-{}", std::process::id()));
        let env = BTreeMap::new();
        let nowhere = std::ffi::OsStr::new("/nonexistent");
        let s = ScriptSpec { image: Some("alpine"), search_path: Some(nowhere), ..spec("true", &env, &dir) };
        let r = spawn(&s, 0, Arc::new(LogBuffer::default()), Arc::new(Mutex::new(Tail::default())), 1024);
        let err = r.err().expect("no runtime, no start");
        assert!(err.contains("container runtime"), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
