//! How many may hold a key at once: what tells the lock from the semaphore in the one family
//! of store operations they share.

/// How many may hold a key at once.
///
/// ```
/// use redefer::lock::Holders;
///
/// assert_eq!(Holders::Permits(4).limit(), 4);
/// assert_eq!(Holders::Writer(4).limit(), 4);
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
    /// One holder alone on a key whose readers share this many permits: the writer of a
    /// [read-write lock](crate::read_write), who waits for every reader to leave and is
    /// waited for by the readers that come after it. A reader holds one of the
    /// [`Permits`](Holders::Permits) of the same key.
    Writer(u32),
}

impl Holders {
    /// The most holders at once: for a writer, the most readers it excludes.
    pub fn limit(self) -> u32 {
        match self {
            Holders::One => 1,
            Holders::Permits(permits) | Holders::Writer(permits) => permits,
        }
    }

    /// Whether the holder holds a key that readers share alone.
    pub(crate) fn writes(self) -> bool {
        matches!(self, Holders::Writer(_))
    }
}
