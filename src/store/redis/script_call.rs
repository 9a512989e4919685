//! A script's call written as one `EVALSHA` command: how every script of the store is called.
//! redis's `ScriptInvocation` keeps each key and argument in a buffer of its own and copies
//! them into the command it sends (six allocations for a release of one key and one argument,
//! three more per job for an ack); this writes them into the command once.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs};

/// A call of a script, its keys and arguments written into the command that goes out.
pub(crate) struct ScriptCall<'a> {
    script: &'a Script,
    command: Cmd,
}

impl<'a> ScriptCall<'a> {
    /// A call of `script` on `keys` (`KEYS`, in order); its arguments follow, by
    /// [`arg`](Self::arg).
    pub(crate) fn new<'k>(
        script: &'a Script,
        keys: impl IntoIterator<Item = &'k str, IntoIter: Clone>,
    ) -> Self {
        let keys = keys.into_iter();
        let (count, names) = keys
            .clone()
            .fold((0, 0), |(count, names), key| (count + 1, names + key.len()));
        // The command, the hash, the key count, the keys, and room for two short arguments.
        let mut command = Cmd::with_capacity(5 + count, 128 + names);
        command.arg("EVALSHA").arg(script.get_hash()).arg(count);
        for key in keys {
            command.arg(key);
        }
        ScriptCall { script, command }
    }

    /// Adds an argument (`ARGV`).
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
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
