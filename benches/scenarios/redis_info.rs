//! Redis's own accounting, read from INFO: what the server spent, not what the client saw.

use crate::support::RedisServer;

/// Starts the command statistics afresh.
pub async fn reset(server: &RedisServer) {
    let _: () = server
        .cmd(&redis::cmd("CONFIG").arg("RESETSTAT").to_owned())
        .await;
}

/// One field (`calls`, `usec`, `usec_per_call`) of one command's statistics; 0 if it never ran.
pub async fn commandstat(server: &RedisServer, command: &str, field: &str) -> f64 {
    let info: String = server.cmd(redis::cmd("INFO").arg("commandstats")).await;
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0)
}

/// The server's memory in use, in bytes.
pub async fn used_memory(server: &RedisServer) -> u64 {
    let info: String = server.cmd(redis::cmd("INFO").arg("memory")).await;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory has used_memory")
}
