//! Gradient compression with error feedback: what a scheme drops from a gradient is kept and added into
//! the next step's gradient, so nothing is lost, only delayed. A gradient for one PS shard is a list of
//! slices (pieces of tensors); each scheme encodes them one after another:
//!
//! - top-k: per slice `k: u32`, `k` indices (`u32`), `k` values (`f32`) — the largest `ratio` by magnitude;
//! - 1-bit sign: per slice a scale (`f32`, the mean magnitude) and one bit per element;
//! - QSGD-style: per slice a scale (`f32`, the largest magnitude) and `bits` bits per element (a sign and
//!   `bits − 1` bits of level), rounded stochastically so the decoded value is unbiased;
//! - Deep Gradient Compression (Lin et al., ICLR 2018): top-k's encoding of an accumulated velocity —
//!   each worker keeps `u ← m·u + g` (the `sgd` optimizer's momentum, which the shards then leave out)
//!   and accumulates `v ← v + u`, sends the largest entries of `v` and zeroes them in both `v` and `u`
//!   (momentum factor masking); the kept fraction starts at 25% and falls exponentially to `ratio` over
//!   `warmup_steps`. Local gradient clipping is the worker's `grad_clip_norm`, applied before.

use crate::rng::Rng;
use drover_core::spec::{Compression, OptimizerSpec};
use std::io;

/// Encoding tags carried in a push frame's flags.
pub const RAW: u32 = 0;
pub const TOPK: u32 = 1;
pub const ONEBIT: u32 = 2;
pub const QSGD: u32 = 3;

pub fn tag(compression: &Compression) -> u32 {
    match compression {
        Compression::None => RAW,
        Compression::Topk { .. } | Compression::Dgc { .. } => TOPK,
        Compression::Onebit => ONEBIT,
        Compression::Qsgd { .. } => QSGD,
    }
}

/// The momentum a worker applies itself under `compression` (DGC's: the `sgd` optimizer's), 0 for
/// the others.
pub fn worker_momentum(compression: &Compression, optimizer: &OptimizerSpec) -> f32 {
    match (compression, optimizer) {
        (Compression::Dgc { .. }, OptimizerSpec::Sgd { momentum, .. }) => *momentum as f32,
        _ => 0.0,
    }
}

/// The optimizer the PS shards apply under `compression`: DGC's workers apply the momentum, so the
/// shards' `sgd` goes without it.
pub fn shard_optimizer(compression: &Compression, optimizer: &OptimizerSpec) -> OptimizerSpec {
    match (compression, optimizer) {
        (
            Compression::Dgc { .. },
            OptimizerSpec::Sgd {
                lr, weight_decay, ..
            },
        ) => OptimizerSpec::Sgd {
            lr: *lr,
            momentum: 0.0,
            nesterov: false,
            weight_decay: *weight_decay,
        },
        _ => optimizer.clone(),
    }
}

/// DGC's kept fraction at `step`: 25% falling exponentially to `ratio` over `warmup` steps.
pub fn dgc_ratio(ratio: f64, warmup: u32, step: u64) -> f64 {
    const START: f64 = 0.25;
    if ratio >= START || step >= u64::from(warmup) {
        return ratio;
    }
    START * (ratio / START).powf(step as f64 / f64::from(warmup))
}

/// One worker's compressor for one shard's slices: the scheme, the residuals, the rounding RNG.
#[derive(Debug)]
pub struct Compressor {
    scheme: Compression,
    residual: Vec<Vec<f32>>,
    rng: Rng,
    /// Scratch for top-k selection.
    order: Vec<u32>,
    /// DGC: the momentum and each slice's velocity `u` (empty for the other schemes).
    momentum: f32,
    velocity: Vec<Vec<f32>>,
    /// Gradients encoded so far (DGC's warm-up counts them).
    encoded: u64,
}

impl Compressor {
    /// `momentum`: what [`worker_momentum`] gives for the job (DGC's; ignored by the others).
    pub fn new(scheme: Compression, slice_lens: &[usize], rng: Rng, momentum: f32) -> Self {
        let dgc = matches!(scheme, Compression::Dgc { .. });
        Self {
            residual: slice_lens.iter().map(|&n| vec![0.0; n]).collect(),
            velocity: if dgc {
                slice_lens.iter().map(|&n| vec![0.0; n]).collect()
            } else {
                Vec::new()
            },
            scheme,
            rng,
            order: Vec::new(),
            momentum,
            encoded: 0,
        }
    }

    pub fn tag(&self) -> u32 {
        tag(&self.scheme)
    }

    /// Adds the residual into each slice's gradient, encodes the result into `out` (cleared first) and
    /// keeps what the encoding dropped as the new residual; returns the encoding's tag. With `flush`
    /// the sum goes out uncompressed ([`RAW`]) and the residual is left at zero: workers flush before
    /// every checkpoint, so the checkpoint's parameters hold everything the residuals had delayed and
    /// a restart or a resize (which starts from zero residuals) drops nothing.
    pub fn encode(&mut self, slices: &[&[f32]], flush: bool, out: &mut Vec<u8>) -> u32 {
        out.clear();
        let momentum = self.momentum;
        for (i, &grad) in slices.iter().enumerate() {
            let acc = &mut self.residual[i];
            let mut velocity = self.velocity.get_mut(i);
            match velocity.as_deref_mut() {
                // DGC's momentum correction: the velocity accumulates, not the raw gradient.
                Some(velocity) => {
                    for ((a, u), &g) in acc.iter_mut().zip(velocity.iter_mut()).zip(grad) {
                        *u = momentum * *u + g;
                        *a += *u;
                    }
                }
                None => {
                    for (a, &g) in acc.iter_mut().zip(grad) {
                        *a += g;
                    }
                }
            }
            if flush {
                out.extend_from_slice(bytemuck::cast_slice(acc));
                acc.fill(0.0);
                if let Some(velocity) = velocity {
                    velocity.fill(0.0);
                }
                continue;
            }
            match self.scheme {
                Compression::None => {
                    out.extend_from_slice(bytemuck::cast_slice(acc));
                    acc.fill(0.0);
                }
                Compression::Topk { ratio } => {
                    topk(acc, ratio, &mut self.order, out);
                }
                Compression::Onebit => onebit(acc, out),
                Compression::Qsgd { bits } => qsgd(acc, bits, &mut self.rng, out),
                Compression::Dgc {
                    ratio,
                    warmup_steps,
                } => {
                    let kept = dgc_ratio(ratio, warmup_steps, self.encoded);
                    let k = topk(acc, kept, &mut self.order, out);
                    // Momentum factor masking: what was sent stops carrying momentum.
                    if let Some(velocity) = velocity {
                        for &j in &self.order[..k] {
                            velocity[j as usize] = 0.0;
                        }
                    }
                }
            }
        }
        self.encoded += 1;
        if flush { RAW } else { self.tag() }
    }
}

/// Encodes the largest `ratio` of `acc` by magnitude and zeroes them there; returns how many, whose
/// indices are then `order[..k]`.
fn topk(acc: &mut [f32], ratio: f64, order: &mut Vec<u32>, out: &mut Vec<u8>) -> usize {
    let n = acc.len();
    let k = ((n as f64 * ratio).ceil() as usize)
        .clamp(1, n.max(1))
        .min(n);
    out.extend_from_slice(&(k as u32).to_le_bytes());
    if k == 0 {
        return 0;
    }
    order.clear();
    order.extend(0..n as u32);
    if k < n {
        order.select_nth_unstable_by(k - 1, |&a, &b| {
            acc[b as usize].abs().total_cmp(&acc[a as usize].abs())
        });
    }
    let chosen = &mut order[..k];
    chosen.sort_unstable();
    for &i in chosen.iter() {
        out.extend_from_slice(&i.to_le_bytes());
    }
    for &i in chosen.iter() {
        out.extend_from_slice(&acc[i as usize].to_le_bytes());
        acc[i as usize] = 0.0;
    }
    k
}

fn onebit(acc: &mut [f32], out: &mut Vec<u8>) {
    let scale = if acc.is_empty() {
        0.0
    } else {
        (acc.iter().map(|x| f64::from(x.abs())).sum::<f64>() / acc.len() as f64) as f32
    };
    out.extend_from_slice(&scale.to_le_bytes());
    for chunk in acc.chunks_mut(8) {
        let mut byte = 0u8;
        for (j, a) in chunk.iter_mut().enumerate() {
            if *a >= 0.0 {
                byte |= 1 << j;
                *a -= scale;
            } else {
                *a += scale;
            }
        }
        out.push(byte);
    }
}

/// Appends `width`-bit codes to a byte stream, least significant bit first.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    filled: u32,
}

impl BitWriter<'_> {
    fn put(&mut self, code: u64, width: u32) {
        self.acc |= code << self.filled;
        self.filled += width;
        while self.filled >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.filled -= 8;
        }
    }

    fn finish(self) {
        if self.filled > 0 {
            self.out.push(self.acc as u8);
        }
    }
}

/// Values quantised against one scale (QSGD's buckets): a scale per 512 values costs 4 bytes per
/// 256 of 4-bit codes, and keeps one large value from flattening its neighbours' thousands.
const QSGD_BUCKET: usize = 512;

fn qsgd(acc: &mut [f32], bits: u32, rng: &mut Rng, out: &mut Vec<u8>) {
    let bits = bits.clamp(2, 8);
    let levels = ((1u32 << (bits - 1)) - 1) as f32;
    for bucket in acc.chunks_mut(QSGD_BUCKET) {
        let scale = bucket.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        out.extend_from_slice(&scale.to_le_bytes());
        let mut writer = BitWriter {
            out: &mut *out,
            acc: 0,
            filled: 0,
        };
        for a in bucket.iter_mut() {
            let r = if scale > 0.0 {
                a.abs() / scale * levels
            } else {
                0.0
            };
            let floor = r.floor();
            let level = (floor + f32::from(u8::from(rng.uniform() < r - floor))).min(levels);
            let negative = *a < 0.0;
            let decoded = scale * level / levels;
            *a -= if negative { -decoded } else { decoded };
            writer.put(u64::from(negative) | ((level as u64) << 1), bits);
        }
        writer.finish();
    }
}

fn truncated() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        "compressed gradient is truncated",
    )
}

fn f32_at(bytes: &[u8], at: usize) -> io::Result<f32> {
    let b = bytes.get(at..at + 4).ok_or_else(truncated)?;
    Ok(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn u32_at(bytes: &[u8], at: usize) -> io::Result<u32> {
    let b = bytes.get(at..at + 4).ok_or_else(truncated)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decodes a payload encoded with `tag` into `targets` (overwriting them); `bits` is QSGD's width.
pub fn decode(tag: u32, bits: u32, bytes: &[u8], targets: &mut [&mut [f32]]) -> io::Result<()> {
    let mut at = 0usize;
    for target in targets.iter_mut() {
        let n = target.len();
        match tag {
            RAW => {
                let b = bytes.get(at..at + 4 * n).ok_or_else(truncated)?;
                for (t, c) in target.iter_mut().zip(b.chunks_exact(4)) {
                    *t = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
                at += 4 * n;
            }
            TOPK => {
                let k = u32_at(bytes, at)? as usize;
                at += 4;
                if k > n {
                    return Err(truncated());
                }
                target.fill(0.0);
                let values = at + 4 * k;
                for j in 0..k {
                    let i = u32_at(bytes, at + 4 * j)? as usize;
                    *target.get_mut(i).ok_or_else(truncated)? = f32_at(bytes, values + 4 * j)?;
                }
                at = values + 4 * k;
            }
            ONEBIT => {
                let scale = f32_at(bytes, at)?;
                at += 4;
                let b = bytes.get(at..at + n.div_ceil(8)).ok_or_else(truncated)?;
                for (i, t) in target.iter_mut().enumerate() {
                    *t = if b[i / 8] >> (i % 8) & 1 == 1 {
                        scale
                    } else {
                        -scale
                    };
                }
                at += n.div_ceil(8);
            }
            QSGD => {
                let bits = bits.clamp(2, 8);
                let levels = ((1u32 << (bits - 1)) - 1) as f32;
                let mask = (1u64 << bits) - 1;
                for bucket in target.chunks_mut(QSGD_BUCKET) {
                    let scale = f32_at(bytes, at)?;
                    at += 4;
                    let len = (bucket.len() * bits as usize).div_ceil(8);
                    let b = bytes.get(at..at + len).ok_or_else(truncated)?;
                    let (mut acc, mut filled, mut next) = (0u64, 0u32, 0usize);
                    for t in bucket.iter_mut() {
                        while filled < bits {
                            acc |= u64::from(b[next]) << filled;
                            next += 1;
                            filled += 8;
                        }
                        let code = acc & mask;
                        acc >>= bits;
                        filled -= bits;
                        let value = scale * (code >> 1) as f32 / levels;
                        *t = if code & 1 == 1 { -value } else { value };
                    }
                    at += len;
                }
            }
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("unknown gradient encoding {other}"),
                ));
            }
        }
    }
    if at != bytes.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "compressed gradient has trailing bytes",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(scheme: Compression, bits: u32) -> (Vec<Vec<f32>>, Vec<Vec<f32>>, usize) {
        let mut rng = Rng::seed(3);
        let grads: Vec<Vec<f32>> = [1000usize, 37, 1]
            .iter()
            .map(|&n| (0..n).map(|_| rng.normal()).collect())
            .collect();
        let lens: Vec<usize> = grads.iter().map(Vec::len).collect();
        let mut c = Compressor::new(scheme, &lens, Rng::seed(9), 0.9);
        let mut out = Vec::new();
        let slices: Vec<&[f32]> = grads.iter().map(Vec::as_slice).collect();
        let tag = c.encode(&slices, false, &mut out);
        let mut decoded: Vec<Vec<f32>> = lens.iter().map(|&n| vec![f32::NAN; n]).collect();
        let mut targets: Vec<&mut [f32]> = decoded.iter_mut().map(Vec::as_mut_slice).collect();
        decode(tag, bits, &out, &mut targets).unwrap();
        // Error feedback: what was sent plus what is kept is exactly the gradient.
        for ((g, d), r) in grads.iter().zip(&decoded).zip(&c.residual) {
            for ((g, d), r) in g.iter().zip(d).zip(r) {
                assert!((g - (d + r)).abs() < 1e-5, "{g} vs {d} + {r}");
            }
        }
        (grads, decoded, out.len())
    }

    #[test]
    fn every_scheme_round_trips_with_error_feedback() {
        let raw = 4 * 1038;
        let (_, d, bytes) = round_trip(Compression::None, 0);
        assert_eq!(bytes, raw);
        assert!(d.iter().flatten().all(|x| x.is_finite()));
        let (g, d, bytes) = round_trip(Compression::Topk { ratio: 0.01 }, 0);
        // 10 + 1 + 1 entries kept.
        assert_eq!(bytes, 3 * 4 + 12 * 8);
        let kept = d[0].iter().filter(|x| **x != 0.0).count();
        assert_eq!(kept, 10);
        let smallest_kept = d[0]
            .iter()
            .filter(|x| **x != 0.0)
            .fold(f32::MAX, |m, x| m.min(x.abs()));
        let dropped_max = g[0]
            .iter()
            .zip(&d[0])
            .filter(|(_, d)| **d == 0.0)
            .fold(0.0f32, |m, (g, _)| m.max(g.abs()));
        assert!(smallest_kept >= dropped_max);
        let (_, _, bytes) = round_trip(Compression::Onebit, 0);
        assert_eq!(bytes, 3 * 4 + 125 + 5 + 1);
        let (_, _, bytes) = round_trip(Compression::Qsgd { bits: 4 }, 4);
        // A scale per bucket of 512 values (the 1,000 make two), half a byte a value.
        assert_eq!(bytes, (4 + 256) + (4 + 244) + (4 + 19) + (4 + 1));
    }

    /// DGC: the velocity accumulates (`u ← m·u + g`, `v ← v + u`), the largest of `v` go out and stop
    /// carrying momentum, and the kept fraction warms up from 25%.
    #[test]
    fn dgc_corrects_momentum_masks_what_it_sent_and_warms_up() {
        assert_eq!(dgc_ratio(0.01, 100, 0), 0.25);
        assert!((dgc_ratio(0.01, 100, 50) - 0.05).abs() < 1e-12);
        assert_eq!(dgc_ratio(0.01, 100, 100), 0.01);
        assert_eq!(dgc_ratio(0.5, 100, 0), 0.5);
        let scheme = Compression::Dgc {
            ratio: 0.1,
            warmup_steps: 0,
        };
        let mut c = Compressor::new(scheme, &[10], Rng::seed(1), 0.5);
        let g: Vec<f32> = (1..=10).map(|i| i as f32).collect();
        let mut out = Vec::new();
        let mut sent = vec![0.0f32; 10];
        // Step 1: u = g, v = g; the largest (10) goes out.
        c.encode(&[&g], false, &mut out);
        decode(TOPK, 0, &out, &mut [&mut sent]).unwrap();
        assert_eq!(sent[9], 10.0);
        assert_eq!((c.velocity[0][9], c.residual[0][9]), (0.0, 0.0));
        assert_eq!((c.velocity[0][8], c.residual[0][8]), (9.0, 9.0));
        // Step 2: u = 0.5·9 + 9 = 13.5 at index 8, v = 9 + 13.5 = 22.5, which goes out; index 9's
        // momentum was masked, so u = 10 and v = 10 there.
        c.encode(&[&g], false, &mut out);
        decode(TOPK, 0, &out, &mut [&mut sent]).unwrap();
        assert_eq!(sent[8], 22.5);
        assert_eq!((c.velocity[0][9], c.residual[0][9]), (10.0, 10.0));
        // A flush sends all of v and clears the velocity too.
        assert_eq!(c.encode(&[&g], true, &mut out), RAW);
        assert!(
            c.velocity[0]
                .iter()
                .chain(&c.residual[0])
                .all(|&x| x == 0.0)
        );
        // The shards leave the momentum to the workers.
        let sgd = OptimizerSpec::Sgd {
            lr: 0.1,
            momentum: 0.9,
            nesterov: false,
            weight_decay: 0.0,
        };
        let dgc = Compression::Dgc {
            ratio: 0.01,
            warmup_steps: 10,
        };
        assert_eq!(worker_momentum(&dgc, &sgd), 0.9);
        assert_eq!(
            worker_momentum(&Compression::Topk { ratio: 0.01 }, &sgd),
            0.0
        );
        assert!(matches!(
            shard_optimizer(&dgc, &sgd),
            OptimizerSpec::Sgd { momentum, .. } if momentum == 0.0
        ));
        assert_eq!(shard_optimizer(&Compression::None, &sgd), sgd);
    }

    /// A flush sends the residual and the gradient uncompressed and leaves nothing behind, so the
    /// two pushes together deliver both gradients whole.
    #[test]
    fn a_flush_delivers_everything_the_residual_held() {
        let grads: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) / 7.0).collect();
        let mut c = Compressor::new(Compression::Topk { ratio: 0.05 }, &[100], Rng::seed(1), 0.0);
        let mut out = Vec::new();
        assert_eq!(c.encode(&[&grads], false, &mut out), TOPK);
        let mut first = vec![0.0f32; 100];
        decode(TOPK, 0, &out, &mut [&mut first]).unwrap();
        assert!(c.residual[0].iter().any(|&r| r != 0.0));
        assert_eq!(c.encode(&[&grads], true, &mut out), RAW);
        assert_eq!(out.len(), 4 * 100);
        let mut second = vec![0.0f32; 100];
        decode(RAW, 0, &out, &mut [&mut second]).unwrap();
        assert!(c.residual[0].iter().all(|&r| r == 0.0));
        for ((a, b), g) in first.iter().zip(&second).zip(&grads) {
            assert!((a + b - 2.0 * g).abs() < 1e-5, "{a} + {b} vs 2 x {g}");
        }
    }

    #[test]
    fn truncated_payloads_are_errors() {
        let mut t = vec![0.0f32; 4];
        assert!(decode(RAW, 0, &[0u8; 15], &mut [&mut t]).is_err());
        assert!(decode(TOPK, 0, &5u32.to_le_bytes(), &mut [&mut t]).is_err());
        assert!(decode(QSGD, 4, &[0u8; 5], &mut [&mut t]).is_err());
        assert!(decode(42, 0, &[], &mut [&mut t]).is_err());
    }
}
