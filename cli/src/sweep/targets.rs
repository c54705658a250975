//! What a sweep says of `drover` against the targets it is held to (issue #54), per cell (week,
//! cluster and seed): its average JCT against the best non-oracle baseline's, how far below
//! Tiresias' it is where Tiresias queues over a tenth of its JCT, and its worst tenant's max ρ over
//! that tenant's under DRF; a table (printed, and `targets.md` beside the sweep's other files) and
//! how many cells meet each.

use super::row::SweepRow;
use std::fmt::Write;

/// Tiresias queues "under contention" past this share of its average JCT...
const TIRESIAS_QUEUEING: f64 = 0.10;
/// ... and there `drover` is to be at least this far below its average JCT.
const BELOW_TIRESIAS: f64 = 0.15;
/// The worst tenant's max ρ is to be within this of its max ρ under DRF.
const FAIRNESS: f64 = 1.10;

/// One cell's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub week: Option<String>,
    pub cluster: String,
    pub seed: u64,
    pub jobs: usize,
    pub load: f64,
    pub drover_jct_s: f64,
    pub best_baseline: String,
    pub best_jct_s: f64,
    /// 1 less `drover`'s average JCT over Tiresias', and Tiresias' average queueing over its JCT.
    pub tiresias: Option<(f64, f64)>,
    /// The worst tenant's max ρ over its max ρ under DRF, and the tenant.
    pub worst_tenant: Option<(f64, String)>,
}

impl Cell {
    fn jct_met(&self) -> bool {
        self.drover_jct_s <= self.best_jct_s
    }

    /// `None` where Tiresias does not queue enough for the target to apply.
    fn tiresias_met(&self) -> Option<bool> {
        let (below, queueing) = self.tiresias?;
        (queueing > TIRESIAS_QUEUEING).then_some(below >= BELOW_TIRESIAS)
    }

    fn fairness_met(&self) -> Option<bool> {
        self.worst_tenant
            .as_ref()
            .map(|(ratio, _)| *ratio <= FAIRNESS)
    }
}

/// The cells of `rows` (grouped by cell, `policies` in order in each), where `drover` ran.
pub fn cells(rows: &[SweepRow], policies: usize) -> Vec<Cell> {
    rows.chunks(policies.max(1))
        .filter_map(|group| {
            let drover = group.iter().find(|r| r.policy == "drover")?;
            let tiresias = group.iter().find(|r| r.policy == "tiresias");
            Some(Cell {
                week: drover.week.clone(),
                cluster: drover.cluster.clone(),
                seed: drover.seed,
                jobs: drover.report.jobs,
                load: drover.offered_load,
                drover_jct_s: drover.avg_jct_s,
                best_baseline: drover.best_baseline.clone(),
                best_jct_s: drover.avg_jct_s / drover.vs_best_baseline.max(1e-12),
                tiresias: tiresias.map(|t| {
                    (
                        1.0 - drover.avg_jct_s / t.avg_jct_s.max(1e-9),
                        t.report.avg_queueing_s / t.avg_jct_s.max(1e-9),
                    )
                }),
                worst_tenant: drover.worst_tenant_vs_drf.zip(drover.worst_tenant.clone()),
            })
        })
        .collect()
}

fn met(flag: Option<bool>) -> &'static str {
    match flag {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "—",
    }
}

/// The cells as a Markdown table, then how many meet each target.
pub fn markdown(cells: &[Cell]) -> String {
    let mut text = String::from(
        "| week | cluster | seed | jobs | load | `drover` avg JCT | best non-oracle baseline | ratio | met | below Tiresias | Tiresias queueing / JCT | met | worst tenant vs DRF | met |\n\
         |---|---|---:|---:|---:|---:|---|---:|---|---:|---:|---|---:|---|\n",
    );
    for c in cells {
        let (below, queueing) = c
            .tiresias
            .map_or(("—".to_owned(), "—".to_owned()), |(b, q)| {
                (format!("{:.1}%", 100.0 * b), format!("{:.1}%", 100.0 * q))
            });
        let worst = c
            .worst_tenant
            .as_ref()
            .map_or("—".to_owned(), |(r, t)| format!("{r:.2}× ({t})"));
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {:.2} | {:.0} s | `{}` {:.0} s | {:.3}× | {} | {below} | {queueing} | {} | {worst} | {} |",
            c.week.as_deref().unwrap_or("—"),
            c.cluster,
            c.seed,
            c.jobs,
            c.load,
            c.drover_jct_s,
            c.best_baseline,
            c.best_jct_s,
            c.drover_jct_s / c.best_jct_s.max(1e-9),
            met(Some(c.jct_met())),
            met(c.tiresias_met()),
            met(c.fairness_met()),
        );
    }
    text.push('\n');
    for line in summary(cells) {
        let _ = writeln!(text, "- {line}");
    }
    text
}

/// How many cells meet each target, in words.
pub fn summary(cells: &[Cell]) -> Vec<String> {
    let count = |flags: Vec<Option<bool>>| {
        let applies = flags.iter().flatten().count();
        let met = flags.iter().flatten().filter(|&&m| m).count();
        (met, applies)
    };
    let n = cells.len();
    let (jct, _) = count(cells.iter().map(|c| Some(c.jct_met())).collect());
    let (tiresias, contended) = count(cells.iter().map(Cell::tiresias_met).collect());
    let (fair, judged) = count(cells.iter().map(Cell::fairness_met).collect());
    let mut lines = vec![format!(
        "average JCT at or below the best non-oracle baseline's: {jct} of {n} cells"
    )];
    if cells.iter().any(|c| c.tiresias.is_some()) {
        lines.push(format!(
            "at least {:.0}% below Tiresias where its queueing exceeds {:.0}% of its JCT: {tiresias} of the {contended} such cells",
            100.0 * BELOW_TIRESIAS,
            100.0 * TIRESIAS_QUEUEING
        ));
    }
    if judged > 0 {
        lines.push(format!(
            "worst tenant's max ρ within {FAIRNESS:.1}× its max ρ under DRF: {fair} of {judged} cells"
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ratio: f64, tiresias: Option<(f64, f64)>, worst: Option<f64>) -> Cell {
        Cell {
            week: Some("2017-W40".into()),
            cluster: "48x8".into(),
            seed: 1,
            jobs: 10,
            load: 1.5,
            drover_jct_s: 100.0 * ratio,
            best_baseline: "optimus".into(),
            best_jct_s: 100.0,
            tiresias,
            worst_tenant: worst.map(|w| (w, "vc1".to_owned())),
        }
    }

    #[test]
    fn each_target_is_counted_where_it_applies() {
        let cells = [
            cell(0.9, Some((0.30, 0.20)), Some(1.0)),
            cell(1.01, Some((0.10, 0.20)), Some(1.5)),
            // Tiresias hardly queues: its target does not apply.
            cell(0.99, Some((0.05, 0.02)), Some(1.1)),
        ];
        let lines = summary(&cells);
        assert_eq!(
            lines,
            [
                "average JCT at or below the best non-oracle baseline's: 2 of 3 cells",
                "at least 15% below Tiresias where its queueing exceeds 10% of its JCT: 1 of the 2 such cells",
                "worst tenant's max ρ within 1.1× its max ρ under DRF: 2 of 3 cells",
            ]
        );
        let table = markdown(&cells);
        assert_eq!(table.matches("**no**").count(), 3, "{table}");
        assert!(
            table.contains(
                "| 2017-W40 | 48x8 | 1 | 10 | 1.50 | 101 s | `optimus` 100 s | 1.010× | **no** |"
            ),
            "{table}"
        );
        assert!(table.contains("1.50× (vc1)"), "{table}");
    }
}
