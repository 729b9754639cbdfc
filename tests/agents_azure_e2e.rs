//! End to end on the Azure path: `spillway serve --cloud azure` against `spillway emulate-arm`,
//! which boots each VM's agent from the fleet's cloud-init `customData` (as an Azure VM does) and
//! serves it Scheduled Events. The agents are the emulator's processes, so they outlive a
//! scheduler restart, as agents on Azure VMs do.

mod e2e_support;

use std::time::{Duration, Instant};

use e2e_support::{EMULATOR_TOKEN, Emulator, FAST_SCENARIO, Server, client, temp_dir};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A free loopback port (the scheduler must come back on the address its agents were given).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn detail(url: &str, admin: &str, id: &str) -> Value {
    client().get(format!("{url}/v1/jobs/{id}")).bearer_auth(admin).send().await.unwrap().json().await.unwrap()
}

async fn logs(url: &str, admin: &str, id: &str) -> Vec<String> {
    let page: Value =
        client().get(format!("{url}/v1/jobs/{id}/logs")).bearer_auth(admin).send().await.unwrap().json().await.unwrap();
    page["lines"].as_array().unwrap().iter().map(|l| l["text"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_on_azure_vms_outlive_a_scheduler_restart_and_no_acknowledged_line_is_lost() {
    let dir = temp_dir("agents-azure-restart");
    let data = dir.join("data");
    let vm_dir = dir.join("vms");
    let emu = Emulator::start(&dir, FAST_SCENARIO, &["--vm-dir", vm_dir.to_str().unwrap()]);
    let config = emu.azure_config(&dir, "");
    let listen = format!("127.0.0.1:{}", free_port());
    let args = ["--cloud", "azure", "--config", config.to_str().unwrap(), "--listen", listen.as_str()];
    let mut server = Server::start(&dir, &data, 0, &args, &[]);
    let (url, admin) = (server.url.clone(), server.admin.clone());
    let spec = json!({
        "name": "survivor", "kind": "training", "gpus": 2, "sizes": ["Standard_NC4as_T4_v3"], "spot": "never",
        "run": "for i in $(seq 1 40); do echo \"rank $SPILLWAY_NODE_RANK line $i\"; sleep 0.1; done"
    });
    let resp = client().post(format!("{url}/v1/jobs")).bearer_auth(&admin).json(&spec).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let id = resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string();
    // Under way on both VMs the emulator booted from customData.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines = logs(&url, &admin, &id).await;
        if lines.iter().any(|l| l == "rank 0 line 5") && lines.iter().any(|l| l == "rank 1 line 5") {
            break;
        }
        assert!(Instant::now() < deadline, "the work did not start: {lines:?}\n{}", server.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let vms: Value = client().get(format!("{}/_emulator/vms", emu.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(vms.as_array().unwrap().len(), 2, "{vms:#}");
    server.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let server = Server::start(&dir, &data, 1, &args, &[]);
    let deadline = Instant::now() + Duration::from_secs(90);
    let d = loop {
        let d = detail(&server.url, &server.admin, &id).await;
        if d["job"]["state"].as_str().is_some_and(|s| !["pending", "provisioning", "running", "migrating"].contains(&s))
        {
            break d;
        }
        assert!(Instant::now() < deadline, "the job did not end after the restart: {d:#}\n{}", server.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(d["job"]["state"], "succeeded", "{d:#}");
    assert_eq!(d["job"]["attempts"], 1, "the same VMs carried on: {d:#}");
    let lines = logs(&server.url, &server.admin, &id).await;
    for rank in 0..2 {
        let mine: Vec<&String> = lines.iter().filter(|l| l.starts_with(&format!("rank {rank} line "))).collect();
        let want: Vec<String> = (1..=40).map(|i| format!("rank {rank} line {i}")).collect();
        assert_eq!(mine, want.iter().collect::<Vec<_>>(), "every line once, in order, across the restart");
    }
    let logs_text =
        format!("{}{}", server.logs(), std::fs::read_to_string(dir.join("serve-0.err")).unwrap_or_default());
    assert!(!logs_text.contains(&format!("spwa.{id}.")), "no agent credential in the scheduler's logs");
    assert!(!logs_text.contains(EMULATOR_TOKEN), "no secret in the scheduler's logs");
}
