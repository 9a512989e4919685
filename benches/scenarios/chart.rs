//! Charts of a run's main comparisons, written as SVG: one horizontal bar per contender at its
//! median over the rounds, a whisker from the smallest to the largest round, the median written
//! at the bar's end. Into `target/bench-charts/`, or where `REDEFER_BENCH_CHARTS` says: the
//! charts beside BENCHMARKS.md (`docs/bench/`) are the recorded full run's, and a run of some
//! scenarios (a before-and-after comparison) would otherwise rewrite them in the source tree.

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::Size;
use crate::report::median;
use crate::support::{RedisServer, Server};

/// A chart being filled: groups of bars, each bar one contender's figures over the rounds.
pub struct Chart {
    title: String,
    unit: String,
    groups: Vec<(String, Vec<Bar>)>,
}

/// One contender: its label and its figures over the rounds.
type Bar = (String, Vec<f64>);

const WIDTH: f64 = 760.0;
const LABEL_WIDTH: f64 = 300.0;
const BAR_HEIGHT: f64 = 18.0;
const BAR_GAP: f64 = 6.0;
const GROUP_GAP: f64 = 26.0;
const TOP: f64 = 44.0;
/// Room at the right for the median's text.
const VALUE_WIDTH: f64 = 110.0;

impl Chart {
    /// A chart titled `title` whose values are in `unit` (`requests/s`, `µs per job`).
    pub fn new(title: &str, unit: &str) -> Self {
        Chart {
            title: title.to_string(),
            unit: unit.to_string(),
            groups: Vec::new(),
        }
    }

    /// Starts a group of bars (a concurrency, a workload) headed `label`.
    pub fn group(&mut self, label: &str) {
        self.groups.push((label.to_string(), Vec::new()));
    }

    /// A bar in the current group: `label`'s figures over the rounds.
    pub fn bar(&mut self, label: &str, values: &[f64]) {
        if self.groups.is_empty() {
            self.group("");
        }
        if let Some((_, bars)) = self.groups.last_mut() {
            bars.push((label.to_string(), values.to_vec()));
        }
    }

    /// Writes the chart to `<name>-<server>.svg` in the charts' folder (see above) in a full
    /// run (a smoke run's figures are not measurements) and says where.
    pub fn write(&self, name: &str, server: &RedisServer, size: Size) {
        if size.smoke() {
            return;
        }
        let server = match server.kind() {
            Server::Redis => "redis",
            Server::Valkey => "valkey",
        };
        let folder = std::env::var_os("REDEFER_BENCH_CHARTS").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-charts"),
            PathBuf::from,
        );
        let path = folder.join(format!("{name}-{server}.svg"));
        let written = std::fs::create_dir_all(path.parent().expect("a parent directory"))
            .and_then(|()| std::fs::write(&path, self.svg()));
        match written {
            Ok(()) => println!("\nchart: {}", path.display()),
            Err(error) => println!("\nno chart {}: {error}", path.display()),
        }
    }

    fn svg(&self) -> String {
        let bars: usize = self.groups.iter().map(|(_, bars)| bars.len()).sum();
        let height = TOP + self.groups.len() as f64 * GROUP_GAP + bars as f64 * (BAR_HEIGHT + BAR_GAP) + 30.0;
        let largest = self
            .groups
            .iter()
            .flat_map(|(_, bars)| bars.iter().flat_map(|(_, values)| values.iter().copied()))
            .fold(0.0_f64, f64::max)
            .max(f64::MIN_POSITIVE);
        let scale = (WIDTH - LABEL_WIDTH - VALUE_WIDTH) / largest;
        let mut svg = String::new();
        let _ = write!(
            svg,
            r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="#fff"/>
<text x="10" y="20" font-size="14" font-weight="bold">{}</text>
<text x="10" y="36" fill="#555">{}: bar at the median of the rounds, whisker from the smallest to the largest</text>
"##,
            escape(&self.title),
            escape(&self.unit),
        );
        let mut y = TOP;
        for (label, bars) in &self.groups {
            y += GROUP_GAP;
            let _ = writeln!(
                svg,
                r##"<text x="10" y="{}" font-weight="bold">{}</text>"##,
                y - 8.0,
                escape(label)
            );
            for (index, (bar, values)) in bars.iter().enumerate() {
                let (low, mid, high) = (
                    values.iter().copied().fold(f64::INFINITY, f64::min),
                    median(values),
                    values.iter().copied().fold(0.0_f64, f64::max),
                );
                let color = PALETTE[index % PALETTE.len()];
                let whisker_y = y + BAR_HEIGHT / 2.0;
                let _ = write!(
                    svg,
                    r##"<text x="{}" y="{}" text-anchor="end">{}</text>
<rect x="{LABEL_WIDTH}" y="{y}" width="{:.1}" height="{BAR_HEIGHT}" fill="{color}"/>
<line x1="{:.1}" y1="{whisker_y}" x2="{:.1}" y2="{whisker_y}" stroke="#222" stroke-width="1.5"/>
<text x="{:.1}" y="{}">{}</text>
"##,
                    LABEL_WIDTH - 8.0,
                    y + BAR_HEIGHT - 4.0,
                    escape(bar),
                    mid * scale,
                    LABEL_WIDTH + low * scale,
                    LABEL_WIDTH + high * scale,
                    LABEL_WIDTH + high.max(mid) * scale + 6.0,
                    y + BAR_HEIGHT - 4.0,
                    figure(mid),
                );
                y += BAR_HEIGHT + BAR_GAP;
            }
        }
        svg.push_str("</svg>\n");
        svg
    }
}

/// Bar colors, one per contender of a group, readable in grey too.
const PALETTE: [&str; 5] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#7f7f7f", "#9467bd"];

/// A figure as the tables show it: whole numbers past 100, else two significant decimals.
fn figure(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
