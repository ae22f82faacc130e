//! Reading request lines with a length limit, and knowing which lines are already buffered.
//!
//! `BufRead::read_until` would buffer an endless line whole; this reader stops keeping bytes
//! once a line passes the limit and discards the rest of it up to its newline. It also tracks
//! whether the buffer still holds bytes, so that the caller can ask "is another whole line
//! here already?" without blocking — the serving loop batches the schedules it finds that way.

use std::io::{self, BufRead};

/// One line read from the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A line within the limit, without its newline.
    Text(Vec<u8>),
    /// A line longer than the limit; its bytes were discarded.
    TooLong,
}

/// Reads lines of at most `line_bytes_max` bytes (newline not counted) from a `BufRead`.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    line_bytes_max: usize,
    /// The inner buffer held unread bytes after the last `consume`, so `fill_buf` will not
    /// block.
    buffered: bool,
}

impl<R: BufRead> LineReader<R> {
    /// A reader over `inner`.
    pub fn new(inner: R, line_bytes_max: usize) -> Self {
        LineReader {
            inner,
            line_bytes_max,
            buffered: false,
        }
    }

    /// The next line; `None` at the end of the input. A last line without a newline counts.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        let mut line = Vec::new();
        let mut too_long = false;
        let mut seen_any = false;
        loop {
            let buf = match self.inner.fill_buf() {
                Ok(buf) => buf,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                self.buffered = false;
                return Ok(seen_any.then(|| finish(line, too_long)));
            }
            seen_any = true;
            let (taken, used, done) = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (&buf[..i], i + 1, true),
                None => (buf, buf.len(), false),
            };
            if !too_long {
                if line.len() + taken.len() > self.line_bytes_max {
                    too_long = true;
                    // Free what was kept; the rest of the line is skipped, never stored.
                    line = Vec::new();
                } else {
                    line.extend_from_slice(taken);
                }
            }
            self.buffered = used < buf.len();
            self.inner.consume(used);
            if done {
                return Ok(Some(finish(line, too_long)));
            }
        }
    }

    /// Whether a whole line is already buffered, so that `next_line` returns without waiting
    /// for input. Never blocks; `false` when unsure.
    pub fn line_buffered(&mut self) -> bool {
        if !self.buffered {
            return false;
        }
        // The buffer is not empty, so `fill_buf` returns it without reading.
        match self.inner.fill_buf() {
            Ok(buf) => buf.contains(&b'\n'),
            Err(_) => false,
        }
    }
}

fn finish(line: Vec<u8>, too_long: bool) -> Line {
    if too_long {
        Line::TooLong
    } else {
        Line::Text(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    fn all(input: &[u8], max: usize, capacity: usize) -> Vec<Line> {
        let mut r = LineReader::new(BufReader::with_capacity(capacity, input), max);
        let mut out = Vec::new();
        while let Some(l) = r.next_line().expect("in-memory reads succeed") {
            out.push(l);
        }
        out
    }

    fn text(s: &str) -> Line {
        Line::Text(s.as_bytes().to_vec())
    }

    #[test]
    fn splits_lines_and_keeps_an_unterminated_last_one() {
        for capacity in [1, 3, 64] {
            let got = all(b"ab\n\ncde\nf", 10, capacity);
            assert_eq!(got, [text("ab"), text(""), text("cde"), text("f")]);
        }
        assert_eq!(all(b"", 10, 8), []);
    }

    #[test]
    fn long_lines_are_dropped_and_the_next_line_is_intact() {
        for capacity in [1, 4, 64] {
            let got = all(b"12345\n123456\nxy\n1234567890123", 5, capacity);
            assert_eq!(
                got,
                [text("12345"), Line::TooLong, text("xy"), Line::TooLong],
                "capacity {capacity}"
            );
        }
    }

    #[test]
    fn knows_when_a_whole_line_is_buffered() {
        let mut r = LineReader::new(BufReader::with_capacity(64, &b"a\nb\nc"[..]), 10);
        assert!(!r.line_buffered(), "nothing read yet: unsure, so false");
        assert_eq!(r.next_line().unwrap(), Some(text("a")));
        assert!(r.line_buffered());
        assert_eq!(r.next_line().unwrap(), Some(text("b")));
        assert!(!r.line_buffered(), "only a partial line is left");
        assert_eq!(r.next_line().unwrap(), Some(text("c")));
        assert_eq!(r.next_line().unwrap(), None);
    }
}
