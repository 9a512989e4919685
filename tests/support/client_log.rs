//! What redis-rs logged lately (a module of the test binaries that use it, beside `support`):
//! its cluster client says through the `log` crate when it refreshes its slot map, reconnects
//! a node or gives up on one, which is what a failure of a test over a cluster needs to be
//! understood and nothing else in the test can see.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// How many of the latest records are kept (a record repeated at once counts once).
const KEPT: usize = 400;

struct ClientLog {
    started: Instant,
    records: Mutex<VecDeque<Record>>,
}

/// One record, or a run of the same record: the client retries a dead node every few
/// milliseconds, and its repeats would push out what came before.
struct Record {
    first_seconds: f64,
    text: String,
    repeats: usize,
}

impl log::Log for ClientLog {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.target().starts_with("redis") && metadata.level() <= log::Level::Debug
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = format!("{:5} {}", record.level(), record.args());
        let mut records = self
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(last) = records.back_mut().filter(|last| last.text == text) {
            last.repeats += 1;
            return;
        }
        if records.len() == KEPT {
            records.pop_front();
        }
        records.push_back(Record {
            first_seconds: self.started.elapsed().as_secs_f64(),
            text,
            repeats: 1,
        });
    }

    fn flush(&self) {}
}

fn client_log() -> &'static ClientLog {
    static LOG: OnceLock<ClientLog> = OnceLock::new();
    LOG.get_or_init(|| ClientLog {
        started: Instant::now(),
        records: Mutex::default(),
    })
}

/// Starts keeping redis-rs's records (once per process; later calls change nothing).
pub fn keep() {
    if log::set_logger(client_log()).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
}

/// The latest records, one a line, oldest first (seconds since [`keep`] first ran).
pub fn latest() -> String {
    let records = client_log()
        .records
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    records
        .iter()
        .map(|record| match record.repeats {
            1 => format!("{:9.3}s {}", record.first_seconds, record.text),
            repeats => format!("{:9.3}s {} (x{repeats})", record.first_seconds, record.text),
        })
        .collect::<Vec<_>>()
        .join("\n")
}
