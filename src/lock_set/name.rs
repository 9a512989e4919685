//! One key naming a whole set of keys: what a request for a set waits for, as a deferring
//! strategy that keeps one waiting job per key ([`Coalesce`](crate::strategy::Coalesce)) sees
//! it.

use crate::key::{LockKey, MAX_KEY_LEN};

/// The name of the set `keys` (sorted, no two alike): the key itself for a set of one (as the
/// mutex names it), else the keys joined by `+`, each with `%` and `+` percent-encoded (no two
/// sets share a name). A name over [`MAX_KEY_LEN`] is `+` and a 128-bit digest of it (FNV-1a):
/// no name of fewer keys starts with `+`.
pub(crate) fn set_name(keys: &[LockKey]) -> LockKey {
    if let [only] = keys
        && !only.as_str().contains(['%', '+'])
    {
        return only.clone();
    }
    let mut name = String::new();
    for (index, key) in keys.iter().enumerate() {
        if index > 0 {
            name.push('+');
        }
        for c in key.as_str().chars() {
            match c {
                '%' => name.push_str("%25"),
                '+' => name.push_str("%2B"),
                c => name.push(c),
            }
        }
    }
    if name.len() > MAX_KEY_LEN {
        return digest_name(&name);
    }
    // Never empty, at most MAX_KEY_LEN bytes: a valid key.
    LockKey::new(name).unwrap_or_else(|_| keys[0].clone())
}

/// A name for `text`, whatever its length: `+` and its 128-bit digest (FNV-1a) in hex. No key,
/// nor a set's name of keys that fit (each shorter than [`MAX_KEY_LEN`] once joined), starts
/// so unless a key does itself.
pub(crate) fn digest_name(text: &str) -> LockKey {
    let name = format!("+{:032x}", fnv1a_128(text.as_bytes()));
    LockKey::new(name).expect("33 bytes: a valid key")
}

/// The 128-bit FNV-1a digest of `bytes`: stable across processes and builds.
fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    bytes.iter().fold(OFFSET, |hash, &byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::set_name;
    use crate::key::{LockKey, MAX_KEY_LEN};

    fn set(keys: &[&str]) -> String {
        let keys: Vec<LockKey> = keys.iter().map(|key| LockKey::new(*key).unwrap()).collect();
        set_name(&keys).as_str().to_string()
    }

    #[test]
    fn no_two_sets_share_a_name() {
        assert_eq!(set(&["order:1"]), "order:1", "a set of one is its key");
        assert_eq!(set(&["account:1", "account:2"]), "account:1+account:2");
        assert_ne!(set(&["a+b"]), set(&["a", "b"]));
        assert_ne!(set(&["a%2Bb"]), set(&["a+b"]));
        assert_ne!(set(&["a", "b+c"]), set(&["a+b", "c"]));
        let long: Vec<String> = (0..3)
            .map(|n| format!("{n}{}", "x".repeat(MAX_KEY_LEN - 1)))
            .collect();
        let long: Vec<&str> = long.iter().map(String::as_str).collect();
        let digest = set(&long);
        assert!(digest.starts_with('+') && digest.len() == 33, "{digest}");
        assert_ne!(digest, set(&long[..2]));
    }
}
