//! `--weeks`: ISO weeks of a trace, each replayed on its own (Monday 00:00 UTC to the next Monday),
//! so a policy is tuned and judged on many weeks rather than one.

use anyhow::{Context, bail};
use chrono::{Datelike, Duration, NaiveDate, Weekday};

/// One ISO week: its label and the trace window it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Week {
    /// `2017-W40`.
    pub label: String,
    /// Its Monday, 00:00 UTC, as `--from` takes it.
    pub from: String,
    /// The next Monday, 00:00 UTC (exclusive).
    pub to: String,
}

impl Week {
    fn of_monday(monday: NaiveDate) -> Week {
        let iso = monday.iso_week();
        let next = monday + Duration::days(7);
        Week {
            label: format!("{}-W{:02}", iso.year(), iso.week()),
            from: format!("{} 00:00", monday.format("%Y-%m-%d")),
            to: format!("{} 00:00", next.format("%Y-%m-%d")),
        }
    }
}

/// The Monday of `2017-W40` (or `W40` in `year`, for the end of a range).
fn monday(text: &str, year: Option<i32>) -> anyhow::Result<NaiveDate> {
    let bad = || {
        format!(
            "--weeks: `{text}` is not an ISO week (YYYY-Www, e.g. 2017-W40; a range is 2017-W36..2017-W44 or 2017-W36..W44)"
        )
    };
    let (y, w) = match text.split_once("-W").or_else(|| text.split_once("-w")) {
        Some((y, w)) => (y.parse::<i32>().ok().with_context(bad)?, w),
        None => {
            let w = text
                .strip_prefix('W')
                .or_else(|| text.strip_prefix('w'))
                .with_context(bad)?;
            (year.with_context(bad)?, w)
        }
    };
    let week: u32 = w.parse().ok().with_context(bad)?;
    NaiveDate::from_isoywd_opt(y, week, Weekday::Mon).with_context(bad)
}

/// Parses `--weeks`: weeks (`2017-W40`) and ranges (`2017-W36..2017-W44`, `2017-W36..W44`),
/// comma-separated, in the order given; a week given twice is run once.
pub fn parse_weeks(text: &str) -> anyhow::Result<Vec<Week>> {
    let mut weeks: Vec<Week> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (first, last) = match item.split_once("..") {
            Some((a, b)) => {
                let first = monday(a.trim(), None)?;
                (first, monday(b.trim(), Some(first.iso_week().year()))?)
            }
            None => {
                let only = monday(item, None)?;
                (only, only)
            }
        };
        if last < first {
            bail!("--weeks: the range `{item}` ends before it starts");
        }
        let mut at = first;
        while at <= last {
            let week = Week::of_monday(at);
            if !weeks.contains(&week) {
                weeks.push(week);
            }
            at += Duration::days(7);
        }
    }
    if weeks.is_empty() {
        bail!("--weeks: give at least one week (e.g. 2017-W36..2017-W44)");
    }
    Ok(weeks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_and_ranges_are_iso_weeks_from_monday_to_monday() {
        let weeks = parse_weeks("2017-W36..W38, 2017-W40,2017-W37").unwrap();
        let labels: Vec<&str> = weeks.iter().map(|w| w.label.as_str()).collect();
        assert_eq!(labels, ["2017-W36", "2017-W37", "2017-W38", "2017-W40"]);
        assert_eq!(
            (weeks[3].from.as_str(), weeks[3].to.as_str()),
            ("2017-10-02 00:00", "2017-10-09 00:00")
        );
        // Across a year's end: 2017 has 52 ISO weeks.
        let across = parse_weeks("2017-W52..2018-W01").unwrap();
        assert_eq!(across[1].label, "2018-W01");
        assert_eq!(across[1].from, "2018-01-01 00:00");
        for bad in ["40", "2017-W60", "2017-W44..2017-W36", "W40", ""] {
            let err = parse_weeks(bad).unwrap_err().to_string();
            assert!(err.starts_with("--weeks:"), "{bad}: {err}");
        }
    }
}
