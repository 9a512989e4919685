//! The connections a [`RedisStore`](super::RedisStore) works over.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;

/// A redis-rs connection a [`RedisStore`](crate::RedisStore) can share among tasks: any
/// [`ConnectionLike`] that is `Clone`, `Send` and `Sync` (a
/// [`ManagedConnection`](super::ManagedConnection), a [`ConnectionManager`], a
/// [`MultiplexedConnection`], a cluster's
/// [`ClusterConnection`](redis::cluster_async::ClusterConnection)), by the blanket impl:
/// nothing to implement. The store's impls name these bounds by it, once.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<Conn: ConnectionLike + Clone + Send + Sync + 'static> RedisConnection for Conn {}

/// A connection to one server, not to a cluster: a store over one lists its locks and scans
/// its keys with `SCAN` on that server (a cluster's are scanned node by node). The connections
/// of one server that redefer and redis-rs make: [`ManagedConnection`](super::ManagedConnection),
/// [`ConnectionManager`] and [`MultiplexedConnection`]; sealed (a cluster's connection must not
/// claim to be one).
pub trait SingleServerConnection: RedisConnection + crate::sealed::SealedConnection {}

impl crate::sealed::SealedConnection for super::ManagedConnection {}
impl crate::sealed::SealedConnection for ConnectionManager {}
impl crate::sealed::SealedConnection for MultiplexedConnection {}
impl<Conn: RedisConnection + crate::sealed::SealedConnection> SingleServerConnection for Conn {}

/// A connection to the nodes of a Redis Cluster: a store over one lists its locks and scans its
/// keys node by node, routing by address. redis-rs's [`ClusterConnection`] and the
/// [`ManagedClusterConnection`](super::ManagedClusterConnection)
/// [`connect_cluster`](super::RedisStoreBuilder::connect_cluster) makes; sealed.
pub trait ClusterNodesConnection: RedisConnection + crate::sealed::SealedClusterConnection {
    /// The cluster connection that routes by node now.
    #[doc(hidden)]
    fn cluster(&self) -> ClusterConnection;
}

impl crate::sealed::SealedClusterConnection for ClusterConnection {}
impl crate::sealed::SealedClusterConnection for super::ManagedClusterConnection {}

impl ClusterNodesConnection for ClusterConnection {
    fn cluster(&self) -> ClusterConnection {
        self.clone()
    }
}

impl ClusterNodesConnection for super::ManagedClusterConnection {
    fn cluster(&self) -> ClusterConnection {
        self.current()
    }
}
