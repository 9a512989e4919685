//! What a request does to its key: reads it (beside other readers) or writes it (alone).

/// Whether a request reads its key, beside other readers, or writes it, alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Reads the key: runs beside other readers (up to the layer's
    /// [`readers`](crate::read_write::ReadWriteLayer::readers) limit), never beside a writer.
    Read,
    /// Writes the key: runs alone.
    Write,
}

impl Access {
    /// `"read"` or `"write"`, as logs and metrics name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Says whether a request reads or writes its key.
///
/// Implemented for every `Fn(&Req) -> Access`:
///
/// ```
/// use redefer::read_write::{Access, AccessExtractor};
///
/// struct Request { method: &'static str }
///
/// let by_method = |r: &Request| if r.method == "GET" { Access::Read } else { Access::Write };
/// assert_eq!(by_method.access(&Request { method: "GET" }), Access::Read);
/// assert_eq!(by_method.access(&Request { method: "PUT" }), Access::Write);
/// ```
pub trait AccessExtractor<Req> {
    /// What `request` does to its key.
    fn access(&self, request: &Req) -> Access;
}

impl<Req, F> AccessExtractor<Req> for F
where
    F: Fn(&Req) -> Access,
{
    fn access(&self, request: &Req) -> Access {
        self(request)
    }
}
