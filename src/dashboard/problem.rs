//! Why a page, an action or an API call could not be answered: one value, shown as an HTML page
//! to browsers and as JSON to scripts.

use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;

use super::html::{escape, page};

/// A status and what went wrong, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Problem {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl Problem {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Problem {
            status,
            message: message.into(),
        }
    }

    /// The store failed under the request.
    pub(super) fn store(error: impl std::fmt::Display) -> Self {
        Problem::new(StatusCode::BAD_GATEWAY, format!("the store failed: {error}"))
    }

    /// As JSON: `{ "error": message }` with the status.
    pub(super) fn json(self) -> Response {
        json(self.status, &serde_json::json!({ "error": self.message }))
    }
}

/// `value` as a JSON response with `status`.
pub(super) fn json(status: StatusCode, value: &impl Serialize) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (status, [(CONTENT_TYPE, "application/json")], body).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

impl From<Problem> for Response {
    /// As the dashboard's error page, under the request's mount.
    fn from(problem: Problem) -> Response {
        let body = format!("<p class=bad>{}</p>", escape(&problem.message));
        (
            problem.status,
            Html(page(&super::current_base(), "Error", None, &body)),
        )
            .into_response()
    }
}
