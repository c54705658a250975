//! The order a pipeline stage runs its micro-batches' passes in (GPipe's, or one forward one
//! backward), and how the layers and a replica's rows are divided.

use drover_core::spec::PipelineSchedule;
use std::ops::Range;

/// What a stage does next: one micro-batch's forward or backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Forward(usize),
    Backward(usize),
}

/// Stage `stage`'s passes over `micro` micro-batches in a pipeline of `stages`, in order.
pub fn schedule(kind: PipelineSchedule, stages: usize, stage: usize, micro: usize) -> Vec<Op> {
    match kind {
        // Every forward, then every backward, newest first: the last stage turns straight round.
        PipelineSchedule::Gpipe => (0..micro)
            .map(Op::Forward)
            .chain((0..micro).rev().map(Op::Backward))
            .collect(),
        PipelineSchedule::OneFOneB => {
            let warmup = (stages - stage - 1).min(micro);
            let mut ops: Vec<Op> = (0..warmup).map(Op::Forward).collect();
            for i in 0..micro - warmup {
                ops.push(Op::Forward(warmup + i));
                ops.push(Op::Backward(i));
            }
            ops.extend((micro - warmup..micro).map(Op::Backward));
            ops
        }
    }
}

/// The layers stage `stage` of `stages` runs, of `layers`: as equal as the count allows.
pub fn stage_layers(layers: usize, stages: usize, stage: usize) -> Range<usize> {
    stage * layers / stages..(stage + 1) * layers / stages
}

/// The share of the micro-batch `m` of `micro` among `rows` rows.
pub(super) fn micro_rows(rows: usize, micro: usize, m: usize) -> Range<usize> {
    m * rows / micro..(m + 1) * rows / micro
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replays a stage's schedule: every micro-batch forward once and backward once after it, and
    /// the most held at once.
    fn in_flight(ops: &[Op], micro: usize) -> usize {
        let (mut held, mut peak) = (Vec::new(), 0);
        let (mut forward, mut backward) = (vec![false; micro], vec![false; micro]);
        for &op in ops {
            match op {
                Op::Forward(m) => {
                    assert!(!forward[m], "{m} forward twice");
                    forward[m] = true;
                    held.push(m);
                }
                Op::Backward(m) => {
                    assert!(forward[m] && !backward[m], "{m} backward out of turn");
                    backward[m] = true;
                    held.retain(|&h| h != m);
                }
            }
            peak = peak.max(held.len());
        }
        assert!(forward.iter().chain(&backward).all(|&x| x), "{ops:?}");
        peak
    }

    #[test]
    fn one_forward_one_backward_holds_at_most_the_stages_left_and_gpipe_holds_every_micro_batch() {
        for stages in 2..6 {
            for micro in 1..10 {
                for stage in 0..stages {
                    let gpipe = schedule(PipelineSchedule::Gpipe, stages, stage, micro);
                    assert_eq!(in_flight(&gpipe, micro), micro);
                    let one = schedule(PipelineSchedule::OneFOneB, stages, stage, micro);
                    assert_eq!(in_flight(&one, micro), (stages - stage).min(micro));
                }
            }
        }
        use Op::{Backward as B, Forward as F};
        assert_eq!(
            schedule(PipelineSchedule::OneFOneB, 3, 0, 4),
            [F(0), F(1), F(2), B(0), F(3), B(1), B(2), B(3)]
        );
        assert_eq!(
            schedule(PipelineSchedule::OneFOneB, 3, 2, 4),
            [F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)]
        );
    }

    #[test]
    fn stages_split_the_layers_and_the_micro_batches_split_the_rows_evenly() {
        let layers: Vec<_> = (0..3).map(|s| stage_layers(8, 3, s)).collect();
        assert_eq!(layers, [0..2, 2..5, 5..8]);
        let rows: Vec<_> = (0..3).map(|m| micro_rows(10, 3, m)).collect();
        assert_eq!(rows, [0..3, 3..6, 6..10]);
    }
}
