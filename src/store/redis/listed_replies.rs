//! A listing's replies, read one by one around the values it cannot read.

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Pipeline, Value};

use crate::error::StoreError;

/// How much of a value that could not be read a listing shows.
const EXCERPT: usize = 40;

/// The replies of the commands that describe one listed key, in their order.
///
/// A reply that is not what redefer writes there (another tool's key under the prefix, a
/// damaged value) is noted and read as missing: one such key neither stops the listing nor
/// hides the keys after it, and the listing says what it could not read
/// ([`LockInfo::unreadable`](crate::store::LockInfo::unreadable)). A connection that fails
/// still fails the listing.
pub(crate) struct ListedReplies {
    replies: std::vec::IntoIter<Value>,
    unreadable: Vec<String>,
}

impl ListedReplies {
    /// Sends `commands` and keeps their replies, a command's error among them.
    pub(crate) async fn query(
        commands: &mut Pipeline,
        conn: &mut impl ConnectionLike,
    ) -> Result<Self, StoreError> {
        let replies: Vec<Value> = commands.ignore_errors().query_async(conn).await?;
        Ok(ListedReplies {
            replies: replies.into_iter(),
            unreadable: Vec::new(),
        })
    }

    /// The next reply as a `T`; `None`, noted as `what` unreadable, when it is not one.
    pub(crate) fn next<T: FromRedisValue>(&mut self, what: &str) -> Option<T> {
        let reply = self.replies.next().unwrap_or(Value::Nil);
        match redis::from_redis_value_ref::<T>(&reply) {
            Ok(read) => Some(read),
            Err(_) => {
                let why = match &reply {
                    Value::ServerError(error) => {
                        format!("{what}: {} {}", error.code(), error.details().unwrap_or(""))
                    }
                    // Quoted as it is, not as Rust's `{:?}` writes it: whoever shows the
                    // note escapes what would not show as itself, as it does the key's name
                    // (`\u{1B}` on a terminal and on the dashboard, `\u001b` in JSON).
                    Value::BulkString(bytes) => format!("{what} holds \"{}\"", excerpt(bytes)),
                    other => format!("{what} holds a {}", kind(other)),
                };
                self.note(why.trim_end().to_string());
                None
            }
        }
    }

    /// Notes `why` a part of the key could not be read.
    pub(crate) fn note(&mut self, why: String) {
        self.unreadable.push(why);
    }

    /// What could not be read, in the order met; `None` when everything was.
    pub(crate) fn unreadable(self) -> Option<String> {
        (!self.unreadable.is_empty()).then(|| self.unreadable.join("; "))
    }
}

/// The start of a value, as text (a long value is cut: it is shown to say what is there).
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(EXCERPT)]);
    if bytes.len() > EXCERPT {
        format!("{text}...")
    } else {
        text.into_owned()
    }
}

/// What kind of reply `value` is, for a note.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nothing",
        Value::Int(_) => "number",
        Value::Array(_) | Value::Set(_) => "list",
        Value::Map(_) => "map",
        _ => "value of another kind",
    }
}
