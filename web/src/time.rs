//! How pages show time: points in time as `<time>` elements the page script shows in the browser's
//! zone ([`timestamp`], [`Time`]), and durations in their largest sensible unit ([`duration`]).

/// Formats a time for a `<time>` element: the script shows it in the browser's zone, relative.
pub fn timestamp(at: chrono::DateTime<chrono::Utc>) -> Time {
    Time {
        iso: at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        text: at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    }
}

/// A point in time as a page shows it.
#[derive(Debug, Clone)]
pub struct Time {
    pub iso: String,
    pub text: String,
}

/// A duration in the largest sensible unit (`3 h 12 min`, `45 s`).
/// Whole minutes from `first` to `last` (a recent-use history's span), at least 1.
pub fn span_minutes(
    first: chrono::DateTime<chrono::Utc>,
    last: chrono::DateTime<chrono::Utc>,
) -> u32 {
    ((last - first).num_seconds() as f64 / 60.0).ceil().max(1.0) as u32
}

pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "—".to_owned();
    }
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86_400, (s % 86_400) / 3600),
    }
}
