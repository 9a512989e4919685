//! Small SVG plots of a queue's last hour, drawn on the server: no script, no build step.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::html::escape;
use crate::queue::{ACTIVITY_MINUTES, MinuteActivity};

const WIDTH: f64 = 240.0;
const HEIGHT: f64 = 48.0;

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

/// A bar per minute, scaled to the largest, with its label and the largest value.
pub(super) fn bars(label: &str, unit: &str, values: &[f64]) -> String {
    let max = values.iter().copied().fold(0.0, f64::max);
    let step = WIDTH / values.len().max(1) as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<div class=plot><small>{}, last hour (max {} {})</small>\
         <svg width={WIDTH} height={HEIGHT} viewBox='0 0 {WIDTH} {HEIGHT}' role=img aria-label='{}'>\
         <line x1=0 y1={HEIGHT} x2={WIDTH} y2={HEIGHT} stroke='#c5ccd3'/>",
        escape(label),
        round(max),
        escape(unit),
        escape(label),
    );
    if max > 0.0 {
        for (i, value) in values.iter().enumerate() {
            let height = (value / max * (HEIGHT - 2.0)).max(if *value > 0.0 { 1.0 } else { 0.0 });
            let _ = write!(
                svg,
                "<rect x={:.1} y={:.1} width={:.1} height={:.1} fill='#3a78c2'/>",
                i as f64 * step,
                HEIGHT - height,
                (step - 1.0).max(1.0),
                height
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
    }
}
