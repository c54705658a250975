//! The multi-layer perceptron, with a hand-written backward pass.

use super::*;

#[derive(Debug)]
pub struct Mlp {
    layers: Vec<Linear>,
    dropout: f64,
    /// Index in `Params` of the first layer's weight; each layer adds a weight and a bias.
    first_param: usize,
    /// `[in, out]` of every layer.
    sizes: Vec<(usize, usize)>,
}

impl Mlp {
    pub fn new(
        params: &mut Params,
        rng: &mut Rng,
        input: usize,
        hidden: &[u32],
        classes: usize,
        dropout: f64,
    ) -> Result<Self> {
        let mut sizes = vec![input];
        sizes.extend(hidden.iter().map(|&h| h as usize));
        sizes.push(classes);
        let first_param = params.len();
        let layers = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(params, rng, &format!("fc{i}"), w[0], w[1]))
            .collect::<Result<Vec<_>>>()?;
        let sizes = sizes.windows(2).map(|w| (w[0], w[1])).collect();
        Ok(Self {
            layers,
            dropout,
            first_param,
            sizes,
        })
    }

    /// Forward keeping every activation and gate, then backward with two matmuls per layer.
    fn backward(
        &self,
        params: &Params,
        input: &Tensor,
        targets: &[u32],
        rng: &mut Rng,
    ) -> Result<Gradients> {
        let device = input.device();
        let layers = self.sizes.len();
        let weight = |i: usize| {
            let (fan_in, fan_out) = self.sizes[i];
            Tensor::from_slice(
                &params.values[self.first_param + 2 * i],
                (fan_in, fan_out),
                device,
            )
        };
        let weights = (0..layers).map(weight).collect::<Result<Vec<_>>>()?;
        // activations[i] is layer i's input; gates[i] is d relu·dropout of layer i's output. The bias,
        // ReLU and dropout of a layer are one pass on the host over its matmul's output.
        let mut activations = vec![input.flatten_from(1)?];
        let mut gates = Vec::with_capacity(layers);
        let mut logits = Vec::new();
        let keep = (1.0 - self.dropout) as f32;
        let scale = 1.0 / keep;
        for (i, w) in weights.iter().enumerate() {
            let Some(x) = activations.last() else { break };
            let z = x.matmul(w)?;
            let (rows, cols) = z.dims2()?;
            let mut values = z.flatten_all()?.to_vec1::<f32>()?;
            let bias = &params.values[self.first_param + 2 * i + 1];
            if i + 1 == layers {
                for row in values.chunks_exact_mut(cols) {
                    for (v, b) in row.iter_mut().zip(bias) {
                        *v += b;
                    }
                }
                logits = values;
                break;
            }
            let mut gate = vec![0.0f32; values.len()];
            for (row, gate_row) in values
                .chunks_exact_mut(cols)
                .zip(gate.chunks_exact_mut(cols))
            {
                for ((v, g), b) in row.iter_mut().zip(gate_row.iter_mut()).zip(bias) {
                    let pre = *v + b;
                    // The same draws, in the same order, as `dropout` on the whole layer.
                    let mask = if self.dropout > 0.0 {
                        if rng.uniform() < keep { scale } else { 0.0 }
                    } else {
                        1.0
                    };
                    let on = if pre > 0.0 { mask } else { 0.0 };
                    *g = on;
                    *v = pre * on;
                }
            }
            activations.push(Tensor::from_vec(values, (rows, cols), device)?);
            gates.push(Tensor::from_vec(gate, (rows, cols), device)?);
        }
        if logits.is_empty() {
            invalid!("an MLP needs a layer");
        }
        let classes = self.sizes[layers - 1].1;
        let (loss, correct, d_logits) = softmax_cross_entropy(&logits, targets, classes);
        let mut g = Tensor::from_vec(d_logits, (targets.len(), classes), device)?;
        let mut grads = vec![Vec::new(); 2 * layers];
        for i in (0..layers).rev() {
            grads[2 * i] = activations[i]
                .t()?
                .matmul(&g)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            // The bias gradient sums g's rows; on the host that is one pass (candle reduces a
            // non-last dimension with strided reads).
            let (rows, cols) = g.dims2()?;
            let flat = g.flatten_all()?.to_vec1::<f32>()?;
            let mut bias_grad = vec![0.0f32; cols];
            for row in flat.chunks_exact(cols).take(rows) {
                for (acc, v) in bias_grad.iter_mut().zip(row) {
                    *acc += v;
                }
            }
            grads[2 * i + 1] = bias_grad;
            if i > 0 {
                g = g.matmul(&weights[i].t()?)?.mul(&gates[i - 1])?;
            }
        }
        Ok(Gradients {
            loss,
            correct,
            grads,
        })
    }
}

impl Model for Mlp {
    fn gradients(
        &self,
        params: &Params,
        input: &Tensor,
        targets: &[u32],
        rng: &mut Rng,
    ) -> Option<Result<Gradients>> {
        Some(self.backward(params, input, targets, rng))
    }

    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let mut x = input.flatten_from(1)?;
        let last = self.layers.len() - 1;
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x)?;
            if i < last {
                x = dropout(&x.relu()?, self.dropout, train, rng)?;
            }
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_written_mlp_backward_matches_autograd() {
        let device = Device::Cpu;
        let mut params = Params::new(&device);
        let mut init = Rng::seed(5);
        let mlp = Mlp::new(&mut params, &mut init, 12, &[16, 8], 4, 0.0).expect("model");
        let x: Vec<f32> = (0..6 * 12)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 8.0)
            .collect();
        let input = Tensor::from_vec(x, (6, 12), &device).expect("input");
        let targets = vec![0u32, 3, 1, 2, 3, 0];
        let manual = mlp
            .gradients(&params, &input, &targets, &mut Rng::seed(0))
            .expect("an MLP has a manual backward")
            .expect("backward");
        let logits = mlp
            .forward(&input, true, &mut Rng::seed(0))
            .expect("forward");
        let target_tensor = Tensor::from_vec(targets.clone(), 6, &device).expect("targets");
        let loss = candle_nn::loss::cross_entropy(&logits, &target_tensor).expect("loss");
        let auto = params
            .gradients(&loss.backward().expect("backward"))
            .expect("grads");
        let auto_loss = f64::from(loss.to_scalar::<f32>().expect("scalar"));
        assert!(
            (manual.loss - auto_loss).abs() < 1e-5,
            "{} vs {auto_loss}",
            manual.loss
        );
        assert_eq!(manual.grads.len(), auto.len());
        for (name, (m, a)) in params.names.iter().zip(manual.grads.iter().zip(&auto)) {
            for (x, y) in m.iter().zip(a) {
                assert!((x - y).abs() <= 1e-5 + 1e-4 * y.abs(), "{name}: {x} vs {y}");
            }
        }
    }
}
