//! The rules both stores apply to what they find in a queue, in one place: the job id rule,
//! the limits, and the reasons a claim buries an entry with. The in-memory store uses these
//! directly; the Redis scripts spell the same values in Lua, and a unit test of
//! `store/redis/scripts.rs` checks that they do.

use std::time::Duration;

/// The longest job id, in bytes.
pub const MAX_JOB_ID_LEN: usize = 128;

/// The most entries one listing, requeue, ack or purge call handles: the bound on one script's
/// work.
pub const MAX_PAGE: usize = 1000;

/// The longest lease a claim or an extension grants; longer ones are cut to it. No lease ends
/// later than this from now, so a claim treats an in-flight entry whose deadline is later
/// (written by another client: `+inf`, say) as expired.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// Whether `byte` may appear in a job id: an ASCII letter or digit, `_`, `.` or `-`.
pub(crate) fn is_job_id_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-')
}

/// Why an entry whose id no job of ours can have was buried.
pub(crate) const NOT_A_JOB_ID: &str = "not a job id: up to 128 of A-Z a-z 0-9 _ . -";

/// Why an entry without bytes was buried.
pub(crate) const NO_ENVELOPE: &str = "the job has no envelope (deleted or never written by redefer)";

/// The fixed parts of [`oversized`], around the size and the limit.
pub(crate) const OVERSIZED: [&str; 2] = ["the envelope is ", " bytes, over the limit of "];

/// Why an entry whose bytes are over the claimer's limit was buried.
pub(crate) fn oversized(size: usize, max: usize) -> String {
    let [before_size, before_max] = OVERSIZED;
    format!("{before_size}{size}{before_max}{max}")
}

/// The fixed parts of [`lease_ran_out`], around the count.
pub(crate) const LEASE_RAN_OUT: [&str; 2] = ["its lease ran out ", " times: the handler crashed or hung"];

/// Why a job whose lease ran out `expiries` times was buried.
pub(crate) fn lease_ran_out(expiries: u32) -> String {
    let [before, after] = LEASE_RAN_OUT;
    format!("{before}{expiries}{after}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_reason_states_the_rule() {
        assert!(NOT_A_JOB_ID.contains(&format!("up to {MAX_JOB_ID_LEN} ")));
        let allowed: String = (0..=u8::MAX)
            .filter(|&b| is_job_id_byte(b) && !b.is_ascii_alphanumeric())
            .map(char::from)
            .collect();
        assert_eq!(allowed, "-._");
    }

    #[test]
    fn reasons_read_as_before() {
        assert_eq!(
            oversized(70, 64),
            "the envelope is 70 bytes, over the limit of 64"
        );
        assert_eq!(
            lease_ran_out(5),
            "its lease ran out 5 times: the handler crashed or hung"
        );
    }
}
