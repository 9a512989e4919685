//! How many may hold a key at once: what tells the lock from the semaphore in the one family
//! of store operations they share.

/// How many may hold a key at once.
///
/// ```
/// use redefer::lock::Holders;
///
/// assert_eq!(Holders::Permits(4).limit(), 4);
/// assert_eq!(Holders::One.limit(), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Holders {
    /// One holder: the lock (`SET key token NX PX ttl`).
    One,
    /// Up to this many holders, each with a permit of its own (a semaphore: a set of leases).
    /// 0 admits nobody: the key is closed.
    Permits(u32),
}

impl Holders {
    /// The most holders at once.
    pub fn limit(self) -> u32 {
        match self {
            Holders::One => 1,
            Holders::Permits(permits) => permits,
        }
    }
}
