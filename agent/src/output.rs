//! The work's output as lines: split without ever holding more than one line's limit in memory
//! (a program printing gigabytes without a newline is cut, not buffered), and the last lines kept
//! for the exit report.

use std::collections::VecDeque;

use scheduler::agents::protocol::TAIL_LINES;

/// Splits a byte stream into lines of at most `max` bytes of text. A longer line keeps its first
/// `max` bytes and a marker with how many were cut; the rest is counted and dropped.
#[derive(Debug)]
pub struct LineSplitter {
    max: usize,
    buf: Vec<u8>,
    cut: usize,
}

impl LineSplitter {
    /// A splitter cutting lines at `max` bytes.
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter { max: max.max(16), buf: Vec::new(), cut: 0 }
    }

    /// Feeds bytes; returns the lines they complete.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.take(&bytes[..i]);
                    out.push(self.emit());
                    bytes = &bytes[i + 1..];
                }
                None => {
                    self.take(bytes);
                    bytes = &[];
                }
            }
        }
        out
    }

    /// The last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<String> {
        if self.buf.is_empty() && self.cut == 0 { None } else { Some(self.emit()) }
    }

    fn take(&mut self, bytes: &[u8]) {
        let room = self.max.saturating_sub(self.buf.len());
        let keep = room.min(bytes.len());
        self.buf.extend_from_slice(&bytes[..keep]);
        self.cut += bytes.len() - keep;
    }

    fn emit(&mut self) -> String {
        let mut bytes = std::mem::take(&mut self.buf);
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if self.cut > 0 {
            // A cut may have split a character: lossy decoding shows it as one replacement character.
            text.push_str(&format!(" …[line cut: {} more bytes]", self.cut));
            self.cut = 0;
        }
        text
    }
}

/// The last [`TAIL_LINES`] lines, across both outputs.
#[derive(Debug, Default)]
pub struct Tail {
    lines: VecDeque<String>,
}

impl Tail {
    /// Remembers a line, forgetting the oldest beyond the limit.
    pub fn push(&mut self, line: &str) {
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line.to_string());
    }

    /// The remembered lines, oldest first; empties the tail.
    pub fn take(&mut self) -> Vec<String> {
        self.lines.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_reads_and_long_lines_are_cut_not_dropped() {
        let mut s = LineSplitter::new(16);
        assert!(s.push(b"hel").is_empty());
        assert_eq!(s.push(b"lo\nwor"), vec!["hello"]);
        assert_eq!(s.push(b"ld\r\n\n"), vec!["world", ""]);
        let long = vec![b'x'; 100];
        assert!(s.push(&long).is_empty());
        assert_eq!(s.push(b"y\nz"), vec![format!("{} …[line cut: 85 more bytes]", "x".repeat(16))]);
        assert_eq!(s.finish(), Some("z".into()));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn the_tail_keeps_the_last_lines() {
        let mut t = Tail::default();
        for i in 0..50 {
            t.push(&i.to_string());
        }
        let lines = t.take();
        assert_eq!(lines.len(), TAIL_LINES);
        assert_eq!(lines.last().unwrap(), "49");
        assert!(t.take().is_empty());
    }
}
