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

/// Every command's statistics since the last reset: (name, calls, µs). Subcommands come as
/// `config|resetstat`.
pub async fn commandstats(server: &RedisServer) -> Vec<(String, f64, f64)> {
    let info: String = server.cmd(redis::cmd("INFO").arg("commandstats")).await;
    info.lines()
        .filter_map(|line| {
            let (command, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |name: &str| -> f64 {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0.0)
            };
            Some((command.to_string(), field("calls"), field("usec")))
        })
        .collect()
}

/// The server's CPU time so far, user plus system (`INFO cpu`): what serving cost it, network
/// I/O included.
pub async fn cpu_time(server: &RedisServer) -> std::time::Duration {
    let info: String = server.cmd(redis::cmd("INFO").arg("cpu")).await;
    let seconds: f64 = info
        .lines()
        .filter_map(|line| {
            let value = line
                .strip_prefix("used_cpu_user:")
                .or_else(|| line.strip_prefix("used_cpu_sys:"))?;
            value.trim().parse::<f64>().ok()
        })
        .sum();
    std::time::Duration::from_secs_f64(seconds)
}

/// The server's memory in use, in bytes.
pub async fn used_memory(server: &RedisServer) -> u64 {
    let info: String = server.cmd(redis::cmd("INFO").arg("memory")).await;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory has used_memory")
}
