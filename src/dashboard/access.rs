//! Who may read and who may act: the token, the sessions it buys, and the CSRF field every
//! action form carries.
//!
//! A browser signs in by posting the token once (attempts are limited per client address);
//! the dashboard answers with a session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` when
//! served over HTTPS) whose value is a random secret of that sign-in, never the token, valid
//! for the session's lifetime or until it signs out. An action is a POST that must carry that
//! cookie and, in its form, the session's second secret the pages embed (the CSRF field):
//! another site can make a browser post, but cannot read a page to learn the field, and a
//! strict cookie is not sent from another site anyway. Scripts send `Authorization: Bearer
//! <token>` instead, which no other site can make a browser send.
//!
//! With a token, reading needs the session or the token too (payloads may carry personal
//! data), unless the options say `public_read`. Without one, anyone who reaches the dashboard
//! reads it and nobody acts.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_SECURITY_POLICY, COOKIE, X_FRAME_OPTIONS};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;

use super::options::DashboardOptions;
use super::sign_in_limit::SignInLimit;

/// The name of the session cookie.
pub(super) const SESSION_COOKIE: &str = "redefer_session";

/// Sessions kept at most: past it, a sign-in ends the session closest to its end. (Sign-ins
/// are limited per address, so only many addresses with the token get this far.)
const MAX_SESSIONS: usize = 10_000;

/// Who asks, as far as the dashboard can tell from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Visitor {
    /// The dashboard has no token: anyone reads, nobody acts.
    Anyone,
    /// Neither signed in nor carrying the token.
    Stranger,
    /// A signed-in browser, whose action forms carry `csrf`.
    SignedIn { csrf: String },
    /// A script with the token.
    Bearer,
}

impl Visitor {
    /// The CSRF field of the visitor's forms, when it can act through forms.
    pub(super) fn csrf(&self) -> Option<&str> {
        match self {
            Visitor::SignedIn { csrf } => Some(csrf),
            _ => None,
        }
    }
}

/// One signed-in browser.
#[derive(Debug)]
struct Session {
    csrf: String,
    ends: Instant,
}

/// The dashboard's access rules and its sessions.
#[derive(Debug)]
pub(super) struct Access {
    token: Option<String>,
    actions: bool,
    public_read: bool,
    secure_cookie: bool,
    session_ttl: Duration,
    sessions: Mutex<HashMap<String, Session>>,
    pub(super) sign_ins: SignInLimit,
}

impl Access {
    pub(super) fn new(options: &DashboardOptions) -> Self {
        Access {
            token: options.token.clone(),
            actions: options.actions,
            public_read: options.public_read,
            secure_cookie: options.served_over_https,
            session_ttl: options.session_ttl,
            sessions: Mutex::new(HashMap::new()),
            sign_ins: SignInLimit::new(options.sign_ins_per_minute, Duration::from_secs(60)),
        }
    }

    /// Whether there is a token to sign in with.
    pub(super) fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Whether actions are off.
    pub(super) fn read_only(&self) -> bool {
        self.token.is_none() || !self.actions
    }

    /// Whether `offered` is the token.
    pub(super) fn is_token(&self, offered: &str) -> bool {
        self.token.as_deref().is_some_and(|token| same(token, offered))
    }

    /// Whether the request carries a bearer token (right or wrong) for a dashboard with one.
    pub(super) fn offers_bearer(&self, headers: &HeaderMap) -> bool {
        self.token.is_some() && bearer(headers).is_some()
    }

    /// Who sent a request with these `headers`.
    pub(super) fn visitor(&self, headers: &HeaderMap) -> Visitor {
        if self.token.is_none() {
            return Visitor::Anyone;
        }
        if bearer(headers).is_some_and(|offered| self.is_token(offered)) {
            return Visitor::Bearer;
        }
        let now = Instant::now();
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        session_ids(headers)
            .find_map(|id| sessions.get(id).filter(|session| session.ends > now))
            .map_or(Visitor::Stranger, |session| Visitor::SignedIn {
                csrf: session.csrf.clone(),
            })
    }

    /// Whether `visitor` may read the pages.
    pub(super) fn may_read(&self, visitor: &Visitor) -> bool {
        *visitor != Visitor::Stranger || self.public_read
    }

    /// Whether an action may run: a bearer token, or a signed-in browser with the CSRF field.
    pub(super) fn may_act(&self, headers: &HeaderMap, csrf: Option<&str>) -> Result<(), &'static str> {
        if self.read_only() {
            return Err("the dashboard is read-only");
        }
        if bearer(headers).is_some() {
            return match self.visitor(headers) {
                Visitor::Bearer => Ok(()),
                _ => Err("wrong token"),
            };
        }
        match (self.visitor(headers), csrf) {
            (Visitor::SignedIn { csrf: expected }, Some(field)) if same(field, &expected) => Ok(()),
            (Visitor::SignedIn { .. }, _) => Err("the form is stale or from another site (CSRF check)"),
            _ => Err("sign in first"),
        }
    }

    /// Starts a session: the `Set-Cookie` value that carries it, under `path`.
    pub(super) fn sign_in(&self, path: &str) -> String {
        let now = Instant::now();
        let id = secret();
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.retain(|_, session| session.ends > now);
        if sessions.len() >= MAX_SESSIONS {
            let closest_to_end = sessions
                .iter()
                .min_by_key(|(_, session)| session.ends)
                .map(|(id, _)| id.clone());
            if let Some(ending) = closest_to_end {
                sessions.remove(&ending);
            }
        }
        sessions.insert(
            id.clone(),
            Session {
                csrf: secret(),
                ends: now + self.session_ttl,
            },
        );
        self.cookie(path, &id, self.session_ttl)
    }

    /// Ends the session the request carries, if any: the `Set-Cookie` value that clears it.
    pub(super) fn sign_out(&self, headers: &HeaderMap, path: &str) -> String {
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        for id in session_ids(headers) {
            sessions.remove(id);
        }
        self.cookie(path, "", Duration::ZERO)
    }

    fn cookie(&self, path: &str, value: &str, lasts: Duration) -> String {
        let path = if path.is_empty() { "/" } else { path };
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        format!(
            "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Strict; Path={path}; Max-Age={}{secure}",
            lasts.as_secs()
        )
    }
}

/// The token of an `Authorization: Bearer` header.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
}

/// The session ids the request's cookies carry.
fn session_ids(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().split_once('='))
        .filter(|(name, value)| *name == SESSION_COOKIE && !value.is_empty())
        .map(|(_, value)| value)
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
pub(super) fn same(a: &str, b: &str) -> bool {
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

    /// The `name=value` part of a `Set-Cookie` value.
    fn cookie_of(set_cookie: &str) -> (axum::http::HeaderName, String) {
        let pair = set_cookie.split(';').next().unwrap();
        (COOKIE, format!("other=1; {pair}"))
    }

    #[test]
    fn actions_need_the_session_and_its_csrf_field_or_the_bearer_token() {
        let access = Access::new(&DashboardOptions::default().token(Some("s3cret".into())));
        let cookie = cookie_of(&access.sign_in("/"));
        let Visitor::SignedIn { csrf } = access.visitor(&headers(std::slice::from_ref(&cookie))) else {
            panic!("signed in")
        };
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
        assert!(
            access
                .may_act(&headers(std::slice::from_ref(&cookie)), Some("forged"))
                .is_err()
        );
        assert!(
            access.may_act(&headers(&[]), Some(&csrf)).is_err(),
            "not signed in"
        );
        // Another sign-in is another session, with its own CSRF field.
        let other = cookie_of(&access.sign_in("/"));
        assert_ne!(other, cookie);
        assert!(access.may_act(&headers(&[other]), Some(&csrf)).is_err());
        let bearer = |token: &str| headers(&[(AUTHORIZATION, format!("Bearer {token}"))]);
        assert!(access.may_act(&bearer("s3cret"), None).is_ok());
        assert!(access.may_act(&bearer("guess"), None).is_err());
        // Signed out, the cookie is worth nothing.
        let cleared = access.sign_out(&headers(std::slice::from_ref(&cookie)), "/");
        assert!(cleared.contains("Max-Age=0"), "{cleared}");
        assert_eq!(access.visitor(&headers(&[cookie])), Visitor::Stranger);
        let read_only = Access::new(&DashboardOptions::default());
        assert!(read_only.may_act(&bearer(""), None).is_err());
        assert_eq!(read_only.visitor(&HeaderMap::new()), Visitor::Anyone);
    }

    #[test]
    fn sessions_expire_and_cookies_are_secure_over_https() {
        let access = Access::new(
            &DashboardOptions::default()
                .token(Some("s3cret".into()))
                .session_ttl(Duration::from_millis(1))
                .served_over_https(true),
        );
        let set_cookie = access.sign_in("/ops");
        assert!(
            set_cookie.ends_with("; Secure") && set_cookie.contains("Path=/ops"),
            "{set_cookie}"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(
            access.visitor(&headers(&[cookie_of(&set_cookie)])),
            Visitor::Stranger
        );
        assert!(!access.may_read(&Visitor::Stranger));
    }
}
