//! Job traces: the Philly CSV (`timestamp,duration,num_gpus,gpu_time,cluster`) and Drover's native
//! format (`submit_s,duration_s,gpus,tenant`, one job per line after the header, times in seconds).

use chrono::NaiveDateTime;

/// One job of a trace: when it came, how long it ran at its recorded size, and who sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    pub submit_s: f64,
    pub duration_s: f64,
    pub gpus: u32,
    pub tenant: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("trace line {line}: {reason}")]
pub struct TraceError {
    pub line: usize,
    pub reason: String,
}

/// Which jobs of a trace to replay.
#[derive(Debug, Clone, Default)]
pub struct TraceFilter {
    /// Submissions in [from, to), seconds since the Unix epoch.
    pub from_s: Option<f64>,
    pub to_s: Option<f64>,
    /// Only this virtual cluster (tenant).
    pub tenant: Option<String>,
}

impl TraceFilter {
    fn keeps(&self, job: &TraceJob) -> bool {
        self.from_s.is_none_or(|from| job.submit_s >= from)
            && self.to_s.is_none_or(|to| job.submit_s < to)
            && self.tenant.as_ref().is_none_or(|t| *t == job.tenant)
    }
}

/// Parses `YYYY-MM-DD HH:MM[:SS]` (UTC) into seconds since the epoch.
pub fn parse_time(text: &str) -> Option<f64> {
    let text = text.trim();
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S")
        .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M"))
        .ok()
        .map(|t| t.and_utc().timestamp() as f64)
}

/// Reads a trace in either format (told apart by the header), keeps what `filter` selects, and returns
/// the jobs in submission order (ties in file order).
pub fn parse_trace(text: &str, filter: &TraceFilter) -> Result<Vec<TraceJob>, TraceError> {
    let mut lines = text.lines().enumerate();
    let Some((_, header)) = lines.next() else {
        return Ok(Vec::new());
    };
    let philly = header.trim() == "timestamp,duration,num_gpus,gpu_time,cluster";
    let native = header.trim() == "submit_s,duration_s,gpus,tenant";
    if !philly && !native {
        return Err(TraceError {
            line: 1,
            reason: format!(
                "unknown header `{header}` (expected the Philly header or `submit_s,duration_s,gpus,tenant`)"
            ),
        });
    }
    let mut jobs = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let err = |reason: &str| TraceError {
            line: n + 1,
            reason: reason.to_owned(),
        };
        let fields: Vec<&str> = line.split(',').collect();
        let (submit, duration, gpus, tenant) = if philly {
            if fields.len() != 5 {
                return Err(err("expected 5 fields"));
            }
            (
                parse_time(fields[0]).ok_or_else(|| err("bad timestamp"))?,
                fields[1],
                fields[2],
                fields[4],
            )
        } else {
            if fields.len() != 4 {
                return Err(err("expected 4 fields"));
            }
            (
                fields[0]
                    .trim()
                    .parse::<f64>()
                    .map_err(|_| err("bad submit_s"))?,
                fields[1],
                fields[2],
                fields[3],
            )
        };
        let duration_s: f64 = duration.trim().parse().map_err(|_| err("bad duration"))?;
        let gpus: f64 = gpus.trim().parse().map_err(|_| err("bad GPU count"))?;
        if !(duration_s.is_finite() && duration_s >= 0.0 && (1.0..=100_000.0).contains(&gpus)) {
            return Err(err("duration must be >= 0 and GPUs between 1 and 100000"));
        }
        let job = TraceJob {
            submit_s: submit,
            duration_s: duration_s.max(1.0),
            gpus: gpus as u32,
            tenant: tenant.trim().to_owned(),
        };
        if filter.keeps(&job) {
            jobs.push(job);
        }
    }
    jobs.sort_by(|a, b| a.submit_s.total_cmp(&b.submit_s));
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philly_rows_are_filtered_by_window_and_tenant() {
        let text = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                    2017-10-02 01:00:00,60.0,2,120.0,a\n\
                    2017-10-01 23:59:59,60.0,1,60.0,a\n\
                    2017-10-02 00:30:00,10.0,1,10.0,b\n";
        let filter = TraceFilter {
            from_s: parse_time("2017-10-02 00:00"),
            to_s: parse_time("2017-10-09 00:00"),
            tenant: None,
        };
        let jobs = parse_trace(text, &filter).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].tenant, "b", "sorted by submission");
        let only_a = TraceFilter {
            tenant: Some("a".into()),
            ..filter
        };
        assert_eq!(parse_trace(text, &only_a).unwrap().len(), 1);
    }

    #[test]
    fn native_format_and_bad_lines() {
        let jobs = parse_trace(
            "submit_s,duration_s,gpus,tenant\n0,100,4,t1\n5,10,1,t2\n",
            &TraceFilter::default(),
        )
        .unwrap();
        assert_eq!(jobs[0].gpus, 4);
        assert!(
            parse_trace(
                "submit_s,duration_s,gpus,tenant\n0,100,0,t1\n",
                &TraceFilter::default()
            )
            .is_err()
        );
        assert!(parse_trace("a,b\n", &TraceFilter::default()).is_err());
    }
}
