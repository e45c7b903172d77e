//! What a script printed, kept up to a byte cap.

use std::fmt::Write as _;

/// A bounded buffer for a run's printed output.
///
/// Keeps the first `cap` bytes (cut on a character boundary) and counts the rest, so
/// a script that prints 10 MB costs the host 64 KiB by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogBuffer {
    text: String,
    cap: usize,
    dropped_bytes: usize,
}

impl LogBuffer {
    /// An empty buffer keeping at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Self {
            text: String::new(),
            cap,
            dropped_bytes: 0,
        }
    }

    /// Appends one printed line (a newline is added).
    pub fn push_line(&mut self, line: &str) {
        self.push(line);
        self.push("\n");
    }

    /// Appends text as printed, without adding a newline.
    pub fn push(&mut self, text: &str) {
        let room = self.cap.saturating_sub(self.text.len());
        if text.len() <= room {
            self.text.push_str(text);
            return;
        }
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&text[..cut]);
        self.dropped_bytes += text.len() - cut;
    }

    /// Counts `bytes` printed elsewhere and already dropped (e.g. by a worker
    /// process that applies the same cap).
    pub fn count_dropped(&mut self, bytes: usize) {
        self.dropped_bytes += bytes;
    }

    /// The kept text, without any truncation marker.
    pub fn kept(&self) -> &str {
        &self.text
    }

    /// How many bytes were printed past the cap and dropped.
    pub fn dropped_bytes(&self) -> usize {
        self.dropped_bytes
    }

    /// The kept text followed, when something was dropped, by a line saying how much.
    pub fn render(&self) -> String {
        let mut out = self.text.clone();
        if self.dropped_bytes > 0 {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            let _ = write!(
                out,
                "[output truncated: {} more bytes dropped past the {}-byte limit]",
                self.dropped_bytes, self.cap
            );
        }
        out
    }

    /// True when nothing was printed.
    pub fn is_empty(&self) -> bool {
        self.text.is_empty() && self.dropped_bytes == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_cap_is_counted_not_kept() {
        let mut logs = LogBuffer::new(10);
        logs.push_line("12345");
        logs.push_line("67890");
        assert_eq!(logs.kept(), "12345\n6789");
        assert_eq!(logs.dropped_bytes(), 2);
        assert!(
            logs.render()
                .ends_with("[output truncated: 2 more bytes dropped past the 10-byte limit]")
        );
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let mut logs = LogBuffer::new(3);
        logs.push("aé€");
        assert_eq!(logs.kept(), "aé");
        assert_eq!(logs.dropped_bytes(), 3);
    }
}
