//! `GET /v1/whoami`: the calling token's id, role and tenant, so a client (the dashboard) can say
//! who is signed in and offer only what the token may do, and the server's clock, which every
//! `*_ms` field of the API is on (simulated time when the cloud is simulated).

use axum::Extension;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::auth::{Caller, Role};

/// Who the presented token is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoAmI {
    /// The token's id (not secret).
    pub token_id: String,
    /// Its role.
    pub role: Role,
    /// The tenant it is bound to; absent when it sees every tenant.
    pub tenant: Option<String>,
    /// True when it may submit, cancel and complete jobs.
    pub may_write_jobs: bool,
    /// The server's clock: every time the API returns is on it (a simulated cloud's runs
    /// `speedup` times real time).
    pub clock: super::views::ClockView,
}

/// The calling token (id, role, tenant) and the server's clock.
#[utoipa::path(get, path = "/v1/whoami", tag = "tokens", responses((status = 200, body = WhoAmI)))]
pub(crate) async fn whoami(State(state): State<ApiState>, Extension(caller): Extension<Caller>) -> Json<WhoAmI> {
    Json(WhoAmI {
        clock: state.clock_view(),
        may_write_jobs: caller.may_write_jobs(),
        token_id: caller.token_id,
        role: caller.role,
        tenant: caller.tenant,
    })
}
