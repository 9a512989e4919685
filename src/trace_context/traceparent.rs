//! The W3C `traceparent` header: parsed from bytes a store hands back, written canonically.

use std::fmt;

/// A parsed W3C `traceparent`: the trace, the parent span within it, and the trace flags.
///
/// ```
/// use redefer::trace_context::TraceParent;
///
/// let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
/// assert_eq!(parent.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
/// assert!(TraceParent::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    flags: u8,
}

/// `00-` + 32 + `-` + 16 + `-` + 2: a version-00 header; later versions may append `-...`.
const LEN: usize = 55;
/// The sampled bit of the trace flags.
const SAMPLED: u8 = 0x01;

impl TraceParent {
    /// A parent from its parts. `None` if either id is all zeros (invalid in W3C Trace
    /// Context).
    pub fn new(trace_id: [u8; 16], span_id: [u8; 8], flags: u8) -> Option<Self> {
        let valid = trace_id != [0; 16] && span_id != [0; 8];
        valid.then_some(TraceParent {
            trace_id,
            span_id,
            flags,
        })
    }

    /// Parses a `traceparent` header as a receiver must (W3C Trace Context level 1, 3.2):
    /// lower-case hex only; version `ff` and all-zero ids rejected; a version above `00` may
    /// carry more fields after the flags, which are ignored. `None` for anything else.
    pub fn parse(header: &str) -> Option<Self> {
        // Bytes, never `str` slices: a hostile header may put a multi-byte character anywhere.
        let bytes = header.as_bytes();
        if bytes.len() < LEN || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        let [version] = hex::<1>(&bytes[0..2])?;
        let exact = match version {
            0xff => return None,
            0x00 => bytes.len() == LEN,
            _ => bytes.len() == LEN || bytes[LEN] == b'-',
        };
        if !exact {
            return None;
        }
        let [flags] = hex::<1>(&bytes[53..55])?;
        TraceParent::new(hex(&bytes[3..35])?, hex(&bytes[36..52])?, flags)
    }

    /// The trace's id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The id of the span the job continues from (the span that stored it).
    pub fn span_id(&self) -> [u8; 8] {
        self.span_id
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// Whether the trace was sampled where the job was stored.
    pub fn is_sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }
}

/// Written as version `00`, the one this crate speaks.
impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("00-")?;
        self.trace_id
            .iter()
            .try_for_each(|byte| write!(f, "{byte:02x}"))?;
        f.write_str("-")?;
        self.span_id.iter().try_for_each(|byte| write!(f, "{byte:02x}"))?;
        write!(f, "-{:02x}", self.flags)
    }
}

/// `N` bytes from `2N` lower-case hex digits.
fn hex<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_header_round_trips() {
        let parent = TraceParent::parse(VALID).expect("valid");
        assert_eq!(parent.to_string(), VALID);
        assert_eq!(parent.trace_id()[0], 0x4b);
        assert!(parent.is_sampled());
    }

    #[test]
    fn what_a_receiver_must_reject_is_rejected() {
        for header in [
            "",
            &VALID[..54],
            &format!("{VALID}-"),  // version 00 is exact
            &VALID.to_uppercase(), // lower-case only
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // version ff
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01", // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", // zero span id
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01", // separator
            "00-4bf92f3577b34da6a3ce929d0e0e473é-00f067aa0ba902b7-01", // multi-byte char
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", // not hex
        ] {
            assert_eq!(TraceParent::parse(header), None, "{header:?}");
        }
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next";
        let parent = TraceParent::parse(later).expect("a later version parses");
        assert_eq!(parent.to_string(), VALID);
        assert_eq!(TraceParent::parse(&later.replace("01-w", "01w")), None);
    }
}
