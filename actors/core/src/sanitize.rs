//! Text from outside made safe for a terminal.
//!
//! Owns the one rule for every byte fleetd writes into an agent's terminal (message bodies,
//! ticket headers, replies, alerts, mail from other hosts) and for member text the CLI shows a
//! person: C0 controls other than newline and tab, DEL, C1 controls and the bidirectional
//! overrides never reach a terminal as such. They are shown visibly instead (`^[` for ESC, `^M`
//! for a lone CR, `<U+009B>` for a C1 control), so nothing is silently lost, and the caller
//! learns what was altered so the receipt can say so. CRLF is normalised to LF (not counted as
//! an alteration). [`paste_bytes`] builds the bytes of one bracketed paste from such text: by
//! construction its only ESC bytes are the two markers.
//!
//! Pure: strings in, strings out. Must never write to a terminal itself.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Start and end of a bracketed paste (xterm's mode 2004).
pub const PASTE_START: &[u8] = b"\x1b[200~";
pub const PASTE_END: &[u8] = b"\x1b[201~";

/// What [`for_terminal`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Alteration {
    /// Each neutralised character (as it is shown) and how often it occurred.
    pub counts: BTreeMap<String, usize>,
}

impl Alteration {
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    /// One line for a receipt: what was shown visibly instead of being sent as a control.
    pub fn describe(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mut s = format!(
            "altered: {} control character{} shown visibly, not sent as keys (",
            self.total(),
            if self.total() == 1 { "" } else { "s" }
        );
        for (i, (shown, n)) in self.counts.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{shown} x{n}");
        }
        s.push(')');
        Some(s)
    }
}

/// A character that must not reach a terminal as itself, and how it is shown instead.
/// Newline and tab pass; everything else below 0x20, DEL, C1 and the bidi overrides do not.
fn visible(c: char) -> Option<String> {
    match c {
        '\n' | '\t' => None,
        '\0'..='\x1f' => Some(format!("^{}", ((c as u8) + 0x40) as char)),
        '\x7f' => Some("^?".into()),
        '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
            Some(format!("<U+{:04X}>", c as u32))
        }
        _ => None,
    }
}

/// Whether `text` passes unchanged.
pub fn is_clean(text: &str) -> bool {
    !text.contains('\r') && text.chars().all(|c| visible(c).is_none())
}

/// `text` made safe to put into a terminal, and what was changed.
pub fn for_terminal(text: &str) -> (String, Alteration) {
    let mut alt = Alteration::default();
    if is_clean(text) {
        return (text.to_string(), alt);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue; // CRLF -> LF
        }
        match visible(c) {
            None => out.push(c),
            Some(shown) => {
                out.push_str(&shown);
                *alt.counts.entry(shown).or_default() += 1;
            }
        }
    }
    (out, alt)
}

/// Member text for a person's terminal (the CLI's human output): the same rule, without the
/// bookkeeping. Borrowed when nothing needed changing.
pub fn for_display(text: &str) -> Cow<'_, str> {
    if is_clean(text) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(for_terminal(text).0)
    }
}

/// Serialized JSON made safe to print on a terminal without changing what it parses to:
/// serde_json escapes C0 controls but leaves DEL, C1 controls and the bidi overrides raw (a
/// terminal may read U+009B as CSI); those can only occur inside strings, where `\uXXXX`
/// means the same character.
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| matches!(c, '\x7f' | '\u{80}'..='\u{9f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !json.chars().any(unsafe_char) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The bytes of one paste of `text`: neutralised, never ending in a backslash, and wrapped in
/// the bracketed-paste markers when the program asked for them. Without bracketed paste a newline would be typed as Enter,
/// so each line break becomes a visible ` ⏎ ` and the text stays one line (one prompt).
pub fn paste_bytes(text: &str, bracketed: bool) -> Vec<u8> {
    let (mut clean, _) = for_terminal(text);
    // A backslash right before the Enter is a line continuation to some CLIs (Gemini CLI):
    // the message would never be submitted.
    if clean.ends_with('\\') {
        clean.push(' ');
    }
    let mut out = Vec::with_capacity(clean.len() + PASTE_START.len() + PASTE_END.len());
    if bracketed {
        out.extend_from_slice(PASTE_START);
        out.extend_from_slice(clean.as_bytes());
        out.extend_from_slice(PASTE_END);
    } else {
        let flat = clean.replace('\n', " \u{23ce} ").replace('\t', " ");
        out.extend_from_slice(flat.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn controls_are_shown_and_counted() {
        let (t, a) = for_terminal("a\x1b[201~\r\x03rm -rf /\r\nb\tc\u{9b}2J\u{202e}x\x7f");
        assert_eq!(t, "a^[[201~^M^Crm -rf /\nb\tc<U+009B>2J<U+202E>x^?");
        assert_eq!(a.total(), 6);
        let d = a.describe().unwrap();
        assert!(d.contains("6 control characters"), "{d}");
        assert!(
            d.contains("^[ x1") && d.contains("^M x1") && d.contains("^C x1"),
            "{d}"
        );
    }

    #[test]
    fn clean_text_passes_unchanged_and_crlf_is_not_an_alteration() {
        let s = "line 1\n\tindented \"quotes\" $HOME `tick` \\ /slash !bang #hash ünïcödé 🚀";
        let (t, a) = for_terminal(s);
        assert_eq!(t, s);
        assert!(a.is_empty());
        assert_eq!(a.describe(), None);
        let (t, a) = for_terminal("a\r\nb");
        assert_eq!(t, "a\nb");
        assert!(a.is_empty());
        assert!(matches!(for_display(s), Cow::Borrowed(_)));
        assert_eq!(for_display("\x1b]0;pwned\x07"), "^[]0;pwned^G");
    }

    #[test]
    fn a_paste_holds_exactly_two_escapes_the_markers() {
        let b = paste_bytes("x\x1b[201~\rwhoami\r\x1b[200~", true);
        assert!(b.starts_with(PASTE_START) && b.ends_with(PASTE_END));
        assert_eq!(b.iter().filter(|&&c| c == 0x1b).count(), 2);
        assert!(paste_bytes("a trailing \\", true).ends_with(b"\\ \x1b[201~"));
        let flat = paste_bytes("one\ntwo\x1b", false);
        assert_eq!(String::from_utf8(flat).unwrap(), "one \u{23ce} two^[");
    }

    #[test]
    fn json_for_a_terminal_parses_to_the_same_value() {
        let v = serde_json::json!({"t": "a\u{9b}31m\u{7f}\u{202e}z\u{1b}", "n": 1});
        let raw = serde_json::to_string(&v).unwrap();
        let safe = json_for_terminal(&raw);
        assert!(
            !safe
                .chars()
                .any(|c| c == '\u{9b}' || c == '\u{7f}' || c == '\u{202e}' || c == '\u{1b}')
        );
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
        assert!(matches!(
            json_for_terminal("{\"a\":\"b\"}"),
            Cow::Borrowed(_)
        ));
    }

    proptest! {
        /// Whatever the text, the paste is one bracketed paste: the markers at the ends, and in
        /// between no byte below 0x20 but newline and tab, no DEL, no C1 control.
        #[test]
        fn nothing_escapes_the_paste(s in ".{0,200}", raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            for text in [s, String::from_utf8_lossy(&raw).into_owned()] {
                let b = paste_bytes(&text, true);
                let inner = &b[PASTE_START.len()..b.len() - PASTE_END.len()];
                prop_assert!(inner.iter().all(|&c| c >= 0x20 && c != 0x7f || c == b'\n' || c == b'\t'));
                let inner = std::str::from_utf8(inner).unwrap();
                let c1 = |c: char| ('\u{80}'..='\u{9f}').contains(&c);
                prop_assert!(!inner.chars().any(c1), "a C1 control in the paste");
                // Idempotent: clean text is not altered again.
                let (again, alt) = for_terminal(inner);
                prop_assert_eq!(again.as_str(), inner);
                prop_assert!(alt.is_empty());
                let flat = paste_bytes(&text, false);
                prop_assert!(flat.iter().all(|&c| c >= 0x20 && c != 0x7f));
            }
        }
    }
}
