//! Cutting text down for messages, logs and reports: one helper per way of cutting,
//! shared by the host and every backend.

/// `text` cut to at most `max` characters, with `…` appended when something was
/// cut. For one-line quotes in error messages.
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// The longest prefix of `text` of at most `cap` bytes that ends on a character
/// boundary. For byte budgets (a record's content cap, a guest's message).
pub fn prefix_within(text: &str, cap: usize) -> &str {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` cut to about `limit` characters by removing its middle, with a marker
/// saying how much went. The start and the end are what a reader needs most: the
/// first lines of a result and the last lines of a trace.
pub fn cut_middle(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_string();
    }
    let keep = limit / 2;
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(total - keep).collect();
    format!("{head}\n… [{} characters cut] …\n{tail}", total - 2 * keep)
}

/// The length of `value` as JSON text, counted as it is written out, without
/// keeping the text.
pub fn json_len(value: &serde_json::Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_counts_characters_and_marks_a_cut() {
        assert_eq!(shorten("héllo", 5), "héllo");
        assert_eq!(shorten("héllo", 2), "hé…");
        assert_eq!(shorten("", 0), "");
    }

    #[test]
    fn prefix_within_never_splits_a_character() {
        // "é" is two bytes: a cap of 5 falls inside the third one.
        assert_eq!(prefix_within("ééé", 5), "éé");
        assert_eq!(prefix_within("abc", 10), "abc");
    }

    #[test]
    fn cut_middle_keeps_both_ends_and_says_how_much_went() {
        let text = "a".repeat(10) + &"b".repeat(10);
        assert_eq!(cut_middle(&text, 4), "aa\n… [16 characters cut] …\nbb");
        assert_eq!(cut_middle("short", 10), "short");
    }
}
