//! The pieces every page is made of: escaping, links, the layout.

use std::fmt::Write;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::access::Visitor;
use super::shown::is_invisible;

/// Characters left as they are in a path segment: the unreserved ones.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` safe inside HTML text and attribute values, and shown as it is: characters that
/// would not show as themselves are written as `\u{...}` instead (see [`is_invisible`]), so a
/// name, key, payload or error cannot reorder or hide what the page shows around it.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_invisible(c) => {
                let _ = write!(out, "\\u{{{:X}}}", u32::from(c));
            }
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

/// A whole page: `title`, the navigation (with who reads it, when known), `body`.
pub(super) fn page(base: &str, title: &str, visitor: Option<&Visitor>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 2048);
    let _ = write!(
        out,
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{title} · redefer</title>\
         <meta name=viewport content='width=device-width'><style>{STYLE}</style></head><body>\
         <header><b>redefer</b><a href='{root}'>Queues</a><a href='{base}/locks'>Locks</a>",
        title = escape(title),
        // The root of a mounted dashboard is its mount (`/admin`: axum's `nest` routes no `/admin/`).
        root = if base.is_empty() { "/" } else { base },
    );
    match visitor {
        Some(Visitor::Anyone) => out.push_str("<span>read-only</span>"),
        Some(Visitor::Stranger) => {
            let _ = write!(out, "<a id=login href='{base}/login'>Sign in</a>");
        }
        Some(Visitor::SignedIn { csrf }) => {
            let _ = write!(
                out,
                "<span>signed in</span><form class=inline method=post action='{base}/logout'>\
                 <input type=hidden name=csrf value='{}'><button type=submit id=sign-out>Sign out</button></form>",
                escape(csrf)
            );
        }
        Some(Visitor::Bearer) => out.push_str("<span>token</span>"),
        None => {}
    }
    let _ = write!(
        out,
        "</header><main><h1>{}</h1>{body}</main></body></html>",
        escape(title)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn invisible_and_reordering_characters_are_shown_escaped() {
        assert_eq!(escape("evil\u{202E}gpj.exe"), "evil\\u{202E}gpj.exe");
        assert_eq!(
            escape("a\u{200B}b\u{2066}c\u{FEFF}d\u{0}e\u{1B}f\u{2028}g\u{E0041}h\u{FE0F}"),
            "a\\u{200B}b\\u{2066}c\\u{FEFF}d\\u{0}e\\u{1B}f\\u{2028}g\\u{E0041}h\\u{FE0F}"
        );
        // What shows as itself stays: text in any script, emoji, the newline and the tab.
        assert_eq!(escape("zoë 注文 🙂\tx\ny"), "zoë 注文 🙂\tx\ny");
        assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    }
}
