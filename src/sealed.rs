//! The seal of the store traits: only the crate's own stores implement them, so that
//! operations can be added without breaking anyone.

use crate::key::Prefix;

/// The supertrait that seals the store traits: public, so it can bound them, in a private
/// module, so no other crate can name it to implement it.
pub trait Sealed: Sized {
    /// The same store with its keys under `prefix` (a store without key names ignores it).
    fn under_prefix(self, prefix: Prefix) -> Self;

    /// Which store this is: the same for its clones, another for the same store under another
    /// prefix (and for a store opened apart, even over the same server). A guard tells by it
    /// whether its caller already holds a key in it.
    fn instance(&self) -> u64;
}

/// The seal of [`Guard`](crate::guard::Guard): only the crate's layers are guards, so that the
/// call path can change without breaking anyone.
pub trait SealedGuard {}

/// The seal of [`SingleServerConnection`](crate::store::SingleServerConnection): only the
/// connections known to reach one server are.
pub trait SealedConnection {}

/// The seal of [`ClusterNodesConnection`](crate::store::ClusterNodesConnection): only the
/// connections known to reach a cluster's nodes are.
pub trait SealedClusterConnection {}

/// The seal of the kinds of connection redefer knows how to replace (its managed connections').
pub trait SealedReconnect {}
