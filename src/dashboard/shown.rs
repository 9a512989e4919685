//! Text from outside (keys, ids, payloads, errors) shown to an operator as it is: what would
//! not show as itself is written `\u{...}`, on the dashboard's pages and on a terminal.

use std::borrow::Cow;
use std::fmt::Write;

/// Whether `c` is written escaped: controls but the newline and the tab, format characters
/// (bidirectional overrides and isolates, zero-width spaces and joiners, the BOM, tags), line
/// and paragraph separators, private use and unassigned code points, and the variation
/// selectors (marks that change the character before them, invisibly).
pub(super) fn is_invisible(c: char) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    if c == '\n' || c == '\t' {
        return false;
    }
    matches!(
        c.general_category(),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
            | GeneralCategory::PrivateUse
            | GeneralCategory::Surrogate
            | GeneralCategory::Unassigned
    ) || matches!(c, '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}' | '\u{180B}'..='\u{180F}')
}

/// `text` for one line of an operator's terminal (the `redefer` command's tables and records):
/// the characters the dashboard writes escaped, and every other control character (line
/// breaks and tabs would break the table's rows and columns), written `\u{...}`. Keys come
/// from request data: one holding an escape sequence cannot recolour or rewrite the terminal,
/// ring its bell, or reorder the line around it (a right-to-left override).
///
/// ```
/// use redefer::dashboard::escape_for_terminal;
///
/// assert_eq!(escape_for_terminal("order:7"), "order:7");
/// assert_eq!(escape_for_terminal("a\x1b[31mb\nc\u{202E}"), "a\\u{1B}[31mb\\u{A}c\\u{202E}");
/// ```
pub fn escape_for_terminal(text: &str) -> Cow<'_, str> {
    let hidden = |c: char| c.is_control() || is_invisible(c);
    if !text.chars().any(hidden) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if hidden(c) {
            let _ = write!(out, "\\u{{{:X}}}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}
