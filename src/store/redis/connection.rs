//! The connections a [`RedisStore`](super::RedisStore) works over.

use redis::aio::ConnectionLike;

/// A redis-rs connection a [`RedisStore`](crate::RedisStore) can share among tasks: any
/// [`ConnectionLike`] that is `Clone`, `Send` and `Sync` (a
/// [`ConnectionManager`](redis::aio::ConnectionManager), a
/// [`MultiplexedConnection`](redis::aio::MultiplexedConnection), a cluster's
/// [`ClusterConnection`](redis::cluster_async::ClusterConnection)), by the blanket impl:
/// nothing to implement. The store's impls name these bounds by it, once.
pub trait RedisConnection: ConnectionLike + Clone + Send + Sync + 'static {}

impl<Conn: ConnectionLike + Clone + Send + Sync + 'static> RedisConnection for Conn {}
