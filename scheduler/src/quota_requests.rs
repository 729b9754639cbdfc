//! Quota requests filed with Azure on an admin's behalf (`POST /v1/advice/requests`): each one a
//! record in the store, driven to its end in the background, and audited in the event log.
//!
//! Azure may take up to half an hour to answer a quota request, so the API does not hold the HTTP
//! request meanwhile: it writes a [`QuotaRequest`] in state `submitted` (with its
//! `quota_requested` event, in the same transaction) and answers 202. The leader's
//! [`drive_quota_requests`] task picks every `submitted` request up, reads the pool's limit,
//! records the new limit it will ask for, files it (`Microsoft.Quota` PUT) and follows it to
//! `granted` or `failed` (Azure's refusal or escalation, or a call that failed, with Azure's
//! message), writing the end and its `quota_granted` / `quota_request_failed` event together.
//!
//! **After a restart or a change of leader, a `submitted` request is resumed, not failed.** The
//! new limit is written to the record before anything is sent to Azure, and the Quota API's PUT
//! sets an absolute limit: sending it again asks for the same limit (Azure answers with the
//! request's state, or grants it again with no change), never for a second increase. A request
//! whose limit was not recorded yet was never sent, so reading the limit afresh is as if it had
//! just come in. Failing such requests instead would leave the admin to file them again by hand
//! for no gain. Only the leader drives requests (its store handle is fenced), so two servers never
//! follow the same one, and a leader deposed mid-request writes nothing more; the next resumes it.
//!
//! The three events are cluster events (no job, no tenant, like `quota_exhausted`): an unbound
//! token sees them in `GET /v1/events?kinds=quota_requested,quota_granted,quota_request_failed`,
//! each naming who filed the request, what and when.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use state::{EventDraft, Record, Store, StoreError, TableDef};
use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::cloud::azure::AzureCloud;
use crate::cloud::azure::quota::QuotaRequestState;
use crate::leader::Replica;
use crate::model::EventKind;

/// Where a quota request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RequestState {
    /// Accepted by spillway; being filed with Azure or waiting for its answer.
    Submitted,
    /// Azure granted it: the new limit is in effect.
    Granted,
    /// Azure refused it, escalated it to a support ticket, or could not be asked (see `error`).
    Failed,
}

impl RequestState {
    /// The name shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestState::Submitted => "submitted",
            RequestState::Granted => "granted",
            RequestState::Failed => "failed",
        }
    }
}

/// One quota increase filed with Azure, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaRequest {
    /// spillway's id for it (`q-…`).
    pub id: String,
    /// Region.
    pub region: String,
    /// The Quota API's resource name of the pool.
    pub resource_name: String,
    /// vCPUs asked for on top of the limit Azure reported when the request was filed.
    pub increase_vcpus: u64,
    /// The limit Azure reported before the request, vCPUs; absent until read.
    #[serde(default)]
    pub limit_before: Option<u64>,
    /// The limit asked for (`limit_before + increase_vcpus`); absent until the limit is read.
    #[serde(default)]
    pub new_limit: Option<u64>,
    /// `submitted`, then `granted` or `failed`.
    pub state: RequestState,
    /// Azure's own word for how the request ended (`Succeeded`, `Failed`, `Invalid`,
    /// `Escalated`, …), when it answered.
    #[serde(default)]
    pub azure_state: Option<String>,
    /// Why it failed: Azure's message, or the error of the call.
    #[serde(default)]
    pub error: Option<String>,
    /// The limit in effect after the request, vCPUs, as Azure reported it.
    #[serde(default)]
    pub limit_after: Option<u64>,
    /// The request's id at Azure, when it named one.
    #[serde(default)]
    pub azure_request_id: Option<String>,
    /// Who filed it: the token's role and id.
    pub requested_by: String,
    /// When it was filed, Unix milliseconds.
    pub submitted_ms: i64,
    /// When it last changed, Unix milliseconds.
    pub updated_ms: i64,
    /// When it ended (granted or failed), Unix milliseconds.
    #[serde(default)]
    pub ended_ms: Option<i64>,
}

impl Record for QuotaRequest {
    const TABLE: TableDef = TableDef { name: "quota_requests", indexes: &[] };
    fn key(&self) -> String {
        self.id.clone()
    }
}

impl QuotaRequest {
    /// The event this request's current state is recorded with.
    fn event(&self, now_ms: i64) -> EventDraft {
        let what = format!("+{} vCPUs of {} in {}", self.increase_vcpus, self.resource_name, self.region);
        let limits = match (self.limit_before, self.new_limit) {
            (Some(b), Some(n)) => format!(" ({b} -> {n} vCPUs)"),
            _ => String::new(),
        };
        let (kind, message) = match self.state {
            RequestState::Submitted => (
                EventKind::QuotaRequested,
                format!("quota request {} for {what} filed by {}", self.id, self.requested_by),
            ),
            RequestState::Granted => {
                (EventKind::QuotaGranted, format!("quota request {} for {what}{limits} granted by Azure", self.id))
            }
            RequestState::Failed => (
                EventKind::QuotaRequestFailed,
                format!(
                    "quota request {} for {what}{limits} failed{}: {}",
                    self.id,
                    self.azure_state.as_deref().map(|s| format!(" ({s})")).unwrap_or_default(),
                    self.error.as_deref().unwrap_or("no reason given")
                ),
            ),
        };
        EventDraft {
            at_ms: now_ms,
            kind: kind.as_str().to_string(),
            job_id: None,
            tenant: None,
            message,
            data: serde_json::to_value(self).unwrap_or_default(),
        }
    }
}

/// The quota requests of a server that drives Azure: filing (the API), reading, and the wake-up
/// of the leader's driver. Cheap to clone.
#[derive(Clone)]
pub struct QuotaRequests {
    store: Store,
    clock: Arc<dyn Clock>,
    azure: Arc<AzureCloud>,
    wake: Arc<Notify>,
}

impl QuotaRequests {
    /// Requests kept in `store` (the API's handle: filing needs no lease), filed with `azure`.
    pub fn new(store: Store, clock: Arc<dyn Clock>, azure: Arc<AzureCloud>) -> QuotaRequests {
        QuotaRequests { store, clock, azure, wake: Arc::new(Notify::new()) }
    }

    /// Records a new request in state `submitted` with its `quota_requested` event, and wakes the
    /// driver (on a follower, the leader finds it on its next pass).
    pub fn submit(
        &self,
        region: &str,
        resource_name: &str,
        increase_vcpus: u64,
        requested_by: &str,
    ) -> Result<QuotaRequest, StoreError> {
        let now = self.clock.now_ms();
        let mut random = [0u8; 4];
        getrandom::fill(&mut random).map_err(|e| StoreError::Storage(format!("no randomness: {e}")))?;
        let request = QuotaRequest {
            id: format!("q-{:011x}{:08x}", now.max(0), u32::from_be_bytes(random)),
            region: region.to_string(),
            resource_name: resource_name.to_string(),
            increase_vcpus,
            limit_before: None,
            new_limit: None,
            state: RequestState::Submitted,
            azure_state: None,
            error: None,
            limit_after: None,
            azure_request_id: None,
            requested_by: requested_by.to_string(),
            submitted_ms: now,
            updated_ms: now,
            ended_ms: None,
        };
        self.store.transaction(|tx| {
            tx.put_new(&request)?;
            tx.append_event(request.event(now))?;
            Ok(())
        })?;
        // On disk before the 202: an accepted request survives a crash, to be resumed.
        self.store.flush()?;
        self.wake.notify_one();
        Ok(request)
    }

    /// One request.
    pub fn get(&self, id: &str) -> Result<Option<QuotaRequest>, StoreError> {
        self.store.get(id)
    }

    /// Every request, newest first.
    pub fn list(&self) -> Result<Vec<QuotaRequest>, StoreError> {
        let mut all = self.store.scan::<QuotaRequest>()?;
        all.sort_by(|a, b| b.submitted_ms.cmp(&a.submitted_ms).then(b.id.cmp(&a.id)));
        Ok(all)
    }
}

/// How often the leader looks for `submitted` requests it does not follow yet (filed on another
/// server, or left by an earlier leader), besides being woken by a request filed here.
const PASS_EVERY: Duration = Duration::from_secs(2);

/// While this server leads, drives every `submitted` request of `requests` to its end, writing
/// through `fenced` (the store under the leader's fence): see the module documentation. Returns
/// when `stop` turns true.
pub async fn drive_quota_requests(
    requests: QuotaRequests,
    fenced: Store,
    replica: Replica,
    mut stop: watch::Receiver<bool>,
) {
    let following: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    loop {
        if *stop.borrow() {
            return;
        }
        if replica.is_leader() {
            let store = requests.store.clone();
            let open = tokio::task::spawn_blocking(move || store.scan::<QuotaRequest>()).await;
            match open {
                Ok(Ok(all)) => {
                    for r in all.into_iter().filter(|r| r.state == RequestState::Submitted) {
                        if !following.lock().expect("not poisoned").insert(r.id.clone()) {
                            continue;
                        }
                        let (requests, fenced, following) = (requests.clone(), fenced.clone(), following.clone());
                        tokio::spawn(async move {
                            let id = r.id.clone();
                            if let Err(e) = drive_one(&requests, &fenced, r).await {
                                tracing::warn!(request = %id, error = %e,
                                    "quota request not written: the next leader (or pass) resumes it");
                            }
                            following.lock().expect("not poisoned").remove(&id);
                        });
                    }
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot read the quota requests; retrying"),
                Err(e) => tracing::warn!(error = %e, "reading the quota requests failed"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(PASS_EVERY) => {}
            _ = requests.wake.notified() => {}
            _ = stop.changed() => {}
        }
    }
}

/// Writes `r` (and, when it ended, its event) through the fenced handle, on a blocking thread,
/// and flushes it to disk: the new limit must be durable before the PUT goes out, or a server
/// killed after sending it would leave a record without it, and the next leader would read the
/// limit afresh and, if the first request was granted meanwhile, ask for the increase twice.
async fn write(fenced: &Store, r: &QuotaRequest, now_ms: i64) -> Result<(), StoreError> {
    let (store, r) = (fenced.clone(), r.clone());
    tokio::task::spawn_blocking(move || {
        store.transaction(|tx| {
            tx.put(&r)?;
            if r.state != RequestState::Submitted {
                tx.append_event(r.event(now_ms))?;
            }
            Ok(())
        })?;
        store.flush()
    })
    .await
    .map_err(|e| StoreError::Storage(format!("writing the quota request: {e}")))?
}

/// Files one request and follows it to its end. An error is the store's (the fence): the request
/// stays `submitted` for the next leader.
async fn drive_one(requests: &QuotaRequests, fenced: &Store, mut r: QuotaRequest) -> Result<(), StoreError> {
    let azure = &requests.azure;
    let now = || requests.clock.now_ms();
    let new_limit = match r.new_limit {
        Some(n) => n,
        None => match azure.quota_limit(&r.region, &r.resource_name).await {
            Ok(limit) => {
                let n = limit.saturating_add(r.increase_vcpus);
                (r.limit_before, r.new_limit, r.updated_ms) = (Some(limit), Some(n), now());
                // Recorded before the PUT: a leader that resumes the request asks for this limit
                // again, not for another increase over a limit this one may already have raised.
                write(fenced, &r, now()).await?;
                n
            }
            Err(e) => {
                r.error = Some(format!("Azure did not report the limit of {} in {}: {e}", r.resource_name, r.region));
                return finish(fenced, r, RequestState::Failed, now()).await;
            }
        },
    };
    tracing::info!(request = %r.id, region = %r.region, pool = %r.resource_name, new_limit, "filing a quota request");
    match azure.request_quota_limit(&r.region, &r.resource_name, new_limit).await {
        Ok(o) => {
            let granted = o.state == QuotaRequestState::Succeeded;
            r.limit_before = r.limit_before.or(Some(o.limit_before));
            r.azure_state = Some(o.state.as_str().to_string());
            r.limit_after = Some(o.limit_after);
            r.azure_request_id = o.request_id;
            if !granted {
                r.error =
                    Some(o.message.unwrap_or_else(|| {
                        format!("Azure ended the request as {} without a message", o.state.as_str())
                    }));
            }
            finish(fenced, r, if granted { RequestState::Granted } else { RequestState::Failed }, now()).await
        }
        Err(e) => {
            r.error = Some(format!("Azure did not take the request: {e}"));
            finish(fenced, r, RequestState::Failed, now()).await
        }
    }
}

async fn finish(fenced: &Store, mut r: QuotaRequest, state: RequestState, now_ms: i64) -> Result<(), StoreError> {
    (r.state, r.updated_ms, r.ended_ms) = (state, now_ms, Some(now_ms));
    tracing::info!(request = %r.id, state = state.as_str(), error = ?r.error, "quota request ended");
    write(fenced, &r, now_ms).await
}
