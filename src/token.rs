//! The two numbers a lock carries: the holder's secret token and the public fencing token.

use std::fmt;

use rand::RngExt;
use serde::{Deserialize, Serialize};

/// 128 random bits that identify one holder of a lock.
///
/// Release and extend compare it inside Redis, so a holder whose lock expired and was taken by
/// another can never release or extend the new holder's lock.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockToken(u128);

impl LockToken {
    /// A fresh token from the thread-local cryptographically secure generator.
    pub fn random() -> Self {
        LockToken(rand::rng().random())
    }

    /// The token as 32 lowercase hex digits, as stored in Redis.
    pub fn to_hex(self) -> [u8; 32] {
        hex(self.0)
    }
}

/// `bits` as 32 lowercase hex digits.
pub(crate) fn hex(bits: u128) -> [u8; 32] {
    // Both digits of a byte from one table: written on every acquire and release (two or
    // three times a request), where a digit at a time cost three times as many steps.
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut byte = 0;
        while byte < 256 {
            pairs[byte] = [DIGITS[byte >> 4], DIGITS[byte & 0xf]];
            byte += 1;
        }
        pairs
    };
    let mut out = [0u8; 32];
    for (digits, byte) in out.chunks_exact_mut(2).zip(bits.to_be_bytes()) {
        digits.copy_from_slice(&PAIRS[usize::from(byte)]);
    }
    out
}

impl fmt::Debug for LockToken {
    /// Shows only the first 8 hex digits: enough to tell holders apart in logs without printing
    /// the secret that would let a reader release the lock.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.to_hex();
        write!(f, "LockToken({}…)", String::from_utf8_lossy(&hex[..8]))
    }
}

impl redis::ToRedisArgs for LockToken {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg(&self.to_hex());
    }
}

/// A number that strictly increases each time a lock key gets a new holder.
///
/// Pass it along with every write the protected handler makes to another system; that system
/// rejects writes carrying a lower token than one it has seen. That keeps the data safe even
/// when a paused holder wakes up after its lock expired and another holder took over.
///
/// Tokens keep rising when the key's counter goes back or is lost with Redis's data (a restart
/// without persistence, an eviction, a failover to a replica that had not received it or
/// whose replication lagged): a token is never below the server's clock in microseconds (a
/// counter that fell behind it is raised to it first), so the first token after such a loss
/// is above every earlier one as long as the new server's clock is ahead of the last token
/// handed out before. That holds when a failover takes longer than the two servers' clocks
/// disagree, plus 250 ms (a store that follows the failover takes the tokens of a key whose
/// counter it saw raised in the last 250 ms by plain commands, which cannot raise it), and
/// when the key took at most one token per microsecond on average (no lock key can; a queue
/// claiming batches of thousands of jobs many times a millisecond could run its counter ahead
/// of the clock).
/// Tokens are therefore large numbers (about 1.8 × 10^15 in 2026, below 2^53: exact in JSON
/// and JavaScript), with gaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

/// Whether a lock hands out [`FencingToken`]s: on by default.
///
/// Off, an uncontended acquire is a plain `SET key token NX PX ttl` (and an `EXISTS` of the
/// key's line in the same round trip), without the `INCR` of the key's counter and the `GET`
/// that proves the token was counted during the hold; handlers then get no token
/// ([`HeldLock::fence`](crate::HeldLock::fence) is `None`). What that costs in safety: a
/// holder paused past its TTL (a GC pause, a stalled VM) can wake up and finish writes after
/// the next holder started, and the systems it writes to cannot tell. Leave it on unless
/// every write under the lock is itself conditional, or idempotent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fencing {
    /// Every holding gets a fencing token, strictly greater than every earlier holder's.
    #[default]
    On,
    /// No fencing tokens: the cheapest acquire.
    Off,
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Fencing counters below this were never raised to the clock: new, or lost with the data
/// (see `lua/fence.lua`). The plain commands of an uncontended acquire leave such a counter to
/// the acquire script, which raises it.
pub(crate) const FENCE_FLOOR: u64 = 1 << 40;

/// How long after a store saw a key's counter raised to the clock it takes the key's tokens by
/// plain commands (`INCR`, which cannot raise a counter): later, its next acquire goes to the
/// script, which raises the counter again (`store/redis/counted.rs`). A counter that went back
/// in a failover (a promoted replica that lagged) is therefore raised above the old primary's
/// tokens by the first acquire on the new primary, unless the failover took less than this.
pub(crate) const FENCE_RAISE_FRESH: std::time::Duration = std::time::Duration::from_millis(250);

/// Hands out `n` tokens from `counter` (the last returned), the first at least `floor` (the
/// wall clock in microseconds): the models' side of `next_fences` in `lua/fence.lua`, so that
/// a new store (a restarted process) starts above the tokens of the one before it.
pub(crate) fn next_fences(counter: &mut u64, n: u64, floor: u64) -> u64 {
    let first = counter.saturating_add(1).max(floor);
    *counter = first.saturating_add(n.saturating_sub(1));
    *counter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_big_endian_and_fixed_width() {
        let token = LockToken(0x0123_4567_89ab_cdef_0000_0000_0000_00ff);
        assert_eq!(&token.to_hex(), b"0123456789abcdef00000000000000ff");
    }

    #[test]
    fn random_tokens_differ() {
        assert_ne!(LockToken::random(), LockToken::random());
    }
}
