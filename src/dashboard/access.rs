//! Who may act: the token, the session cookie it buys, and the CSRF field every action form
//! carries.
//!
//! A browser signs in by posting the token once; the dashboard answers with a session cookie
//! (`HttpOnly`, `SameSite=Strict`) whose value is a random secret of this process, never the
//! token. An action is a POST that must carry that cookie and, in its form, a second random
//! secret the pages embed (the CSRF field): another site can make a browser post, but cannot
//! read a page to learn the field, and a strict cookie is not sent from another site anyway.
//! Scripts send `Authorization: Bearer <token>` instead, which no other site can make a
//! browser send.

use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, X_FRAME_OPTIONS};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;

/// The name of the session cookie.
pub(super) const SESSION_COOKIE: &str = "redefer_session";

/// The secrets of one dashboard process.
#[derive(Debug)]
pub(super) struct Access {
    token: Option<String>,
    session: String,
    pub(super) csrf: String,
}

impl Access {
    pub(super) fn new(token: Option<String>) -> Self {
        Access {
            token,
            session: secret(),
            csrf: secret(),
        }
    }

    /// Whether actions are off.
    pub(super) fn read_only(&self) -> bool {
        self.token.is_none()
    }

    /// Whether `offered` is the token.
    pub(super) fn is_token(&self, offered: &str) -> bool {
        self.token.as_deref().is_some_and(|token| same(token, offered))
    }

    /// The cookie that signs a browser in.
    pub(super) fn session_cookie(&self, path: &str) -> String {
        let path = if path.is_empty() { "/" } else { path };
        format!(
            "{SESSION_COOKIE}={}; HttpOnly; SameSite=Strict; Path={path}",
            self.session
        )
    }

    /// Whether the request comes from a signed-in browser: `None` when read-only.
    pub(super) fn signed_in(&self, headers: &HeaderMap) -> Option<bool> {
        if self.read_only() {
            return None;
        }
        let session = headers
            .get_all(COOKIE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|cookies| cookies.split(';'))
            .filter_map(|cookie| cookie.trim().split_once('='))
            .any(|(name, value)| name == SESSION_COOKIE && same(value, &self.session));
        Some(session)
    }

    /// Whether an action may run: a bearer token, or a signed-in browser with the CSRF field.
    pub(super) fn may_act(&self, headers: &HeaderMap, csrf: Option<&str>) -> Result<(), &'static str> {
        if self.read_only() {
            return Err("the dashboard is read-only");
        }
        let bearer = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if let Some(bearer) = bearer {
            return if self.is_token(bearer) {
                Ok(())
            } else {
                Err("wrong token")
            };
        }
        if self.signed_in(headers) != Some(true) {
            return Err("sign in first");
        }
        match csrf {
            Some(field) if same(field, &self.csrf) => Ok(()),
            _ => Err("the form is stale or from another site (CSRF check)"),
        }
    }
}

/// Every response: never framed by another site (a signed-in operator cannot be made to click
/// an action inside someone else's page), no script at all (the pages have none: an injected
/// one would not run), forms posted to the dashboard only, and never cached (the pages carry
/// the CSRF field).
pub(super) async fn hardened(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// 128 random bits, as hex.
fn secret() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Compares secrets in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(axum::http::HeaderName, String)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn actions_need_the_session_and_the_csrf_field_or_the_bearer_token() {
        let access = Access::new(Some("s3cret".into()));
        let cookie = (COOKIE, format!("other=1; {SESSION_COOKIE}={}", access.session));
        let csrf = access.csrf.clone();
        assert!(
            access
                .may_act(&headers(std::slice::from_ref(&cookie)), Some(&csrf))
                .is_ok()
        );
        assert!(
            access
                .may_act(&headers(std::slice::from_ref(&cookie)), None)
                .is_err(),
            "no CSRF field"
        );
        assert!(access.may_act(&headers(&[cookie]), Some("forged")).is_err());
        assert!(
            access.may_act(&headers(&[]), Some(&csrf)).is_err(),
            "not signed in"
        );
        let bearer = |token: &str| headers(&[(AUTHORIZATION, format!("Bearer {token}"))]);
        assert!(access.may_act(&bearer("s3cret"), None).is_ok());
        assert!(access.may_act(&bearer("guess"), None).is_err());
        let read_only = Access::new(None);
        assert!(read_only.may_act(&bearer(""), None).is_err());
        assert_eq!(read_only.signed_in(&HeaderMap::new()), None);
    }
}
