//! Pipelines end to end, against the built binary and the simulated cloud `spillway serve` runs by
//! default (virtual time at 3600×; each job's `run` is run by real `spillway agent` processes):
//! stages run in dependency order, a dependant waits ("waiting for …") and runs where its
//! dependency's output lies, told where its dependencies ran and what they left
//! (`SPILLWAY_DEP_<NAME>_…`), a failed stage fails its dependants, `on_dependency_failure = "run"`
//! runs anyway (paying egress, shown, when it may not run where the data is), cancel ends running
//! fleets, bad pipelines are 4xx naming the field, tenants see only their own.

mod e2e_support;

use std::path::Path;

use e2e_support::{Server, admin_get, cli, client, events_of, job_detail, temp_dir, text, wait_state};
use reqwest::StatusCode;
use serde_json::{Value, json};

fn start(dir: &Path) -> Server {
    Server::start(dir, &dir.join("data"), 0, &["--speedup", "3600"], &[])
}

/// A one-GPU stage on T4 VMs, which the bundled scenario has in every region (cheapest in eastus).
fn stage(name: &str, after: &[&str], run: &str) -> Value {
    json!({"name": name, "kind": "batch", "gpus": 1, "sizes": ["Standard_NC4as_T4_v3"], "spot": "never",
           "run": run, "depends_on": after})
}

async fn post(s: &Server, token: &str, body: &Value) -> (StatusCode, Value) {
    let r = client().post(format!("{}/v1/pipelines", s.url)).bearer_auth(token).json(body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap())
}

async fn wait_pipeline(s: &Server, id: &str, secs: u64) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let p = admin_get(s, &format!("/v1/pipelines/{id}")).await;
        if matches!(p["state"].as_str(), Some("succeeded" | "failed" | "cancelled")) {
            return p;
        }
        assert!(std::time::Instant::now() < deadline, "pipeline {id} did not end in {secs} s: {p:#}\n{}", s.logs());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

fn job_id(p: &Value, name: &str) -> String {
    p["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).unwrap()["id"].as_str().unwrap().to_string()
}

fn region_of(d: &Value) -> String {
    let ran: Vec<&Value> =
        d["attempts"].as_array().unwrap().iter().filter(|a| a["running_since_ms"].is_i64()).collect();
    ran.last().map(|a| a["region"].as_str().unwrap().to_string()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn stages_run_in_order_near_their_data_and_a_failed_stage_fails_its_dependants() {
    let dir = temp_dir("pipelines-chain");
    let s = start(&dir);
    // prep must run in westus3 (dearer than eastus for T4s); its 20 TB of output keep train there,
    // and train's keep eval there; eval fails; score depends on eval and fails with it; report
    // runs anyway, and may not run in westus3: it pays to move eval's 100 GB, and says so.
    let mut prep = stage("prep", &[], "echo prepared");
    prep["regions"] = json!(["westus3"]);
    prep["output_gb"] = json!(20000);
    let mut train = stage("train", &["prep"], "echo trained");
    train["output_gb"] = json!(20000);
    train["outputs"] = json!({"model": "az://models/run-1"});
    // eval is told where train ran and what it left (and fails, to show it in its last lines).
    let mut eval = stage(
        "eval",
        &["train"],
        "echo \"input $SPILLWAY_DEP_TRAIN_REGION $SPILLWAY_DEP_TRAIN_OUTPUT_MODEL from $SPILLWAY_DEPS\"; exit 3",
    );
    eval["output_gb"] = json!(100);
    let score = stage("score", &["eval"], "echo scored");
    let mut report = stage("report", &["eval"], "echo reported");
    report["on_dependency_failure"] = json!("run");
    report["deny_regions"] = json!(["westus3"]);
    // Listed out of order: the graph, not the list, decides.
    let body = json!({"name": "chain", "tenant": "ml", "jobs": [report, score, eval, train, prep]});
    let (status, p) = post(&s, &s.admin, &body).await;
    assert_eq!(status, StatusCode::CREATED, "{p:#}");
    let id = p["id"].as_str().unwrap().to_string();
    assert_eq!(p["jobs"].as_array().unwrap().len(), 5);
    let train_id = job_id(&p, "train");
    assert_eq!(p["jobs"][3]["depends_on"], json!(["prep"]), "{p:#}");

    let done = wait_pipeline(&s, &id, 240).await;
    assert_eq!(done["state"], "failed", "{done:#}");
    let state = |name: &str| done["jobs"].as_array().unwrap().iter().find(|j| j["name"] == name).unwrap().clone();
    assert_eq!(state("prep")["state"], "succeeded", "{done:#}");
    assert_eq!(state("train")["state"], "succeeded", "{done:#}");
    assert_eq!(state("eval")["state"], "failed", "{done:#}");
    assert_eq!(state("score")["state"], "failed", "{done:#}");
    assert_eq!(state("score")["end_reason"], "dependency eval failed", "{done:#}");
    assert_eq!(state("report")["state"], "succeeded", "{done:#}");

    // In order: each stage first ran after its dependencies had ended.
    let mut details = std::collections::BTreeMap::new();
    for name in ["prep", "train", "eval", "score", "report"] {
        details.insert(name, job_detail(&s, &job_id(&done, name)).await);
    }
    let ran = |n: &str| details[n]["job"]["first_running_at_ms"].as_i64();
    let ended = |n: &str| details[n]["job"]["finished_at_ms"].as_i64().unwrap();
    for (job, dep) in [("train", "prep"), ("eval", "train"), ("report", "eval")] {
        assert!(ran(job).unwrap() >= ended(dep), "{job} ran before {dep} ended");
    }
    assert_eq!(ran("score"), None, "score never ran");
    assert_eq!(details["score"]["attempts"].as_array().unwrap().len(), 0);
    // Waiting was said, naming the dependency.
    let waits = events_of(&details["train"], "waiting");
    assert!(waits.iter().any(|m| m.contains("waiting for prep")), "{waits:?}");
    // Near the data: prep's region, though eastus is cheaper.
    assert_eq!(region_of(&details["prep"]), "westus3");
    assert_eq!(region_of(&details["train"]), "westus3", "train follows prep's 20 TB");
    assert_eq!(region_of(&details["eval"]), "westus3", "eval follows train's 20 TB");
    let failed = events_of(&details["eval"], "failed");
    assert!(failed.iter().any(|m| m.contains("input westus3 az://models/run-1 from train")), "{failed:?}");
    let placed = events_of(&details["train"], "placed");
    assert!(placed[0].contains("data in westus3"), "{placed:?}");
    // report may not run in westus3: the egress of eval's 100 GB is paid and shown.
    assert_ne!(region_of(&details["report"]), "westus3");
    let placed = events_of(&details["report"], "placed");
    assert!(placed[0].contains("100 GB of data moved from westus3: egress $2.00"), "{placed:?}");

    // The CLI: the list, and the graph with each job's state.
    let out = cli(&s, &dir, &["pipelines"]);
    assert!(out.status.success() && text(&out).contains(&id) && text(&out).contains("failed"), "{}", text(&out));
    let out = cli(&s, &dir, &["status", &id]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("dependency eval failed") && t.contains(&train_id), "{t}");
    for name in ["prep", "train", "eval", "score", "report"] {
        assert!(t.contains(name), "{t}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_ends_running_fleets_bad_pipelines_name_the_field_and_tenants_see_their_own() {
    let dir = temp_dir("pipelines-cancel");
    let s = start(&dir);
    // Bad input: 422 naming the field, nothing accepted.
    let cases = [
        (json!([stage("a", &["b"], "true"), stage("b", &["a"], "true")]), "jobs[0].depends_on", "a → b → a"),
        (json!([stage("a", &[], "true"), stage("b", &["nope"], "true")]), "jobs[1].depends_on[0]", "\"nope\""),
        (json!([stage("a", &[], "true"), stage("a", &[], "true")]), "jobs[1].name", "duplicate"),
    ];
    for (jobs, field, says) in cases {
        let (status, body) = post(&s, &s.admin, &json!({"name": "bad", "jobs": jobs})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body:#}");
        let problems = body["problems"].as_array().unwrap();
        assert!(
            problems.iter().any(|p| p["field"] == field && p["problem"].as_str().unwrap().contains(says)),
            "{field}: {body:#}"
        );
    }
    let all = admin_get(&s, "/v1/pipelines").await;
    assert_eq!(all["pipelines"].as_array().unwrap().len(), 0, "nothing accepted: {all:#}");
    let jobs = admin_get(&s, "/v1/jobs").await;
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 0, "no job accepted: {jobs:#}");

    // Tenancy: a tenant's token submits for its tenant only and sees only its pipelines.
    let r = client()
        .post(format!("{}/v1/tokens", s.url))
        .bearer_auth(&s.admin)
        .json(&json!({"role": "submitter", "tenant": "vision"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let vision = r.json::<Value>().await.unwrap()["token"].as_str().unwrap().to_string();
    let two = json!({"name": "long", "jobs": [stage("first", &[], "sleep 600"), stage("second", &["first"], "true")]});
    let (status, body) =
        post(&s, &vision, &json!({"name": "x", "tenant": "nlp", "jobs": [stage("a", &[], "true")]})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body:#}");
    assert_eq!(body["problems"][0]["field"], "tenant");
    let (status, mine) = post(&s, &vision, &two).await;
    assert_eq!(status, StatusCode::CREATED, "{mine:#}");
    assert_eq!(mine["tenant"], "vision");
    let mut theirs = two.clone();
    theirs["tenant"] = json!("nlp");
    let (status, theirs) = post(&s, &s.admin, &theirs).await;
    assert_eq!(status, StatusCode::CREATED, "{theirs:#}");
    let seen: Value = client()
        .get(format!("{}/v1/pipelines", s.url))
        .bearer_auth(&vision)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = seen["pipelines"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [mine["id"].as_str().unwrap()]);
    let other = theirs["id"].as_str().unwrap();
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let r = client()
            .request(method, format!("{}/v1/pipelines/{other}", s.url))
            .bearer_auth(&vision)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    }

    // Cancel: the running stage's fleet is deleted, the waiting one never runs.
    let id = mine["id"].as_str().unwrap().to_string();
    let first = job_id(&mine, "first");
    let second = job_id(&mine, "second");
    wait_state(&s, &first, &["running"], 60).await;
    let d = job_detail(&s, &second).await;
    assert_eq!(d["job"]["pending_reasons"], json!(["waiting for first"]), "{d:#}");
    let out = cli(&s, &dir, &["status", &second]);
    assert!(text(&out).contains("waiting for first"), "{}", text(&out));
    let r = client().delete(format!("{}/v1/pipelines/{id}", s.url)).bearer_auth(&vision).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["state"], "cancelled", "{p:#}");
    let d = wait_state(&s, &first, &["cancelled"], 5).await;
    assert!(d["job"]["end_reason"].as_str().unwrap().contains(&format!("pipeline {id} cancelled")), "{d:#}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let d = job_detail(&s, &first).await;
        if !events_of(&d, "fleet_deleted").is_empty() {
            assert!(d["attempts"].as_array().unwrap().iter().all(|a| a["state"] != "running"), "{d:#}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the fleet was not deleted: {d:#}");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(job_detail(&s, &second).await["job"]["state"], "cancelled");
    assert_eq!(job_detail(&s, &second).await["attempts"].as_array().unwrap().len(), 0);
    let r = client().delete(format!("{}/v1/pipelines/{id}", s.url)).bearer_auth(&vision).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT, "cancelling twice");

    // The list pages as GET /v1/jobs does: newest page first, `next` as the cursor, filters.
    let ids_of = |v: &Value| -> Vec<String> {
        v["pipelines"].as_array().unwrap().iter().map(|p| p["id"].as_str().unwrap().to_string()).collect()
    };
    let first = admin_get(&s, "/v1/pipelines?limit=1").await;
    assert_eq!(
        (ids_of(&first), first["total"].as_u64(), first["truncated"].as_bool()),
        (vec![other.to_string()], Some(2), Some(true)),
        "{first:#}"
    );
    let cursor = first["next"].as_str().unwrap();
    let second = admin_get(&s, &format!("/v1/pipelines?limit=1&cursor={cursor}")).await;
    assert_eq!(ids_of(&second), std::slice::from_ref(&id), "{second:#}");
    assert!(second.get("next").is_none() && second["truncated"] == false, "{second:#}");
    let cancelled = admin_get(&s, "/v1/pipelines?state=cancelled").await;
    assert_eq!((ids_of(&cancelled), cancelled["total"].as_u64()), (vec![id.clone()], Some(1)), "{cancelled:#}");
    let nlp = admin_get(&s, "/v1/pipelines?tenant=nlp").await;
    assert_eq!(ids_of(&nlp), [other.to_string()], "{nlp:#}");
    for (query, field) in
        [("state=provisioning", "state"), ("cursor=zz", "cursor"), ("limit=0", "limit"), ("page=2", "")]
    {
        let r = client().get(format!("{}/v1/pipelines?{query}", s.url)).bearer_auth(&s.admin).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{query}");
        let body: Value = r.json().await.unwrap();
        assert!(body.to_string().contains(field), "{query}: {body}");
    }
    let seen: Value = client()
        .get(format!("{}/v1/pipelines?tenant=nlp", s.url))
        .bearer_auth(&vision)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(seen["pipelines"].as_array().unwrap().len(), 0, "another tenant's are not listed: {seen:#}");

    // The CLI pages as `spillway jobs` does: --limit shows the newest and says how to see the rest;
    // --all follows the server's cursor back to the oldest, here two pipelines one a page.
    let out = cli(&s, &dir, &["pipelines", "--limit", "1"]);
    let t = text(&out);
    assert!(out.status.success() && t.contains(other) && !t.contains(&id), "{t}");
    assert!(t.contains("(1 of 2 pipelines shown, the newest; --all for every one"), "{t}");
    let out = cli(&s, &dir, &["pipelines", "--limit", "1", "--all", "--output", "json"]);
    assert!(out.status.success(), "{}", text(&out));
    let every: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ids_of(&every), [id.clone(), other.to_string()], "every pipeline, oldest first: {every:#}");
    assert_eq!(every["truncated"], false, "{every:#}");
    let out = cli(&s, &dir, &["pipelines", "--limit", "1", "--all"]);
    let t = text(&out);
    assert!(t.contains(&id) && t.contains(other) && !t.contains("shown"), "{t}");
    let out = cli(&s, &dir, &["pipelines", "--state", "cancelled", "--tenant", "vision"]);
    let t = text(&out);
    assert!(t.contains(&id) && !t.contains(other), "{t}");
}
