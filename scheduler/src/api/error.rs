//! Every error the API returns, as one JSON shape: `{"error": "...", "problems": [{"field", "problem"}]}`.
//!
//! Handlers return [`ApiError`]; nothing else produces an error body, so a client can rely on the
//! shape for every status from 400 to 503. Store failures are 503 (retry later), never 500: the
//! request was well-formed and nothing was acknowledged.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::jobs::JobError;
use crate::model::{FieldError, FieldErrors};

/// The JSON body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong, in one sentence a person can act on.
    pub error: String,
    /// Each problem with the input, naming its field (empty when the error is not about a field).
    pub problems: Vec<Problem>,
}

/// One problem with one field of the input.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// The field's path, dotted and indexed (`replicas.min`, `regions[2]`); empty for the whole body.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl From<&FieldError> for Problem {
    fn from(e: &FieldError) -> Self {
        Problem { field: e.field.clone(), problem: e.problem.clone() }
    }
}

/// An error response: status, message, field problems, and for 429 how long to wait.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The message.
    pub message: String,
    /// Field problems.
    pub problems: Vec<Problem>,
    /// Seconds to wait before retrying (sent as `Retry-After`).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    /// An error with a status and a message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), problems: Vec::new(), retry_after_secs: None }
    }

    /// 400: the request cannot be read (malformed JSON, bad query string).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// 400 about one field (or header, or query parameter).
    pub fn bad_field(field: &str, problem: impl Into<String>) -> ApiError {
        let problem = problem.into();
        ApiError {
            problems: vec![Problem { field: field.to_string(), problem: problem.clone() }],
            ..ApiError::bad_request(if field.is_empty() { problem } else { format!("{field}: {problem}") })
        }
    }

    /// 422: well-formed but invalid; every problem names its field.
    pub fn invalid(errors: &FieldErrors) -> ApiError {
        let n = errors.0.len();
        let message = match errors.0.first() {
            Some(first) if n == 1 => format!("invalid request: {first}"),
            Some(first) => format!("invalid request: {first} (and {} more problems)", n - 1),
            None => "invalid request".to_string(),
        };
        ApiError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            message,
            problems: errors.0.iter().map(Problem::from).collect(),
            retry_after_secs: None,
        }
    }

    /// 401: no token, or one the server does not know.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, message)
    }

    /// 403: the token is valid but its role may not do this.
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// 409: conflicts with the resource's state or an earlier request.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, message)
    }

    /// 413: the body is larger than the server accepts.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("request body larger than {limit} bytes"))
    }

    /// 429 with `Retry-After`.
    pub fn rate_limited(retry_after_secs: u64) -> ApiError {
        ApiError {
            retry_after_secs: Some(retry_after_secs),
            ..ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("rate limit exceeded for this token; retry after {retry_after_secs} s"),
            )
        }
    }

    /// 503: the store (or another dependency) failed; nothing was acknowledged, retry later.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody { error: self.message.clone(), problems: self.problems.clone() }
    }
}

impl From<JobError> for ApiError {
    fn from(e: JobError) -> Self {
        match e {
            JobError::Invalid(errors) => ApiError::invalid(&errors),
            JobError::NotFound(id) => ApiError::not_found(format!("no job {id}")),
            JobError::Conflict(msg) => ApiError::conflict(msg),
            JobError::Store(e) => {
                tracing::error!(error = %e, "store failure while serving a request");
                ApiError::unavailable(format!("the state store failed ({e}); nothing was changed, retry later"))
            }
        }
    }
}

impl From<state::StoreError> for ApiError {
    fn from(e: state::StoreError) -> Self {
        ApiError::from(JobError::Store(e))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp = (self.status, axum::Json(self.body())).into_response();
        if let Some(secs) = self.retry_after_secs {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        resp
    }
}

/// Runs blocking store work off the async threads; a panicked or cancelled task is a 503.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "blocking task failed");
            Err(ApiError::unavailable("the server could not finish the request; retry later"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_errors_map_to_statuses_and_keep_every_field() {
        let mut fe = FieldErrors::default();
        fe.push("gpus", "must be at least 1");
        fe.push("regions[0]", "unknown region mars");
        let e = ApiError::from(JobError::Invalid(fe));
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(e.problems.len(), 2);
        assert_eq!(e.problems[1].field, "regions[0]");
        assert!(e.message.contains("gpus: must be at least 1"), "{}", e.message);
        assert_eq!(ApiError::from(JobError::NotFound("j-1".into())).status, StatusCode::NOT_FOUND);
        assert_eq!(ApiError::from(JobError::Conflict("x".into())).status, StatusCode::CONFLICT);
        let store = JobError::Store(state::StoreError::Storage("disk gone".into()));
        assert_eq!(ApiError::from(store).status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn rate_limited_carries_retry_after() {
        let resp = ApiError::rate_limited(3).into_response();
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "3");
    }
}
