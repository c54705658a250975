//! The LeNet-5 class convolutional network.

use super::*;

#[derive(Debug)]
struct Conv {
    kernel: Var,
    bias: Var,
    padding: usize,
}

impl Conv {
    fn new(
        params: &mut Params,
        rng: &mut Rng,
        name: &str,
        c_in: usize,
        c_out: usize,
        k: usize,
        padding: usize,
    ) -> Result<Self> {
        let fan_in = c_in * k * k;
        let bound = 1.0 / (fan_in as f32).sqrt();
        let kernel = params.add(
            &format!("{name}.weight"),
            &[c_out, c_in, k, k],
            uniform(rng, c_out * fan_in, bound),
        )?;
        let bias = params.add(
            &format!("{name}.bias"),
            &[c_out],
            uniform(rng, c_out, bound),
        )?;
        Ok(Self {
            kernel,
            bias,
            padding,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = x.conv2d(self.kernel.as_tensor(), self.padding, 1, 1, 1)?;
        y.broadcast_add(&self.bias.as_tensor().reshape((1, (), 1, 1))?)
    }
}

/// LeNet-5 class: two convolutions, each with ReLU and 2×2 max pooling, then fully connected layers.
/// The first convolution keeps the image size (5×5 kernels on images of 28 pixels or more, 3×3 below);
/// the second is 5×5 without padding when the pooled image is at least 10 pixels (LeNet's 14 → 10), 3×3
/// with padding otherwise.
#[derive(Debug)]
pub struct Cnn {
    convs: Vec<Conv>,
    fcs: Vec<Linear>,
    dropout: f64,
}

impl Cnn {
    pub fn new(
        params: &mut Params,
        rng: &mut Rng,
        input_shape: &[usize],
        channels: &[u32],
        hidden: &[u32],
        classes: usize,
        dropout: f64,
    ) -> Result<Self> {
        let (c, mut size) = match input_shape {
            [c, h, w] if h == w => (*c, *h),
            [f] => {
                let side = (*f as f64).sqrt().round() as usize;
                if side * side != *f {
                    invalid!(
                        "the CNN needs square images; the dataset's samples have {f} features, \
                         not a square number"
                    );
                }
                (1, side)
            }
            _ => invalid!("the CNN needs square images; the dataset's samples are {input_shape:?}"),
        };
        if size < 4 {
            invalid!("the CNN needs images of at least 4×4 pixels");
        }
        let mut convs = Vec::new();
        let mut c_in = c;
        for (i, &c_out) in channels.iter().enumerate() {
            let (k, pad) = if i == 0 {
                if size >= 28 { (5, 2) } else { (3, 1) }
            } else if size >= 10 {
                (5, 0)
            } else {
                (3, 1)
            };
            convs.push(Conv::new(
                params,
                rng,
                &format!("conv{i}"),
                c_in,
                c_out as usize,
                k,
                pad,
            )?);
            size = (size + 2 * pad + 1 - k) / 2;
            c_in = c_out as usize;
            if size == 0 {
                invalid!("too many convolutions for {input_shape:?} images");
            }
        }
        let mut sizes = vec![c_in * size * size];
        sizes.extend(hidden.iter().map(|&h| h as usize));
        sizes.push(classes);
        let fcs = sizes
            .windows(2)
            .enumerate()
            .map(|(i, w)| Linear::new(params, rng, &format!("fc{i}"), w[0], w[1]))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            convs,
            fcs,
            dropout,
        })
    }
}

impl Model for Cnn {
    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let mut x = match input.dims().len() {
            4 => input.clone(),
            2 => {
                let (b, f) = input.dims2()?;
                let side = (f as f64).sqrt() as usize;
                input.reshape((b, 1, side, side))?
            }
            _ => input.unsqueeze(1)?,
        };
        for conv in &self.convs {
            x = conv.forward(&x)?.relu()?.max_pool2d(2)?;
        }
        let mut x = x.flatten_from(1)?;
        let last = self.fcs.len() - 1;
        for (i, fc) in self.fcs.iter().enumerate() {
            x = fc.forward(&x)?;
            if i < last {
                x = dropout(&x.relu()?, self.dropout, train, rng)?;
            }
        }
        Ok(x)
    }
}
