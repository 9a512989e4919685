//! Small SVG plots of a queue's last hour, drawn on the server: no script, no build step.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::html::escape;
use crate::queue::{ACTIVITY_MINUTES, MinuteActivity};

/// The plotting area.
const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 48.0;
/// Room for the value axis's labels on the left, and the time axis's below.
const LEFT: f64 = 34.0;
const BELOW: f64 = 14.0;
const AXIS: &str = "#8a96a3";

/// The last hour of one measure, a value per minute (minutes with nothing counted are 0), up
/// to `now`.
pub(super) fn per_minute(
    activity: &[MinuteActivity],
    now: SystemTime,
    measure: impl Fn(&MinuteActivity) -> f64,
) -> Vec<f64> {
    let now_minute = minute_of(now);
    let mut values = vec![0.0; ACTIVITY_MINUTES as usize];
    for minute in activity {
        let age = now_minute.saturating_sub(minute_of(minute.minute));
        if age < ACTIVITY_MINUTES {
            values[(ACTIVITY_MINUTES - 1 - age) as usize] = measure(minute);
        }
    }
    values
}

fn minute_of(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
        / 60
}

/// A bar per minute, scaled to the largest, with axes: values (0 and the largest, in `unit`)
/// on the left, time (an hour ago, half an hour ago, now) below; each bar's minute and value
/// as its tooltip.
pub(super) fn bars(label: &str, unit: &str, values: &[f64]) -> String {
    let max = values.iter().copied().fold(0.0, f64::max);
    let step = WIDTH / values.len().max(1) as f64;
    let (full_width, full_height) = (LEFT + WIDTH, HEIGHT + BELOW);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<div class=plot><small>{label}, last hour (max {max} {unit})</small>\
         <svg width={full_width} height={full_height} viewBox='0 0 {full_width} {full_height}' role=img aria-label='{label}'>\
         <g font-size=9 fill='{AXIS}'>\
         <text x={y_labels} y=8 text-anchor=end>{max}</text>\
         <text x={y_labels} y={HEIGHT} text-anchor=end>0</text>\
         <text x={LEFT} y={time_labels} text-anchor=start>-60 min</text>\
         <text x={middle} y={time_labels} text-anchor=middle>-30 min</text>\
         <text x={full_width} y={time_labels} text-anchor=end>now</text></g>\
         <line x1={LEFT} y1=0 x2={LEFT} y2={HEIGHT} stroke='{AXIS}'/>\
         <line x1={LEFT} y1={HEIGHT} x2={full_width} y2={HEIGHT} stroke='{AXIS}'/>",
        label = escape(label),
        max = round(max),
        unit = escape(unit),
        y_labels = LEFT - 3.0,
        time_labels = full_height - 2.0,
        middle = LEFT + WIDTH / 2.0,
    );
    if max > 0.0 {
        for (i, value) in values.iter().enumerate() {
            let height = (value / max * (HEIGHT - 2.0)).max(if *value > 0.0 { 1.0 } else { 0.0 });
            let _ = write!(
                svg,
                "<rect x={:.1} y={:.1} width={:.1} height={:.1} fill='#3a78c2'><title>{} min ago: {} {}</title></rect>",
                LEFT + i as f64 * step,
                HEIGHT - height,
                (step - 1.0).max(1.0),
                height,
                values.len() - 1 - i,
                round(*value),
                escape(unit),
            );
        }
    }
    svg.push_str("</svg></div>");
    svg
}

fn round(value: f64) -> String {
    if value >= 10.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_minute_of_the_hour_has_its_bar_and_older_minutes_are_left_out() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 * 60 + 30);
        let at = |minute: u64, done| MinuteActivity {
            done,
            ..MinuteActivity::starting(minute)
        };
        let values = per_minute(&[at(1_000, 5), at(999, 2), at(900, 7)], now, |m| m.done as f64);
        assert_eq!(values.len(), 60);
        assert_eq!((values[59], values[58]), (5.0, 2.0));
        assert_eq!(values.iter().sum::<f64>(), 7.0, "minute 900 is out of the hour");
        let svg = bars("done", "/min", &values);
        assert_eq!(svg.matches("<rect").count(), 60);
        assert!(svg.contains("last hour (max 5 /min)"));
        // Axes: the largest value and 0 on the left, the hour below; each bar says its minute.
        for label in [
            ">5</text>",
            ">0</text>",
            ">-60 min</text>",
            ">-30 min</text>",
            ">now</text>",
        ] {
            assert!(svg.contains(label), "{label} in {svg}");
        }
        assert!(svg.contains("<title>0 min ago: 5 /min</title>"));
        assert!(svg.contains("<title>1 min ago: 2 /min</title>"));
    }
}
