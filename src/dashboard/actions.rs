//! The actions: sign in and out, then requeue, cancel, run now, purge dead, pause, resume.
//! Each is a POST that [`Access::may_act`](super::access::Access::may_act) lets through, answered by a
//! redirect to the queue's page with what was done.

use std::time::Instant;

use axum::Form;
use axum::extract::{Path, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use super::Dashboard;
use super::access::{Visitor, same};
use super::attempts::{ClientAddress, bearer_guess, too_many_attempts};
use super::html::{encode, page};
use super::pages::{Shared, failure};
use super::problem::Problem;
use crate::queue::{Cancelled, JobId, JobInfo, JobSet, QueueOperator, QueueStore, RawJobState};
use crate::store::ListLocks;
use serde_json::Value;

/// The sign-in form.
pub(super) async fn login_page<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    headers: HeaderMap,
) -> Response {
    if !d.access.has_token() {
        return failure(
            StatusCode::FORBIDDEN,
            "the dashboard has no token: it is read-only, and there is nothing to sign in to",
        );
    }
    let visitor = d.access.visitor(&headers);
    Html(page(&d.base(), "Sign in", Some(&visitor), &login_form(&d))).into_response()
}

/// What a stranger gets instead of a page of a dashboard with a token: 401 and the sign-in
/// form.
pub(super) fn sign_in_first<St>(d: &Dashboard<St>) -> Response {
    let body = format!(
        "<p class=bad>Sign in to read this dashboard.</p>{}",
        login_form(d)
    );
    (
        StatusCode::UNAUTHORIZED,
        [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
        Html(page(&d.base(), "Sign in", Some(&Visitor::Stranger), &body)),
    )
        .into_response()
}

fn login_form<St>(d: &Dashboard<St>) -> String {
    format!(
        "<form method=post action='{}'><label>Token <input type=password name=token id=token autofocus></label> \
         <button type=submit id=sign-in>Sign in</button></form>",
        d.link("/login")
    )
}

#[derive(serde::Deserialize)]
pub(super) struct Login {
    token: String,
}

/// Checks the token, at most as often as the client's sign-in limit allows; signs the
/// browser in with a new session.
pub(super) async fn login<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    client: ClientAddress,
    Form(login): Form<Login>,
) -> Response {
    if !d.access.has_token() {
        return failure(StatusCode::FORBIDDEN, "the dashboard has no token");
    }
    if let Err(wait) = d.access.sign_ins.attempt(client.or_shared(), Instant::now()) {
        return too_many_attempts(wait);
    }
    if !d.access.is_token(&login.token) {
        return failure(StatusCode::FORBIDDEN, "wrong token");
    }
    (
        StatusCode::SEE_OTHER,
        [(SET_COOKIE, d.access.sign_in(&d.base())), (LOCATION, d.link("/"))],
    )
        .into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct LogoutForm {
    csrf: Option<String>,
}

/// Ends the browser's session (the form's CSRF field shows the browser asked for it).
pub(super) async fn logout<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    headers: HeaderMap,
    Form(form): Form<LogoutForm>,
) -> Response {
    match d.access.visitor(&headers) {
        Visitor::SignedIn { csrf } if form.csrf.as_deref().is_some_and(|field| same(field, &csrf)) => (
            StatusCode::SEE_OTHER,
            [
                (SET_COOKIE, d.access.sign_out(&headers, &d.base())),
                (LOCATION, d.link("/login")),
            ],
        )
            .into_response(),
        Visitor::SignedIn { .. } => failure(
            StatusCode::FORBIDDEN,
            "the form is stale or from another site (CSRF check)",
        ),
        _ => failure(StatusCode::FORBIDDEN, "not signed in"),
    }
}

#[derive(serde::Deserialize)]
pub(super) struct ActionForm {
    csrf: Option<String>,
    id: Option<String>,
    confirm: Option<String>,
}

/// Runs `action` on queue `name`, then back to the queue's page with a notice.
pub(super) async fn act<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    Path((name, action)): Path<(String, String)>,
    client: ClientAddress,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Response {
    if let Some(limited) = bearer_guess(&d, &headers, &client) {
        return limited;
    }
    if let Err(refusal) = d.access.may_act(&headers, form.csrf.as_deref()) {
        return failure(StatusCode::FORBIDDEN, refusal);
    }
    let outcome = run_action(&d, &name, &action, form.id.as_deref(), form.confirm.as_deref()).await;
    match outcome {
        Ok((set, notice)) => {
            let back = d.link(&format!(
                "/queues/{}?set={}&notice={}",
                encode(&name),
                set.as_str(),
                encode(&notice)
            ));
            (StatusCode::SEE_OTHER, [(LOCATION, back)]).into_response()
        }
        Err(problem) => problem.into(),
    }
}

/// Why an action on job `id` did nothing: 404 when the queue does not have the job, 409 with
/// where it is when it is elsewhere than the action needs (the command's exit 1 for both).
async fn not_done<St: QueueStore>(queue: &QueueOperator<Value, St>, id: &JobId, nothing: &str) -> Problem {
    match queue.job(id).await {
        Ok(
            None
            | Some(JobInfo {
                state: RawJobState::Missing,
                ..
            }),
        ) => Problem::new(
            StatusCode::NOT_FOUND,
            format!("job {id} is not in the queue: {nothing}"),
        ),
        Ok(Some(job)) => Problem::new(
            StatusCode::CONFLICT,
            format!("job {id} is {}: {nothing}", job.state.place()),
        ),
        Err(error) => Problem::store(error),
    }
}

/// Runs `action` on queue `name` (on job `id` for the actions on one job; `confirm` must be
/// `yes` to purge): the set whose page shows the result, and what happened, in words. Shared
/// by the forms and the JSON API. An action that finds its job missing or elsewhere is an
/// error (404, 409), as the command's exit 1 is.
pub(super) async fn run_action<St: QueueStore + ListLocks + Sync>(
    d: &Dashboard<St>,
    name: &str,
    action: &str,
    id: Option<&str>,
    confirm: Option<&str>,
) -> Result<(JobSet, String), Problem> {
    let (queue, _) = d.known_queue(name).await?;
    let job = || -> Result<JobId, Problem> {
        let id = id.ok_or_else(|| Problem::new(StatusCode::BAD_REQUEST, "which job? (id)"))?;
        JobId::new(id).map_err(|error| Problem::new(StatusCode::BAD_REQUEST, error.to_string()))
    };
    Ok(match action {
        "requeue" => {
            let id = job()?;
            match queue
                .requeue(std::slice::from_ref(&id))
                .await
                .map_err(Problem::store)?
            {
                1 => (JobSet::Dead, format!("requeued {id}")),
                _ => return Err(not_done(&queue, &id, "nothing requeued").await),
            }
        }
        "cancel" => {
            let id = job()?;
            match queue.cancel(&id).await.map_err(Problem::store)? {
                Cancelled::Deleted => (JobSet::Waiting, format!("cancelled {id}")),
                _ => return Err(not_done(&queue, &id, "nothing cancelled").await),
            }
        }
        "run-now" => {
            let id = job()?;
            if !queue.run_now(&id).await.map_err(Problem::store)? {
                return Err(not_done(&queue, &id, "nothing to run now").await);
            }
            (JobSet::Waiting, format!("{id} is due now"))
        }
        "purge-dead" => {
            if confirm != Some("yes") {
                return Err(Problem::new(
                    StatusCode::BAD_REQUEST,
                    "purging needs confirmation: confirm=yes (a form field, or \"confirm\": \"yes\" in a JSON body)",
                ));
            }
            let purged = queue.purge(JobSet::Dead).await.map_err(Problem::store)?;
            (JobSet::Dead, format!("purged {purged} dead jobs"))
        }
        "pause" => {
            queue.pause().await.map_err(Problem::store)?;
            (JobSet::Waiting, "paused".to_string())
        }
        "resume" => {
            queue.resume().await.map_err(Problem::store)?;
            (JobSet::Waiting, "resumed".to_string())
        }
        other => {
            return Err(Problem::new(StatusCode::NOT_FOUND, format!("no action {other}")));
        }
    })
}
