//! The pieces every page is made of: escaping, links, the layout.

use std::fmt::Write;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Characters left as they are in a path segment: the unreserved ones.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` safe inside HTML text and attribute values.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// `text` as one path segment or query value of a URL.
pub(super) fn encode(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A time as RFC 3339 (UTC, seconds).
pub(super) fn time(at: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

const STYLE: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1c2430;background:#f6f7f9}
header{background:#1c2430;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:center}
header a{color:#cfe3ff;text-decoration:none}header b{font-size:16px}
main{padding:16px 24px;max-width:1200px}
table{border-collapse:collapse;width:100%;background:#fff;margin:8px 0 16px}
th,td{border-bottom:1px solid #e3e6ea;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font:12px ui-monospace,monospace}pre{background:#fff;padding:8px;border:1px solid #e3e6ea;overflow:auto}
.tabs a{margin-right:12px}.tabs a.on{font-weight:700;text-decoration:none;color:#1c2430}
.bad{color:#b00020}.notice{background:#e7f5e9;border:1px solid #9bd3a2;padding:6px 10px}
.paused{background:#fff4d6;border:1px solid #e9c46a;padding:6px 10px}
form.inline{display:inline}button{font:inherit;padding:2px 8px;cursor:pointer}
.plots{display:flex;gap:16px;flex-wrap:wrap}.plot{background:#fff;border:1px solid #e3e6ea;padding:6px}
.plot small{display:block;color:#5a6472}
";

/// A whole page: `title`, the navigation, `body`.
pub(super) fn page(base: &str, title: &str, signed_in: Option<bool>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let _ = write!(
        out,
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{title} · redefer</title>\
         <meta name=viewport content='width=device-width'><style>{STYLE}</style></head><body>\
         <header><b>redefer</b><a href='{base}/'>Queues</a><a href='{base}/locks'>Locks</a>",
        title = escape(title),
    );
    match signed_in {
        Some(true) => {
            let _ = write!(out, "<span>signed in</span>");
        }
        Some(false) => {
            let _ = write!(out, "<a id=login href='{base}/login'>Sign in to act</a>");
        }
        None => {
            let _ = write!(out, "<span>read-only</span>");
        }
    }
    let _ = write!(
        out,
        "</header><main><h1>{}</h1>{body}</main></body></html>",
        escape(title)
    );
    out
}
