//! Validated lock keys and key prefixes, and the hash tag a name is encoded into.
//!
//! Every Redis key of one lock (the lock itself and its fencing counter) carries the same
//! Redis Cluster hash tag, `{<encoded key>}`, so the scripts that touch both run on one node.
//! A user key may contain any bytes, braces included; braces and `%` are percent-encoded inside
//! the tag so that a key can neither end the hash tag early nor collide with another key.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::error::KeyError;

/// The longest lock key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The default prefix of every Redis key the crate writes.
pub const DEFAULT_PREFIX: &str = "redefer";

/// A validated lock key: the name of the resource a request changes (`order:42`).
///
/// Cheap to clone: the text is shared.
///
/// ```
/// use redefer::LockKey;
///
/// let key = LockKey::new("order:42")?;
/// assert_eq!(key.as_str(), "order:42");
/// assert!(LockKey::new("").is_err());
/// # Ok::<(), redefer::KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockKey(Arc<str>);

impl LockKey {
    /// Validates a lock key: non-empty and at most [`MAX_KEY_LEN`] bytes. Any other content,
    /// braces, NUL bytes and unicode included, is accepted and encoded safely.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        validate_name("lock key", &key, MAX_KEY_LEN)?;
        Ok(LockKey(key.into()))
    }

    /// The key as the user gave it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for LockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The namespace of every Redis key the crate writes: `<prefix>:lock:{<key>}` and so on.
///
/// ```
/// use redefer::Prefix;
///
/// assert_eq!(Prefix::default().as_str(), "redefer");
/// assert!(Prefix::new("app{1}").is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Prefix(Arc<str>);

impl Prefix {
    /// Validates a prefix: non-empty, at most [`MAX_KEY_LEN`] bytes, and without braces (a brace
    /// would make the prefix the Redis Cluster hash tag of every key).
    pub fn new(prefix: impl Into<String>) -> Result<Self, KeyError> {
        let prefix = prefix.into();
        validate_name("prefix", &prefix, MAX_KEY_LEN)?;
        if prefix.contains(['{', '}']) {
            return Err(KeyError::BraceInPrefix { prefix });
        }
        Ok(Prefix(prefix.into()))
    }

    /// The prefix text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Prefix {
    fn default() -> Self {
        Prefix(DEFAULT_PREFIX.into())
    }
}

impl fmt::Debug for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

pub(crate) fn validate_name(what: &'static str, name: &str, max: usize) -> Result<(), KeyError> {
    if name.is_empty() {
        return Err(KeyError::Empty { what });
    }
    if name.len() > max {
        return Err(KeyError::TooLong {
            what,
            len: name.len(),
            max,
        });
    }
    Ok(())
}

/// The text of `name`'s Redis Cluster hash tag, the part between the braces: `%`, `{` and `}`
/// percent-encoded, so it contains no brace (it cannot end or open a hash tag) and decodes back
/// to exactly one name (two names never share a Redis key).
/// Borrows `name` when it has nothing to encode (the common case: no allocation).
pub(crate) fn hash_tag(name: &str) -> Cow<'_, str> {
    // Byte by byte: every acquire and release asks, and a set of chars is a slower search.
    if !name.bytes().any(|byte| matches!(byte, b'%' | b'{' | b'}')) {
        return Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The number of Redis Cluster hash slots.
pub(crate) const HASH_SLOTS: u16 = 16384;

/// The Redis Cluster hash slot of every key whose hash tag carries `name`.
pub(crate) fn hash_slot(name: &str) -> u16 {
    // An empty tag does not count as a tag in Redis; names are never empty.
    slot_of(hash_tag(name).as_bytes())
}

/// The hash slot Redis Cluster gives the bytes it hashes (a key's tag, or the whole key).
fn slot_of(hashed: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hashed) % HASH_SLOTS
}

/// The Redis Cluster hash slot of `key`: of its hash tag (what stands between its first `{` and
/// the first `}` after it) when that is not empty, else of the whole key.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&byte| byte == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&byte| byte == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    slot_of(tagged.unwrap_or(key))
}

/// Inverse of the hash-tag encoding; `None` for text that no key encodes to.
pub fn decode_tag(encoded: &str) -> Option<String> {
    let mut out = String::with_capacity(encoded.len());
    let mut rest = encoded;
    while let Some(i) = rest.find(['%', '{', '}']) {
        out.push_str(&rest[..i]);
        let (escape, tail) = rest[i..].split_at_checked(3)?;
        out.push(match escape {
            "%25" => '%',
            "%7B" => '{',
            "%7D" => '}',
            _ => return None,
        });
        rest = tail;
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_tag_holds_no_brace() {
        assert_eq!(hash_tag("}{a}%"), "%7D%7Ba%7D%25");
        assert_eq!(decode_tag(&hash_tag("}{a}%")).as_deref(), Some("}{a}%"));
    }

    #[test]
    fn hash_slot_is_the_slot_redis_computes() {
        // CLUSTER KEYSLOT "{user1000}" is 3443 (the example of Redis's cluster documentation).
        assert_eq!(hash_slot("user1000"), 3443);
        for name in ["a", "{b}", "ключ"] {
            let slot = redis::cluster_routing::Slot::for_key(format!("redefer:lock:{{{}}}", hash_tag(name)));
            assert_eq!(redis::cluster_routing::Slot::new(hash_slot(name)), Some(slot));
        }
    }

    #[test]
    fn key_slot_is_the_slot_redis_computes() {
        for key in [
            "{user1000}.following",
            "plain",
            "a{}b{c}",
            "{}",
            "a{b",
            "x}{y}",
            "redefer:lock:{k}:waiters",
            "",
        ] {
            let slot = redis::cluster_routing::Slot::for_key(key);
            assert_eq!(
                redis::cluster_routing::Slot::new(key_slot(key.as_bytes())),
                Some(slot),
                "{key}"
            );
        }
    }

    #[test]
    fn decode_rejects_what_no_key_encodes_to() {
        assert_eq!(decode_tag("a%7Bb").as_deref(), Some("a{b"));
        assert_eq!(decode_tag("a{b"), None);
        assert_eq!(decode_tag("a%2"), None);
        assert_eq!(decode_tag("a%41"), None);
    }

    #[test]
    fn rejects_empty_long_and_braced() {
        assert_eq!(LockKey::new(""), Err(KeyError::Empty { what: "lock key" }));
        assert!(matches!(
            LockKey::new("x".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong { len: 1025, .. })
        ));
        assert!(LockKey::new("x".repeat(MAX_KEY_LEN)).is_ok());
        assert!(matches!(Prefix::new("a}"), Err(KeyError::BraceInPrefix { .. })));
        assert!(matches!(Prefix::new(""), Err(KeyError::Empty { .. })));
    }
}
