//! The engine's optimizers over flat, named parameter buffers: SGD with momentum (and Nesterov) and
//! AdamW, with PyTorch's update rules; a learning-rate schedule (linear warm-up, cosine decay) and
//! global-norm gradient clipping. Applying gradients is separate from computing them, so a parameter
//! server, an all-reduce or a compressor can sit in between; the state is plain buffers that go into
//! checkpoints whole.

use crate::models::vector::vectorised;
use drover_core::spec::{Decay, LrSchedule, OptimizerSpec};
use rayon::prelude::*;

/// Elements updated per parallel piece: large enough that splitting costs nothing measurable.
const CHUNK: usize = 1 << 15;

#[derive(Debug, Clone, PartialEq)]
pub enum Optimizer {
    Sgd {
        momentum: f32,
        nesterov: bool,
        weight_decay: f32,
        /// One momentum buffer per parameter; empty until the first step (PyTorch starts it at the
        /// first gradient).
        buffers: Vec<Vec<f32>>,
    },
    AdamW {
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
        m: Vec<Vec<f32>>,
        v: Vec<Vec<f32>>,
        /// Steps taken, for bias correction.
        t: u64,
    },
}

impl Optimizer {
    /// A fresh optimizer for parameters of these sizes; returns it with its base learning rate.
    pub fn new(spec: &OptimizerSpec, sizes: &[usize]) -> (Self, f64) {
        let zeros = || sizes.iter().map(|&n| vec![0.0f32; n]).collect::<Vec<_>>();
        match *spec {
            OptimizerSpec::Sgd {
                lr,
                momentum,
                nesterov,
                weight_decay,
            } => (
                Optimizer::Sgd {
                    momentum: momentum as f32,
                    nesterov,
                    weight_decay: weight_decay as f32,
                    buffers: Vec::new(),
                },
                lr,
            ),
            OptimizerSpec::Adamw {
                lr,
                weight_decay,
                beta1,
                beta2,
                eps,
            } => (
                Optimizer::AdamW {
                    beta1: beta1 as f32,
                    beta2: beta2 as f32,
                    eps: eps as f32,
                    weight_decay: weight_decay as f32,
                    m: zeros(),
                    v: zeros(),
                    t: 0,
                },
                lr,
            ),
        }
    }

    /// One update of every parameter with its gradient, at learning rate `lr`.
    pub fn step(&mut self, params: &mut [Vec<f32>], grads: &[Vec<f32>], lr: f32) {
        self.step_part(params, grads, lr, 0..params.len());
    }

    /// One update of the parameters `part` (indices) with their gradients, the others left as
    /// they are (a pipeline stage updates its own layers; `grads` outside `part` are not read).
    /// Every state buffer is kept for every parameter, so the state of any part can be read or
    /// replaced ([`Optimizer::buffers_mut`]).
    pub fn step_part(
        &mut self,
        params: &mut [Vec<f32>],
        grads: &[Vec<f32>],
        lr: f32,
        part: std::ops::Range<usize>,
    ) {
        match self {
            Optimizer::Sgd {
                momentum,
                nesterov,
                weight_decay,
                buffers,
            } => {
                let (momentum, nesterov, wd) = (*momentum, *nesterov, *weight_decay);
                let first = buffers.is_empty();
                if first && momentum != 0.0 {
                    *buffers = params.iter().map(|p| vec![0.0; p.len()]).collect();
                }
                let decay = wd != 0.0;
                for (i, (p, g)) in params
                    .iter_mut()
                    .zip(grads)
                    .enumerate()
                    .take(part.end)
                    .skip(part.start)
                {
                    if momentum == 0.0 {
                        p.par_chunks_mut(CHUNK)
                            .zip(g.par_chunks(CHUNK))
                            .for_each(|(p, g)| {
                                for (p, &g) in p.iter_mut().zip(g) {
                                    *p -= lr * (g + wd * *p);
                                }
                            });
                        continue;
                    }
                    let pass = match (first, nesterov, decay) {
                        (false, false, false) => sgd_pass::<false, false, false>,
                        (false, false, true) => sgd_pass::<false, false, true>,
                        (false, true, false) => sgd_pass::<false, true, false>,
                        (false, true, true) => sgd_pass::<false, true, true>,
                        (true, false, false) => sgd_pass::<true, false, false>,
                        (true, false, true) => sgd_pass::<true, false, true>,
                        (true, true, false) => sgd_pass::<true, true, false>,
                        (true, true, true) => sgd_pass::<true, true, true>,
                    };
                    pass(p, g, &mut buffers[i], lr, momentum, wd);
                }
            }
            Optimizer::AdamW {
                beta1,
                beta2,
                eps,
                weight_decay,
                m,
                v,
                t,
            } => {
                *t += 1;
                let (b1, b2, eps, wd) = (*beta1, *beta2, *eps, *weight_decay);
                let correction1 = 1.0 - b1.powi(*t as i32);
                let correction2 = 1.0 - b2.powi(*t as i32);
                let step_size = lr / correction1;
                let sqrt_c2 = correction2.sqrt();
                let decay = 1.0 - lr * wd;
                for (((p, g), m), v) in params
                    .iter_mut()
                    .zip(grads)
                    .zip(m.iter_mut())
                    .zip(v.iter_mut())
                    .take(part.end)
                    .skip(part.start)
                {
                    let k = [decay, b1, b2, step_size, sqrt_c2, eps];
                    p.par_chunks_mut(CHUNK)
                        .zip(g.par_chunks(CHUNK))
                        .zip(m.par_chunks_mut(CHUNK))
                        .zip(v.par_chunks_mut(CHUNK))
                        .for_each(|(((p, g), m), v)| adamw_pass(p, g, m, v, k));
                }
            }
        }
    }

    /// The state buffers of parameter `tensor` (SGD's momentum, once it has one; AdamW's two
    /// moments), for copying a part of the state between workers.
    pub fn buffers_mut(&mut self, tensor: usize) -> Vec<&mut Vec<f32>> {
        match self {
            Optimizer::Sgd { buffers, .. } => buffers.get_mut(tensor).into_iter().collect(),
            Optimizer::AdamW { m, v, .. } => m
                .get_mut(tensor)
                .into_iter()
                .chain(v.get_mut(tensor))
                .collect(),
        }
    }

    /// The state as named buffers, for checkpoints.
    pub fn state(&self, names: &[String]) -> Vec<(String, Vec<f32>)> {
        match self {
            Optimizer::Sgd { buffers, .. } => names
                .iter()
                .zip(buffers)
                .map(|(n, b)| (format!("momentum.{n}"), b.clone()))
                .collect(),
            Optimizer::AdamW { m, v, t, .. } => {
                let mut state: Vec<(String, Vec<f32>)> = names
                    .iter()
                    .zip(m)
                    .map(|(n, b)| (format!("exp_avg.{n}"), b.clone()))
                    .chain(
                        names
                            .iter()
                            .zip(v)
                            .map(|(n, b)| (format!("exp_avg_sq.{n}"), b.clone())),
                    )
                    .collect();
                // The step count as two exact halves (f32 holds integers up to 2^24 exactly).
                state.push((
                    "step".to_owned(),
                    vec![(*t >> 24) as f32, (*t & 0xFF_FFFF) as f32],
                ));
                state
            }
        }
    }

    /// The name a checkpoint's manifest records for this optimizer.
    pub fn kind(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::AdamW { .. } => "adamw",
        }
    }

    /// Restores the state `state` produced for parameters `names` of `sizes` values each; `get`
    /// looks a buffer up by name. Every buffer is checked against its parameter's size, and the step
    /// count against what `state` writes, so a damaged or foreign checkpoint is refused whole.
    pub fn restore(
        &mut self,
        names: &[String],
        sizes: &[usize],
        mut get: impl FnMut(&str) -> Option<Vec<f32>>,
    ) -> Result<(), String> {
        let mut buffer = |key: String, size: usize| -> Result<Option<Vec<f32>>, String> {
            match get(&key) {
                Some(values) if values.len() != size => Err(format!(
                    "{key} has {} values, its parameter {size}",
                    values.len()
                )),
                found => Ok(found),
            }
        };
        match self {
            Optimizer::Sgd {
                buffers, momentum, ..
            } => {
                if *momentum == 0.0 {
                    return Ok(());
                }
                let mut restored = Vec::with_capacity(names.len());
                for (n, &size) in names.iter().zip(sizes) {
                    restored.push(buffer(format!("momentum.{n}"), size)?);
                }
                let present = restored.iter().filter(|b| b.is_some()).count();
                // No buffers at all means the checkpoint was taken before the first step.
                *buffers = match present {
                    0 => Vec::new(),
                    all if all == names.len() => restored.into_iter().flatten().collect(),
                    _ => {
                        return Err(format!(
                            "momentum buffers for {present} of {} parameters",
                            names.len()
                        ));
                    }
                };
                Ok(())
            }
            Optimizer::AdamW { m, v, t, .. } => {
                let mut first = Vec::with_capacity(names.len());
                let mut second = Vec::with_capacity(names.len());
                for (n, &size) in names.iter().zip(sizes) {
                    first.push(
                        buffer(format!("exp_avg.{n}"), size)?
                            .ok_or_else(|| format!("exp_avg.{n} missing"))?,
                    );
                    second.push(
                        buffer(format!("exp_avg_sq.{n}"), size)?
                            .ok_or_else(|| format!("exp_avg_sq.{n} missing"))?,
                    );
                }
                let step = get("step").ok_or("step missing")?;
                let steps = match step[..] {
                    [high, low]
                        if [high, low]
                            .iter()
                            .all(|x| x.is_finite() && *x >= 0.0 && x.fract() == 0.0)
                            && low < (1u32 << 24) as f32
                            && high < (1u32 << 24) as f32 =>
                    {
                        ((high as u64) << 24) | low as u64
                    }
                    _ => return Err(format!("step is not a step count: {step:?}")),
                };
                (*m, *v, *t) = (first, second, steps);
                Ok(())
            }
        }
    }
}

/// The learning rate at `step` (0-based): linear warm-up, then constant or cosine decay to zero at
/// `total_steps`.
pub fn learning_rate(base: f64, schedule: &LrSchedule, step: u64, total_steps: u64) -> f64 {
    let warmup = schedule.warmup_steps;
    if step < warmup {
        return base * (step + 1) as f64 / warmup as f64;
    }
    match schedule.decay {
        Decay::None => base,
        Decay::Cosine => {
            let span = total_steps.saturating_sub(warmup).max(1);
            let progress = ((step - warmup) as f64 / span as f64).min(1.0);
            base * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
        }
    }
}

/// Scales the gradients so their global L2 norm is at most `max_norm`; returns the norm before.
pub fn clip_global_norm(grads: &mut [Vec<f32>], max_norm: f64) -> f64 {
    let norm = squared_norm(grads).sqrt();
    if let Some(scale) = clip_scale(norm, max_norm) {
        for g in grads.iter_mut().flat_map(|g| g.iter_mut()) {
            *g *= scale;
        }
    }
    norm
}

/// The sum of the squares of every gradient value.
pub fn squared_norm(grads: &[Vec<f32>]) -> f64 {
    grads
        .iter()
        .flat_map(|g| g.iter())
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
}

/// The factor [`clip_global_norm`] scales a gradient of global norm `norm` by, if it clips it.
pub fn clip_scale(norm: f64, max_norm: f64) -> Option<f32> {
    (norm > max_norm).then(|| (max_norm / (norm + 1e-6)) as f32)
}

vectorised! {
    /// One pass of AdamW over a piece of a parameter, at the CPU's widest vectors (the square root
    /// and the division dominate it). `k` is `[decay, beta1, beta2, step_size, sqrt(correction2),
    /// eps]`. Each element's arithmetic is the same IEEE operations at any width (no fused
    /// multiply-add), so the result does not depend on the CPU.
    fn adamw_pass<'a>(p: &'a mut [f32], g: &'a [f32], m: &'a mut [f32], v: &'a mut [f32], k: [f32; 6]) {
        let [decay, b1, b2, step_size, sqrt_c2, eps] = k;
        let n = p.len();
        let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
        for i in 0..n {
            let gi = g[i];
            let pi = p[i] * decay;
            let mi = b1 * m[i] + (1.0 - b1) * gi;
            let vi = b2 * v[i] + (1.0 - b2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - step_size * mi / (vi.sqrt() / sqrt_c2 + eps);
        }
    }
}

/// One pass of SGD with momentum over a parameter. The flags are constants, so each combination
/// compiles to its own branch-free, vectorised loop (with them as runtime values the pass ran at half
/// the speed); the arithmetic is PyTorch's whichever terms are present.
fn sgd_pass<const FIRST: bool, const NESTEROV: bool, const DECAY: bool>(
    p: &mut [f32],
    g: &[f32],
    buf: &mut [f32],
    lr: f32,
    momentum: f32,
    wd: f32,
) {
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(buf.par_chunks_mut(CHUNK))
        .for_each(|((p, g), buf)| {
            for ((p, &g), b) in p.iter_mut().zip(g).zip(buf.iter_mut()) {
                let d = if DECAY { g + wd * *p } else { g };
                *b = if FIRST { d } else { momentum * *b + d };
                let update = if NESTEROV { d + momentum * *b } else { *b };
                *p -= lr * update;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vectorised_adamw_pass_is_bit_identical_to_the_scalar_rule() {
        let draw = |i: usize, seed: u32| {
            ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5
        };
        let k = [0.999_99f32, 0.9, 0.999, 1e-3, 0.031_6, 1e-8];
        let [decay, b1, b2, step_size, sqrt_c2, eps] = k;
        // Lengths around every vector width, and a remainder after whole vectors.
        for n in [1, 3, 4, 7, 8, 15, 16, 17, 31, 33, 1000, 4099] {
            let g: Vec<f32> = (0..n).map(|i| draw(i, 1)).collect();
            let mut p: Vec<f32> = (0..n).map(|i| draw(i, 2)).collect();
            let mut m: Vec<f32> = (0..n).map(|i| 0.1 * draw(i, 3)).collect();
            let mut v: Vec<f32> = (0..n).map(|i| 0.01 * draw(i, 4).abs()).collect();
            let (mut p_ref, mut m_ref, mut v_ref) = (p.clone(), m.clone(), v.clone());
            adamw_pass(&mut p, &g, &mut m, &mut v, k);
            for i in 0..n {
                p_ref[i] *= decay;
                m_ref[i] = b1 * m_ref[i] + (1.0 - b1) * g[i];
                v_ref[i] = b2 * v_ref[i] + (1.0 - b2) * g[i] * g[i];
                p_ref[i] -= step_size * m_ref[i] / (v_ref[i].sqrt() / sqrt_c2 + eps);
            }
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&p), bits(&p_ref), "parameters, n = {n}");
            assert_eq!(bits(&m), bits(&m_ref), "first moments, n = {n}");
            assert_eq!(bits(&v), bits(&v_ref), "second moments, n = {n}");
        }
    }

    #[test]
    fn sgd_with_momentum_matches_pytorch_by_hand() {
        let spec = OptimizerSpec::Sgd {
            lr: 0.1,
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
        };
        let (mut opt, lr) = Optimizer::new(&spec, &[1]);
        let mut p = vec![vec![1.0f32]];
        opt.step(&mut p, &[vec![1.0]], lr as f32); // buf = 1, p = 0.9
        opt.step(&mut p, &[vec![1.0]], lr as f32); // buf = 1.9, p = 0.71
        assert!((p[0][0] - 0.71).abs() < 1e-6, "{}", p[0][0]);
        let nesterov = OptimizerSpec::Sgd {
            lr: 0.1,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.0,
        };
        let (mut opt, _) = Optimizer::new(&nesterov, &[1]);
        let mut p = vec![vec![1.0f32]];
        opt.step(&mut p, &[vec![1.0]], 0.1); // buf = 1, update = 1 + 0.9 = 1.9
        assert!((p[0][0] - 0.81).abs() < 1e-6);
    }

    #[test]
    fn sgd_with_weight_decay_matches_pytorch_by_hand_with_and_without_nesterov() {
        // p = 1, g = 1, lr 0.1, momentum 0.9, weight decay 0.5; two steps of each (the first step
        // and the later ones run different loops).
        for (nesterov, after) in [(false, [0.85f32, 0.5725]), (true, [0.715, 0.335575])] {
            let spec = OptimizerSpec::Sgd {
                lr: 0.1,
                momentum: 0.9,
                nesterov,
                weight_decay: 0.5,
            };
            let (mut opt, lr) = Optimizer::new(&spec, &[1]);
            let mut p = vec![vec![1.0f32]];
            for expected in after {
                opt.step(&mut p, &[vec![1.0]], lr as f32);
                assert!((p[0][0] - expected).abs() < 1e-6, "{nesterov}: {}", p[0][0]);
            }
        }
    }

    #[test]
    fn adamw_first_step_moves_by_lr_and_decays_weights() {
        let spec = OptimizerSpec::Adamw {
            lr: 0.01,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        };
        let (mut opt, lr) = Optimizer::new(&spec, &[2]);
        let mut p = vec![vec![1.0f32, -1.0]];
        opt.step(&mut p, &[vec![0.5, -2.0]], lr as f32);
        // p·(1 − lr·wd) − lr·sign(g) on the first step.
        assert!((p[0][0] - (0.999 - 0.01)).abs() < 1e-5, "{:?}", p);
        assert!((p[0][1] - (-0.999 + 0.01)).abs() < 1e-5, "{:?}", p);
        let names = vec!["w".to_owned()];
        let state = opt.state(&names);
        let (mut restored, _) = Optimizer::new(&spec, &[2]);
        restored
            .restore(&names, &[2], |n| {
                state.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone())
            })
            .unwrap();
        assert_eq!(restored, opt);
    }

    #[test]
    fn warmup_then_cosine() {
        let schedule = LrSchedule {
            warmup_steps: 10,
            decay: Decay::Cosine,
        };
        assert!((learning_rate(1.0, &schedule, 0, 110) - 0.1).abs() < 1e-12);
        assert!((learning_rate(1.0, &schedule, 10, 110) - 1.0).abs() < 1e-12);
        assert!((learning_rate(1.0, &schedule, 60, 110) - 0.5).abs() < 1e-12);
        assert!(learning_rate(1.0, &schedule, 110, 110).abs() < 1e-12);
        let mut grads = vec![vec![3.0f32], vec![4.0]];
        assert!((clip_global_norm(&mut grads, 1.0) - 5.0).abs() < 1e-9);
        assert!((grads[0][0] - 0.6).abs() < 1e-5 && (grads[1][0] - 0.8).abs() < 1e-5);
    }
}
