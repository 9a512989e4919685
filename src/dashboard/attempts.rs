//! The HTTP side of the limit on token attempts: the client's address, the 429 a client that
//! tried too often gets, and the count of wrong bearer tokens (sign-ins count theirs in the
//! login action). The limit itself is [`SignInLimit`](super::sign_in_limit::SignInLimit).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::header::RETRY_AFTER;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::Dashboard;
use super::access::Visitor;
use super::pages::failure;

/// The client's address, from the connection, when the server recorded it
/// (`into_make_service_with_connect_info::<SocketAddr>`).
pub(super) struct ClientAddress(Option<IpAddr>);

impl ClientAddress {
    /// The address the attempt limit counts: clients whose address the server did not record
    /// share one limit.
    pub(super) fn or_shared(&self) -> IpAddr {
        self.0.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
    }
}

/// 429 with `Retry-After` for a client that tried the token too often.
pub(super) fn too_many_attempts(wait: std::time::Duration) -> Response {
    let seconds = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
        .max(1);
    let mut response = failure(
        StatusCode::TOO_MANY_REQUESTS,
        &format!("too many attempts with a wrong token from this address: try again in {seconds} s"),
    );
    response.headers_mut().insert(RETRY_AFTER, seconds.into());
    response
}

/// For a request with a bearer token: `Some(429)` while its client must wait (the token is not
/// even compared then), and a wrong token counts as an attempt.
pub(super) fn bearer_guess<St>(
    d: &Dashboard<St>,
    headers: &HeaderMap,
    client: &ClientAddress,
) -> Option<Response> {
    if !d.access.offers_bearer(headers) {
        return None;
    }
    let now = Instant::now();
    if let Some(wait) = d.access.sign_ins.waiting(client.or_shared(), now) {
        return Some(too_many_attempts(wait));
    }
    if d.access.visitor(headers) != Visitor::Bearer {
        // The answer to this request is the refusal it gets anyway; the count limits the next.
        let _ = d.access.sign_ins.attempt(client.or_shared(), now);
    }
    None
}

impl<S: Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let address = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|ConnectInfo(address)| address.ip());
        Ok(ClientAddress(address))
    }
}
