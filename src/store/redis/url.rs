//! The address of a Redis server as a user gives it: read into a client, or refused with what
//! is wrong, and printed without its password.

use crate::error::StoreError;

/// The client of the server at `url`; a `url` that is not a Redis URL is
/// [`StoreError::InvalidUrl`], which names it (without its password) and the forms it may take.
pub(super) fn client_of(url: &str) -> Result<redis::Client, StoreError> {
    redis::Client::open(url).map_err(|error| refused(url, error))
}

/// What refusing `url` says: [`StoreError::InvalidUrl`] when the client could not read it, else
/// the client's error as it is.
pub(super) fn refused(url: &str, error: redis::RedisError) -> StoreError {
    if error.kind() != redis::ErrorKind::InvalidClientConfig {
        return error.into();
    }
    let reason = match url.split_once("://") {
        None => "it has no scheme".to_string(),
        Some((scheme, _)) if !SCHEMES.contains(&scheme) => format!("its scheme is {scheme:?}"),
        // A Redis scheme: what the client found wrong (a port that is no number, TLS without
        // the `tls` feature, ...).
        Some(_) => error.to_string(),
    };
    StoreError::InvalidUrl {
        url: without_password(url),
        reason,
    }
}

/// The schemes of a Redis URL.
const SCHEMES: [&str; 4] = ["redis", "rediss", "unix", "redis+unix"];

/// `url` with its password, if any, replaced by `***`: fit to print or log.
///
/// ```
/// use redefer::store::without_password;
///
/// assert_eq!(without_password("redis://app:s3cret@db:6379/0"), "redis://app:***@db:6379/0");
/// assert_eq!(without_password("redis://db:6379"), "redis://db:6379");
/// ```
pub fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_string();
    };
    match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_printed_without_their_password() {
        assert_eq!(
            without_password("redis://app:s3cret@db:6379/0"),
            "redis://app:***@db:6379/0"
        );
        assert_eq!(without_password("rediss://:s3cret@db"), "rediss://:***@db");
        assert_eq!(without_password("redis://db:6379"), "redis://db:6379");
        assert_eq!(without_password("redis://user@db"), "redis://user@db");
        assert_eq!(without_password("not a url"), "not a url");
    }

    #[test]
    fn a_url_that_is_not_a_redis_url_is_refused_with_what_it_may_be() {
        let error = client_of("http://app:s3cret@127.0.0.1:6379").unwrap_err();
        assert!(
            matches!(&error, StoreError::InvalidUrl { url, .. } if url == "http://app:***@127.0.0.1:6379")
        );
        let said = error.to_string();
        assert!(
            said.contains("is not a Redis URL") && said.contains("its scheme is \"http\""),
            "{said}"
        );
        assert!(!said.contains("s3cret"), "{said}");
    }
}
