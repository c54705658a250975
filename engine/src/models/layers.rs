//! Pieces of the candle forward passes the models share: uniform and normal initial values from the
//! engine's RNG, linear layers, and inverted dropout.

use crate::params::Params;
use crate::rng::Rng;
use candle_core::{Result, Tensor, Var};

pub(super) fn uniform(rng: &mut Rng, n: usize, bound: f32) -> Vec<f32> {
    (0..n).map(|_| rng.uniform_in(-bound, bound)).collect()
}

pub(super) fn normal(rng: &mut Rng, n: usize, std: f32) -> Vec<f32> {
    (0..n).map(|_| std * rng.normal()).collect()
}

#[derive(Debug, Clone)]
pub(super) struct Linear {
    weight: Var,
    bias: Var,
}

impl Linear {
    /// PyTorch's default initialisation: U(−1/√fan_in, 1/√fan_in) for weight and bias.
    pub(super) fn new(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        fan_in: usize,
        fan_out: usize,
    ) -> Result<Self> {
        let bound = 1.0 / (fan_in as f32).sqrt();
        let weight = params.add(
            &format!("{name}.weight"),
            &[fan_in, fan_out],
            uniform(rng, fan_in * fan_out, bound),
        )?;
        let bias = params.add(
            &format!("{name}.bias"),
            &[fan_out],
            uniform(rng, fan_out, bound),
        )?;
        Ok(Self { weight, bias })
    }

    pub(super) fn normal(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        fan_in: usize,
        fan_out: usize,
    ) -> Result<Self> {
        let weight = params.add(
            &format!("{name}.weight"),
            &[fan_in, fan_out],
            normal(rng, fan_in * fan_out, 0.02),
        )?;
        let bias = params.add(&format!("{name}.bias"), &[fan_out], vec![0.0; fan_out])?;
        Ok(Self { weight, bias })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match x.dims().len() {
            2 => x.matmul(self.weight.as_tensor())?,
            _ => x.broadcast_matmul(self.weight.as_tensor())?,
        };
        y.broadcast_add(self.bias.as_tensor())
    }
}

/// Inverted dropout with a mask from the engine's RNG on the CPU (so runs resume exactly), from the
/// device's own generator on a GPU (the mask is drawn there).
pub(super) fn dropout(x: &Tensor, p: f64, train: bool, rng: &mut Rng) -> Result<Tensor> {
    if !train || p <= 0.0 {
        return Ok(x.clone());
    }
    if !x.device().is_cpu() {
        return candle_nn::ops::dropout(x, p as f32);
    }
    let keep = (1.0 - p) as f32;
    let scale = 1.0 / keep;
    let mask: Vec<f32> = (0..x.elem_count())
        .map(|_| if rng.uniform() < keep { scale } else { 0.0 })
        .collect();
    x.mul(&Tensor::from_vec(mask, x.shape(), x.device())?)
}
