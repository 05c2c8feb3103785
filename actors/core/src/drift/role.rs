//! Role normalisation for the drift gates: two statements name the same role when their
//! Snowball-stemmed terms (stop words dropped) are equal or one holds the other. Pure.

use std::collections::BTreeSet;

/// Words that carry no role: articles, pronouns, and generic agent words.
const STOP: &[&str] = &[
    "a",
    "an",
    "the",
    "of",
    "for",
    "and",
    "or",
    "to",
    "in",
    "on",
    "at",
    "as",
    "by",
    "with",
    "from",
    "i",
    "im",
    "am",
    "is",
    "are",
    "be",
    "was",
    "my",
    "our",
    "your",
    "this",
    "that",
    "it",
    "me",
    "we",
    "agent",
    "agents",
    "bot",
    "bots",
    "assistant",
    "role",
    "ai",
    "llm",
    "acting",
    "act",
];

/// The normalised role terms of a statement: lowercase words, stop words dropped, each reduced
/// by the Snowball English stemmer ("researcher" and "research agent" both give {"research"}).
pub fn role_terms(s: &str) -> BTreeSet<String> {
    let stemmer = rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    s.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOP.contains(w))
        .map(|w| stemmer.stem(w).into_owned())
        .collect()
}

/// Two statements name the same role: equal term sets, or one a subset of the other
/// ("researcher" / "senior researcher"). Statements with no terms compare as plain text.
pub fn same_role(a: &str, b: &str) -> bool {
    let (ta, tb) = (role_terms(a), role_terms(b));
    if ta.is_empty() || tb.is_empty() {
        return a.trim().eq_ignore_ascii_case(b.trim());
    }
    ta.is_subset(&tb) || tb.is_subset(&ta)
}

/// Does `statement` name the role `forbidden` (all of its terms appear)?
pub fn names_role(statement: &str, forbidden: &str) -> bool {
    let f = role_terms(forbidden);
    !f.is_empty() && f.is_subset(&role_terms(statement))
}
