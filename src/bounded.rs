//! Requests from outside, read bounded: an `AsyncRead` shell over a line meter that measures every
//! newline-delimited JSON-RPC message on an MCP connection, notices one over the limit, and stands
//! a short refusal request in for it (`fleetd/oversized`, carrying the big request's id), so the
//! client gets an error instead of silence. It also stamps when the connection last sent
//! anything, for idle timeouts.
//!
//! Owns the meter (pure: bytes in, events out) and the id scan over a message's first bytes. It
//! never buffers a message: rmcp's own transport is given the same limit and drops the big line
//! as it reads it, so memory per connection stays at the limit. It must never alter a message
//! under the limit, nor answer for a big message that carried no id (a notification).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

/// The method of the stand-in request; the MCP server answers it with a refusal.
pub const OVERSIZED_METHOD: &str = "fleetd/oversized";

/// How many leading bytes of a message are kept to find its id.
const PREFIX: usize = 4096;

/// A message that went over the limit, seen when it ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Oversized {
    /// Its length in bytes, newline included.
    pub bytes: usize,
    /// Its JSON-RPC id, if one was found in its first bytes.
    pub id: Option<Value>,
}

/// Measures newline-delimited messages. A message is over the limit when its length including
/// the newline is over `max` (the rule rmcp's transport applies, so both agree on every line).
#[derive(Debug)]
pub struct LineMeter {
    max: usize,
    len: usize,
    prefix: Vec<u8>,
}

impl LineMeter {
    pub fn new(max: usize) -> Self {
        LineMeter {
            max,
            len: 0,
            prefix: Vec::new(),
        }
    }

    /// Feed bytes; returns, for each message over the limit that ended in them, the offset just
    /// past its newline and what it was.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<(usize, Oversized)> {
        let mut out = vec![];
        let mut start = 0;
        while start < bytes.len() {
            let rest = &bytes[start..];
            let (part, ends) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            self.len = self.len.saturating_add(part.len());
            if self.prefix.len() < PREFIX {
                let take = (PREFIX - self.prefix.len()).min(part.len());
                self.prefix.extend_from_slice(&part[..take]);
            }
            start += part.len();
            if ends {
                if self.len > self.max {
                    out.push((
                        start,
                        Oversized {
                            bytes: self.len,
                            id: find_id(&self.prefix),
                        },
                    ));
                }
                self.len = 0;
                self.prefix.clear();
            }
        }
        out
    }
}

/// The value of the top-level `"id"` key of the JSON object that `prefix` begins (a number or a
/// string), if it appears complete within `prefix`. Never panics, whatever the bytes.
pub fn find_id(prefix: &[u8]) -> Option<Value> {
    let mut s = Scan { b: prefix, i: 0 };
    s.ws();
    s.eat(b'{')?;
    loop {
        s.ws();
        let key = s.string()?;
        s.ws();
        s.eat(b':')?;
        s.ws();
        if key == b"\"id\"" {
            let start = s.i;
            match s.peek()? {
                b'"' => {
                    s.string()?;
                }
                b'-' | b'0'..=b'9' => s.number()?,
                _ => return None,
            }
            let v: Value = serde_json::from_slice(&prefix[start..s.i]).ok()?;
            return (v.is_string() || v.is_number()).then_some(v);
        }
        s.value()?;
        s.ws();
        match s.peek()? {
            b',' => s.i += 1,
            _ => return None,
        }
    }
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string, quotes included; `None` if it does not end within the bytes.
    fn string(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match self.peek()? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return self.b.get(start..self.i);
                }
                _ => self.i += 1,
            }
        }
    }

    fn number(&mut self) -> Option<()> {
        let start = self.i;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
        ) {
            self.i += 1;
        }
        // A number that runs to the end of the prefix may be cut short.
        (self.i > start && self.i < self.b.len()).then_some(())
    }

    /// Skip one value of any kind (strings and nesting respected).
    fn value(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.i += 1;
                }
                b',' if depth == 0 => return Some(()),
                _ => self.i += 1,
            }
            if depth == 0 && matches!(self.peek(), Some(b',' | b'}')) {
                return Some(());
            }
        }
    }
}

/// The stand-in request for a message over the limit, as one line.
pub fn stand_in(o: &Oversized, max: usize) -> Option<Vec<u8>> {
    let id = o.id.clone()?;
    let mut line = serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "method": OVERSIZED_METHOD,
        "params": {"bytes": o.bytes, "max": max},
    }))
    .ok()?;
    line.push(b'\n');
    Some(line)
}

/// Milliseconds since the process's first use of this module, for activity stamps.
pub fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// An MCP connection's reading half, metered (see the module doc).
pub struct Metered<R> {
    inner: R,
    meter: LineMeter,
    max: usize,
    /// Bytes ready to hand out (what was read, with stand-ins after big messages' newlines).
    out: Vec<u8>,
    at: usize,
    scratch: Box<[u8]>,
    last_read: Arc<AtomicU64>,
}

impl<R> Metered<R> {
    pub fn new(inner: R, max: usize, last_read: Arc<AtomicU64>) -> Self {
        last_read.store(now_ms(), Ordering::Relaxed);
        Metered {
            inner,
            meter: LineMeter::new(max),
            max,
            out: Vec::new(),
            at: 0,
            scratch: vec![0u8; 8192].into_boxed_slice(),
            last_read,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Metered<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at == this.out.len() {
            this.out.clear();
            this.at = 0;
            let mut rb = ReadBuf::new(&mut this.scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let n = rb.filled().len();
            if n == 0 {
                return Poll::Ready(Ok(()));
            }
            this.last_read.store(now_ms(), Ordering::Relaxed);
            let read = &this.scratch[..n];
            let mut from = 0;
            for (end, o) in this.meter.feed(read) {
                this.out.extend_from_slice(&read[from..end]);
                from = end;
                match stand_in(&o, this.max) {
                    Some(line) => {
                        tracing::warn!(bytes = o.bytes, max = this.max, id = ?o.id, "MCP request over limits.max_request_bytes refused");
                        this.out.extend_from_slice(&line);
                    }
                    None => tracing::warn!(
                        bytes = o.bytes,
                        max = this.max,
                        "MCP message over limits.max_request_bytes dropped (no id in its first bytes to answer)"
                    ),
                }
            }
            this.out.extend_from_slice(&read[from..]);
        }
        let take = (this.out.len() - this.at).min(buf.remaining());
        buf.put_slice(&this.out[this.at..this.at + take]);
        this.at += take;
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn the_id_is_found_wherever_it_is_in_the_object() {
        for (text, id) in [
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"x","params":{"a":"#,
                Some(json!(7)),
            ),
            (
                r#"{"method":"x","params":{"id":1,"s":"}\"{"},"id":"abc"}"#,
                Some(json!("abc")),
            ),
            (r#" { "jsonrpc" : "2.0" , "id" : -3 , "#, Some(json!(-3))),
            (r#"{"params":{"text":"aaaa"#, None),
            (r#"{"id":12"#, None),
            (r#"{"id":null,"#, None),
            (r#"{"id":{"x":1},"#, None),
            (r#"["id",1]"#, None),
            ("", None),
        ] {
            assert_eq!(find_id(text.as_bytes()), id, "{text}");
        }
    }

    #[test]
    fn only_lines_over_the_limit_are_reported_at_their_newline() {
        let mut m = LineMeter::new(20);
        let small = b"{\"id\":1}\n";
        assert!(m.feed(small).is_empty());
        // Exactly the limit, newline included: not over.
        let exact = format!("{{\"id\":2,\"p\":\"{}\"}}\n", "x".repeat(4));
        assert_eq!(exact.len(), 20);
        assert!(m.feed(exact.as_bytes()).is_empty());
        let big = format!("{{\"id\":3,\"p\":\"{}\"}}\n", "x".repeat(40));
        // Fed in pieces, reported once, at the newline.
        let (a, b) = big.as_bytes().split_at(17);
        assert!(m.feed(a).is_empty());
        let got = m.feed(&[b, small].concat());
        assert_eq!(
            got,
            vec![(
                b.len(),
                Oversized {
                    bytes: big.len(),
                    id: Some(json!(3))
                }
            )]
        );
    }

    proptest! {
        #[test]
        fn find_id_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = find_id(&bytes);
        }

        #[test]
        fn find_id_finds_any_top_level_id(
            id in prop_oneof![any::<i64>().prop_map(|n| json!(n)), "[a-z\"\\\\{}]{0,12}".prop_map(|s| json!(s))],
            before in proptest::collection::btree_map("[a-z]{1,6}", any::<String>(), 0..4),
            after in proptest::collection::btree_map("[a-z]{1,6}", any::<i32>(), 0..4),
        ) {
            let mut text = String::from("{");
            for (k, v) in &before {
                if k == "id" { continue }
                text.push_str(&format!("{}:{{\"n\":[{}]}},", json!(k), json!(v)));
            }
            text.push_str(&format!("\"id\":{}", id));
            for (k, v) in &after {
                text.push_str(&format!(",{}:{}", json!(k), v));
            }
            text.push('}');
            prop_assert_eq!(find_id(text.as_bytes()), Some(id));
        }

        #[test]
        fn the_meter_agrees_with_the_length_rule(lines in proptest::collection::vec(0usize..60, 1..20), max in 1usize..50) {
            let mut m = LineMeter::new(max);
            let mut stream = vec![];
            let mut want = vec![];
            for (i, n) in lines.iter().enumerate() {
                let line = format!("{{\"id\":{i}{}}}\n", " ".repeat(*n));
                stream.extend_from_slice(line.as_bytes());
                if line.len() > max {
                    want.push((stream.len(), line.len(), json!(i)));
                }
            }
            let got: Vec<_> = m.feed(&stream).into_iter().map(|(e, o)| (e, o.bytes, o.id.unwrap())).collect();
            prop_assert_eq!(got, want);
        }
    }
}
