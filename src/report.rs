//! An error and its causes as one line, for the operator: the program's edge (`entry`) and the
//! daemon's start-up failures print errors this way.

/// An error and its causes on one line, outermost first, as `{:#}` prints them, but a cause
/// whose text its wrapper already quotes is not repeated (many errors keep their source *and*
/// say it in their own message).
pub fn report(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::report;

    #[derive(Debug, thiserror::Error)]
    #[error("opening {path}: {source}")]
    struct Quoting {
        path: &'static str,
        #[source]
        source: std::io::Error,
    }

    #[test]
    fn a_cause_is_shown_once_whether_or_not_its_wrapper_quotes_it() {
        let io = || std::io::Error::other("disk on fire");
        let quoted = anyhow::Error::new(Quoting {
            path: "/s",
            source: io(),
        });
        assert_eq!(report(&quoted), "opening /s: disk on fire");
        let wrapped = anyhow::Error::new(io()).context("reading /s");
        assert_eq!(report(&wrapped), "reading /s: disk on fire");
        // The source is kept for code that looks for it.
        assert!(
            quoted
                .chain()
                .any(|c| c.downcast_ref::<std::io::Error>().is_some())
        );
    }
}
