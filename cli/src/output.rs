//! Readable tables by default, JSON with `-o json`; and how JSON fields read in a table (text,
//! labels, ages, times to come such as a queued job's predicted start).

use chrono::{DateTime, Utc};
use serde_json::Value;
use std::io::Write;

/// `println!` that ignores a closed pipe (`drover jobs | head`) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(err) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::output::write_failed(&err);
        }
    }};
}
pub(crate) use out;

/// Whether a closed standard output ends the process (`drover logs -f ID | head` stops once `head`
/// has its lines, like any command-line tool). A training task turns it off: it checkpoints and
/// ends when its executor tells it to, not when a pipe closes.
pub static QUIT_ON_BROKEN_PIPE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(true);

/// What a failed write to standard output does: nothing, unless the reader went away.
pub fn write_failed(err: &std::io::Error) {
    if err.kind() == std::io::ErrorKind::BrokenPipe
        && QUIT_ON_BROKEN_PIPE.load(std::sync::atomic::Ordering::Relaxed)
    {
        std::process::exit(0);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Table,
    Json,
}

/// Prints rows as aligned columns under upper-case headers, like `kubectl get`.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < widths.len() {
                text.push_str(&format!("{cell:<width$}   ", width = widths[i]));
            } else {
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    let _ = std::io::stdout().lock().write_all(out.as_bytes());
}

pub fn json(value: &Value) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => out!("{text}"),
        Err(_) => out!("{value}"),
    }
}

/// A JSON field as display text: strings bare, null as `-`.
pub fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `3m`, `2h`, `5d` since an RFC 3339 timestamp.
pub fn age(value: &Value) -> String {
    let Some(then) = value.as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok()) else {
        return "-".to_owned();
    };
    let seconds = (Utc::now() - then).num_seconds().max(0);
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub fn labels(value: &Value) -> String {
    match value.as_object() {
        Some(map) if !map.is_empty() => map
            .iter()
            .map(|(k, v)| format!("{k}={}", text(v)))
            .collect::<Vec<_>>()
            .join(","),
        _ => "-".to_owned(),
    }
}

/// `in 12m`, `in 3h`, `now`, `-`: how long until an RFC 3339 time.
pub fn until(value: &Value) -> String {
    let Some(at) = value.as_str().and_then(|s| s.parse::<DateTime<Utc>>().ok()) else {
        return "-".to_owned();
    };
    let seconds = (at - Utc::now()).num_seconds();
    match seconds {
        s if s < 60 => "now".to_owned(),
        s if s < 3600 => format!("in {}m", s / 60),
        s if s < 86_400 => format!("in {}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("in {}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `in 12m (in 5m–in 40m)`: the predicted start and its band, for tables; `, a rough guess` when it
/// rests on guessed lengths.
pub fn predicted_start(queue: &Value) -> String {
    let start = until(&queue["predicted_start"]);
    if queue["predicted_start"].is_null() {
        return if queue["reason"] == "never_fits" {
            "never".to_owned()
        } else if queue["position"].is_null() {
            "not forecast yet".to_owned()
        } else {
            "beyond 30 days".to_owned()
        };
    }
    let p10 = until(&queue["p10"]);
    let p90 = if queue["p90"].is_null() {
        "later".to_owned()
    } else {
        until(&queue["p90"])
    };
    let overdue = if queue["overdue"] == true {
        ", overdue"
    } else {
        ""
    };
    // Resting on lengths guessed for jobs like none that has finished or been measured.
    let guess = if queue["guesses"].as_u64().is_some_and(|n| n > 0) {
        ", a rough guess"
    } else {
        ""
    };
    format!("{start} ({p10} – {p90}{overdue}{guess})")
}
