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
use super::html::{encode, escape, page};
use super::pages::{Shared, failure};
use crate::queue::{Cancelled, JobId, JobSet, QueueStore};
use crate::store::ListLocks;

/// The sign-in form.
pub(super) async fn login_page<St: QueueStore + ListLocks + Sync>(
    State(d): Shared<St>,
    headers: HeaderMap,
) -> Response {
    if !d.access.has_token() {
        return failure(
            &d,
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
        return failure(&d, StatusCode::FORBIDDEN, "the dashboard has no token");
    }
    if let Err(wait) = d.access.sign_ins.attempt(client.or_shared(), Instant::now()) {
        return too_many_attempts(&d, wait);
    }
    if !d.access.is_token(&login.token) {
        return failure(&d, StatusCode::FORBIDDEN, "wrong token");
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
            &d,
            StatusCode::FORBIDDEN,
            "the form is stale or from another site (CSRF check)",
        ),
        _ => failure(&d, StatusCode::FORBIDDEN, "not signed in"),
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
        return failure(&d, StatusCode::FORBIDDEN, refusal);
    }
    let (queue, _) = match d.known_queue(&name).await {
        Ok(known) => known,
        Err(response) => return response,
    };
    let job = || -> Result<JobId, Response> {
        let id = form
            .id
            .as_deref()
            .ok_or_else(|| failure(&d, StatusCode::BAD_REQUEST, "which job? (id)"))?;
        JobId::new(id).map_err(|error| failure(&d, StatusCode::BAD_REQUEST, &error.to_string()))
    };
    let outcome = async {
        Ok::<(JobSet, String), Response>(match action.as_str() {
            "requeue" => {
                let id = job()?;
                match queue.requeue(std::slice::from_ref(&id)).await {
                    Ok(1) => (JobSet::Dead, format!("requeued {id}")),
                    Ok(_) => (JobSet::Dead, format!("{id} is not dead: nothing requeued")),
                    Err(error) => return Err(d.store_failed(error)),
                }
            }
            "cancel" => {
                let id = job()?;
                let notice = match queue.cancel(&id).await.map_err(|error| d.store_failed(error))? {
                    Cancelled::Deleted => format!("cancelled {id}"),
                    Cancelled::InFlight => format!("{id} is in flight: not cancelled"),
                    Cancelled::NotFound => format!("{id} is not in the queue"),
                };
                (JobSet::Waiting, notice)
            }
            "run-now" => {
                let id = job()?;
                let moved = queue.run_now(&id).await.map_err(|error| d.store_failed(error))?;
                let notice = if moved {
                    format!("{id} is due now")
                } else {
                    format!("{id} is not waiting")
                };
                (JobSet::Waiting, notice)
            }
            "purge-dead" => {
                if form.confirm.as_deref() != Some("yes") {
                    return Err(failure(
                        &d,
                        StatusCode::BAD_REQUEST,
                        "purging needs confirmation (confirm=yes)",
                    ));
                }
                let purged = queue
                    .purge(JobSet::Dead)
                    .await
                    .map_err(|error| d.store_failed(error))?;
                (JobSet::Dead, format!("purged {purged} dead jobs"))
            }
            "pause" => {
                queue.pause().await.map_err(|error| d.store_failed(error))?;
                (JobSet::Waiting, "paused".to_string())
            }
            "resume" => {
                queue.resume().await.map_err(|error| d.store_failed(error))?;
                (JobSet::Waiting, "resumed".to_string())
            }
            other => {
                return Err(failure(
                    &d,
                    StatusCode::NOT_FOUND,
                    &format!("no action {}", escape(other)),
                ));
            }
        })
    };
    match outcome.await {
        Ok((set, notice)) => {
            let back = d.link(&format!(
                "/queues/{}?set={}&notice={}",
                encode(&name),
                set.as_str(),
                encode(&notice)
            ));
            (StatusCode::SEE_OTHER, [(LOCATION, back)]).into_response()
        }
        Err(response) => response,
    }
}
