//! Tables, rates and percentiles.

use std::process::Command;

use crate::support::Server;
use std::time::Duration;

/// A markdown table, printed when complete.
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Self {
        Table {
            title: title.to_string(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        println!("\n### {}\n", self.title);
        println!("| {} |", self.header.join(" | "));
        println!(
            "|{}|",
            self.header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
        );
        for row in &self.rows {
            println!("| {} |", row.join(" | "));
        }
    }
}

/// Operations per second.
pub fn rate(ops: usize, elapsed: Duration) -> f64 {
    ops as f64 / elapsed.as_secs_f64()
}

pub fn per_s(rate: f64) -> String {
    format!("{rate:.0}/s")
}

pub fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

pub fn us(duration: Duration) -> String {
    format!("{:.0} µs", duration.as_secs_f64() * 1e6)
}

/// The `q` quantile (0 to 1) of unsorted samples.
pub fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let at = ((samples.len() as f64 * q) as usize).min(samples.len() - 1);
    samples[at]
}

/// The server's name and version, from its `--version`.
pub fn server_version(server: Server) -> String {
    let (binary, name) = match server {
        Server::Redis => ("redis-server".into(), "Redis"),
        Server::Valkey => (server.binary().unwrap_or_default(), "Valkey"),
    };
    let version = Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .find_map(|word| word.strip_prefix("v=").map(str::to_string))
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{name} {version}")
}

/// The machine and versions, once per run.
pub fn machine() {
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .output()
            .ok()
            .map(|out| {
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_else(|| "unknown".to_string())
    };
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    println!("## Machine\n");
    println!(
        "- CPU: {cpu}, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("- {}", output("redis-server", &["--version"]));
    if Server::Valkey.available() {
        println!("- {}", server_version(Server::Valkey));
    }
    println!("- {}", output("rustc", &["--version"]));
    println!("- node {}", output("node", &["--version"]));
}

/// One figure measured over interleaved rounds: shown as its median and range.
pub fn spread(values: &[f64], show: impl Fn(f64) -> String) -> String {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    match (values.first(), values.get(values.len() / 2), values.last()) {
        (Some(min), Some(median), Some(max)) if values.len() > 1 => {
            format!("{} [{}–{}]", show(*median), show(*min), show(*max))
        }
        (Some(only), _, _) => show(*only),
        _ => "-".to_string(),
    }
}

/// The median of `values` (NaN when empty).
pub fn median(values: &[f64]) -> f64 {
    let mut values = values.to_vec();
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}
