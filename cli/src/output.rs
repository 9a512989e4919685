//! What a command prints: aligned tables and records for people, JSON for scripts.

use std::io::Write;
use std::time::SystemTime;

use redefer::dashboard::escape_for_terminal;
use redefer::queue::{JobSet, ListedEntry, attempts_in};
use redefer::store::footprint::Footprint;
use serde_json::{Value, json};

/// The footprint as a table (one row per kind, then the totals), or as its JSON record.
pub fn footprint_output(footprint: Footprint) -> Output {
    if !footprint.complete {
        eprintln!(
            "redefer: stopped after {} keys (--max-keys): the counts are of those only",
            footprint.scanned
        );
    }
    let mut rows: Vec<Value> = footprint
        .kinds
        .iter()
        .map(|(kind, found)| {
            json!({
                "kind": kind,
                "keys": found.keys,
                "never_expire": found.never_expire,
                "longest_ttl_ms": found.longest_ttl_ms,
                "lives": found.lifetime.to_string(),
            })
        })
        .collect();
    rows.push(json!({
        "kind": "(all)",
        "keys": footprint.keys(),
        "never_expire": footprint.never_expire(),
        "lives": format!("{} should expire and do not", footprint.unbounded()),
    }));
    Output::Footprint {
        rows,
        record: serde_json::to_value(&footprint).unwrap_or(Value::Null),
    }
}
/// JSON) or summarized (for a table), or why it does not decode.
pub fn entry_row(set: JobSet, entry: &ListedEntry<Value>, whole: bool) -> Value {
    let mut row = json!({ "id": entry.id, set.time_label(): timestamp(entry.at) });
    match &entry.envelope {
        Some(Ok(envelope)) if whole => {
            row["attempts"] = json!(attempts_in(set, envelope.attempt));
            row["last_error"] = json!(envelope.last_error);
            row["payload"] = envelope.payload.clone();
        }
        Some(Ok(envelope)) => {
            row["attempts"] = json!(attempts_in(set, envelope.attempt));
            row["payload"] = Value::String(summary(&envelope.payload));
        }
        Some(Err(error)) => row["undecodable"] = Value::String(error.clone()),
        None => row["undecodable"] = Value::String("no bytes".into()),
    }
    if let Some(reason) = &entry.reason {
        row["reason"] = Value::String(reason.clone());
    }
    row
}

/// The payload as compact JSON, cut to 60 characters.
fn summary(payload: &Value) -> String {
    let text = payload.to_string();
    match text.char_indices().nth(60) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// A time as RFC 3339 (UTC, ms).
pub fn timestamp(time: SystemTime) -> String {
    humantime::format_rfc3339_millis(time).to_string()
}

/// A command's result, printed as the caller asked.
pub enum Output {
    Record(Value),
    Table(Vec<Value>),
    /// Rows for people, a record for scripts.
    Footprint {
        rows: Vec<Value>,
        record: Value,
    },
}

impl Output {
    /// Writes the output to `out`: JSON for scripts, else aligned text for people. An error
    /// is the writer's (a reader that closed the pipe, say): the caller decides what it means.
    pub fn print(self, json: bool, out: &mut impl Write) -> std::io::Result<()> {
        if json {
            let value = match self {
                Output::Record(record) => record,
                Output::Table(rows) => Value::Array(rows),
                Output::Footprint { record, .. } => record,
            };
            serde_json::to_writer_pretty(&mut *out, &value)?;
            writeln!(out)?;
            return out.flush();
        }
        match self {
            Output::Record(Value::Object(fields)) => {
                let width = fields.keys().map(String::len).max().unwrap_or(0);
                for (name, value) in fields {
                    writeln!(out, "{name:<width$}  {}", cell(&value))?;
                }
            }
            Output::Record(other) => writeln!(out, "{}", cell(&other))?,
            Output::Table(rows) | Output::Footprint { rows, .. } => print_table(&rows, out)?,
        }
        out.flush()
    }
}

/// A value as one cell of a line: text as it is, but what would not show as itself (keys,
/// ids and payloads come from outside: escape sequences, bells, line breaks, right-to-left
/// overrides) written `\u{...}`, as the dashboard writes it.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_string(),
        Value::String(text) => escape_for_terminal(text).into_owned(),
        other => escape_for_terminal(&other.to_string()).into_owned(),
    }
}

/// Rows of JSON objects as aligned columns, in the order the fields first appear.
fn print_table(rows: &[Value], out: &mut impl Write) -> std::io::Result<()> {
    if rows.is_empty() {
        return writeln!(out, "(none)");
    }
    let mut columns: Vec<String> = Vec::new();
    for row in rows {
        for name in row.as_object().into_iter().flat_map(|fields| fields.keys()) {
            if !columns.contains(name) {
                columns.push(name.clone());
            }
        }
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| columns.iter().map(|c| cell(&row[c.as_str()])).collect())
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(i, name)| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([name.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |values: &[String]| {
        values
            .iter()
            .zip(&widths)
            .map(|(value, width)| format!("{value:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    writeln!(out, "{}", line(&columns))?;
    for row in cells {
        writeln!(out, "{}", line(&row))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_shows_hostile_text_escaped_on_one_line() {
        let key = Value::String("a\x1b[31mred\x07\0\u{202E}b\nc\td".to_string());
        assert_eq!(cell(&key), "a\\u{1B}[31mred\\u{7}\\u{0}\\u{202E}b\\u{A}c\\u{9}d");
        let payload = serde_json::json!({ "note": "\u{202E}x" });
        assert_eq!(cell(&payload), "{\"note\":\"\\u{202E}x\"}");
    }
}
