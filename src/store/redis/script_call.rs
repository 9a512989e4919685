//! A script's call written as one `EVALSHA` command, for the call every request makes (the
//! short release). redis's `ScriptInvocation` keeps each key and argument in a buffer of its
//! own and copies them into the command it sends: six allocations for a release of one key
//! and one argument, where this makes two.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

/// A call of a script, its keys and arguments written into the command that goes out.
pub(crate) struct ScriptCall<'a> {
    script: &'a Script,
    command: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys`; its arguments follow, by [`arg`](Self::arg).
    pub(crate) fn new(script: &'a Script, keys: &[&str]) -> Self {
        let names: usize = keys.iter().map(|key| key.len()).sum();
        // The command, the hash, the key count, the keys, and room for two short arguments.
        let mut command = Cmd::with_capacity(5 + keys.len(), 128 + names);
        command.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
        for key in keys {
            command.arg(*key);
        }
        ScriptCall { script, command }
    }

    /// Adds an argument (`ARGV`).
    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.command.arg(arg);
        self
    }

    /// Sends the call. A server that lost the script (`NOSCRIPT`: restarted, failed over) is
    /// sent its text, then the call again, as `ScriptInvocation` does.
    pub(crate) async fn invoke<T: FromRedisValue>(&self, conn: &mut impl ConnectionLike) -> RedisResult<T> {
        match self.command.query_async(conn).await {
            Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.command.query_async(conn).await
            }
            answered => answered,
        }
    }
}
