//! The jobs of a claim's reply, as `lua/queue_claim.lua` packs them with `cmsgpack` into one
//! string: a MessagePack array of three entries per job, its due time in ms since the epoch
//! (an integer), its id and its envelope (strings, as stored); the empty string for no job.
//!
//! One string, not three values per job: redis-rs parses each value of a reply on its own, and
//! that cost the client more per drained job than decoding the job's envelope; `cmsgpack`
//! packs them in C, for less than the script built a table to reply with. The bytes come from
//! outside (a script replaced, a reply cut short): anything else than this layout is an error,
//! never a panic (`fuzz::claim_reply_decoding`).

/// One claimed job, borrowed from the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PackedJob<'a> {
    /// When it was due, in ms since the epoch (the server's clock).
    pub(crate) due_ms: i64,
    /// The job's id, as stored (the claim script does not check it).
    pub(crate) id: &'a [u8],
    /// Its envelope, as stored.
    pub(crate) envelope: &'a [u8],
}

/// The jobs of a packed claim's reply, in order.
pub(crate) fn packed_jobs(reply: &[u8]) -> Result<Vec<PackedJob<'_>>, String> {
    if reply.is_empty() {
        return Ok(Vec::new());
    }
    let mut rest = reply;
    let entries = rmp::decode::read_array_len(&mut rest).map_err(|error| malformed(&error))?;
    if entries % 3 != 0 {
        return Err(format!(
            "a claim's reply holds {entries} entries, not three per job"
        ));
    }
    // Each job takes at least three bytes: a count from outside reserves no more than that.
    let mut jobs = Vec::with_capacity((entries as usize / 3).min(rest.len() / 3));
    for _ in 0..entries / 3 {
        let due_ms = rmp::decode::read_int(&mut rest).map_err(|error| malformed(&error))?;
        let id = string(&mut rest)?;
        let envelope = string(&mut rest)?;
        jobs.push(PackedJob { due_ms, id, envelope });
    }
    if !rest.is_empty() {
        return Err(format!("a claim's reply has {} bytes past its jobs", rest.len()));
    }
    Ok(jobs)
}

/// `jobs` packed as the claim script packs them (the fuzz target's round trip, the tests).
pub(crate) fn pack(jobs: &[PackedJob<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    if jobs.is_empty() {
        return out;
    }
    let length = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
    // Writes to a Vec do not fail.
    let _ = rmp::encode::write_array_len(&mut out, length(3 * jobs.len()));
    for job in jobs {
        let _ = rmp::encode::write_sint(&mut out, job.due_ms);
        for bytes in [job.id, job.envelope] {
            let _ = rmp::encode::write_str_len(&mut out, length(bytes.len()));
            out.extend_from_slice(bytes);
        }
    }
    out
}

/// A MessagePack string's bytes, `rest` moved past them.
fn string<'a>(rest: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let len = rmp::decode::read_str_len(rest).map_err(|error| malformed(&error))? as usize;
    if rest.len() < len {
        return Err(format!("a claim's reply ends inside a string of {len} bytes"));
    }
    let (bytes, after) = rest.split_at(len);
    *rest = after;
    Ok(bytes)
}

fn malformed(error: &dyn std::fmt::Display) -> String {
    format!("a claim's reply is not the jobs it packs: {error}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_read_back_in_order() {
        let expected = [
            PackedJob {
                due_ms: 1_700_000_000_000,
                id: b"job",
                envelope: b"{\"a\":1}",
            },
            PackedJob {
                due_ms: 5,
                id: b"x",
                envelope: b"",
            },
        ];
        let reply = pack(&expected);
        assert_eq!(packed_jobs(&reply).unwrap(), expected);
        assert_eq!(packed_jobs(b"").unwrap(), []);
    }

    #[test]
    fn a_reply_cut_short_or_malformed_is_an_error() {
        let reply = pack(&[PackedJob {
            due_ms: 17,
            id: b"job",
            envelope: b"{\"a\":1}",
        }]);
        for cut in 1..reply.len() {
            assert!(packed_jobs(&reply[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = reply.clone();
        longer.push(0);
        assert!(packed_jobs(&longer).is_err());
        // Two entries where three make a job; a float where the due time goes.
        assert!(packed_jobs(&[0x92, 0x01, 0xa0]).is_err());
        assert!(packed_jobs(&[0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xa0, 0xa0]).is_err());
    }
}
