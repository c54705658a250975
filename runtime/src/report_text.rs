//! What a task reports, made storable and bounded: no NUL, no text past 16 KiB, no more lines or
//! values than a report may hold, no timestamp the database cannot keep.

use chrono::{DateTime, Utc};

/// The longest text kept from a task's report (a log line, an exit message, an address).
const MAX_TEXT_BYTES: usize = 16 * 1024;
/// Log lines kept from one report, metric values from one sample.
pub(super) const MAX_LINES_PER_REPORT: usize = 1000;
pub(super) const MAX_VALUES_PER_SAMPLE: usize = 256;

/// Text from a task, made storable: Postgres refuses NUL bytes in text, and nothing a task writes may
/// be longer than `MAX_TEXT_BYTES` (cut at a character boundary, marked).
pub(super) fn clean(text: &str) -> String {
    let mut end = text.len().min(MAX_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let kept = &text[..end];
    let mut cleaned = if kept.contains('\0') {
        kept.replace('\0', "\u{FFFD}")
    } else {
        kept.to_owned()
    };
    if end < text.len() {
        cleaned.push_str(" [truncated]");
    }
    cleaned
}

/// A task's timestamp; the server's clock when it is more than a day off (or not a time at all), so no
/// executor's clock can write a time the database cannot hold.
pub(super) fn time_of(ms: i64) -> DateTime<Utc> {
    let now = Utc::now();
    DateTime::from_timestamp_millis(ms)
        .filter(|at| (*at - now).abs() <= chrono::Duration::days(1))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_text_is_storable_and_bounded() {
        assert_eq!(clean("a\0b"), "a\u{FFFD}b");
        let long = "é".repeat(MAX_TEXT_BYTES);
        let cleaned = clean(&long);
        assert!(cleaned.len() <= MAX_TEXT_BYTES + " [truncated]".len());
        assert!(cleaned.ends_with(" [truncated]"));
        let now = Utc::now();
        assert!(
            (time_of(now.timestamp_millis()) - now)
                .num_milliseconds()
                .abs()
                < 5
        );
        assert!((time_of(i64::MAX) - now).num_seconds().abs() < 5);
        assert!((time_of(-62_000_000_000_000) - now).num_seconds().abs() < 5);
    }
}
