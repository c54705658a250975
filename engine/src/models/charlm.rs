//! The character-level transformer language model.

use super::error::invalid;
use super::layers::{Linear, dropout, normal};
use super::loss::BatchLoss;
use super::model::Model;
use crate::models::transformer::{Shape, Step};
use crate::params::Params;
use crate::rng::Rng;
use candle_core::{D, Result, Tensor, Var};

#[derive(Debug)]
struct LayerNorm {
    gamma: Var,
    beta: Var,
}

impl LayerNorm {
    fn new(params: &mut Params, name: &str, d: usize) -> Result<Self> {
        Ok(Self {
            gamma: params.add(&format!("{name}.weight"), &[d], vec![1.0; d])?,
            beta: params.add(&format!("{name}.bias"), &[d], vec![0.0; d])?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mean = x.mean_keepdim(D::Minus1)?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = centred.broadcast_div(&(var + 1e-5)?.sqrt()?)?;
        normed
            .broadcast_mul(self.gamma.as_tensor())?
            .broadcast_add(self.beta.as_tensor())
    }
}

#[derive(Debug)]
struct Block {
    ln1: LayerNorm,
    qkv: Linear,
    proj: Linear,
    ln2: LayerNorm,
    fc: Linear,
    out: Linear,
}

/// A GPT-style character model: token and position embeddings, pre-norm blocks of causal
/// self-attention and a 4× MLP, a final norm and a linear head. On the host its training step is
/// written by hand (`transformer.rs`); elsewhere (a GPU) it goes through candle's autograd.
#[derive(Debug)]
pub struct CharLm {
    wte: Var,
    wpe: Var,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    head: Linear,
    heads: usize,
    d_model: usize,
    context: usize,
    dropout: f64,
    /// Index in `Params` of `wte`; the other parameters follow in the order `new` registers them.
    first_param: usize,
    vocab: usize,
    step: Step,
}

impl CharLm {
    #[expect(
        clippy::too_many_arguments,
        reason = "one argument per size field of the spec"
    )]
    pub fn new(
        params: &mut Params,
        rng: &mut Rng,
        vocab: usize,
        layers: usize,
        heads: usize,
        d_model: usize,
        context: usize,
        dropout: f64,
    ) -> Result<Self> {
        if heads == 0 || !d_model.is_multiple_of(heads) {
            invalid!("d_model {d_model} must be a multiple of heads {heads}");
        }
        let first_param = params.len();
        let wte = params.add("wte", &[vocab, d_model], normal(rng, vocab * d_model, 0.02))?;
        let wpe = params.add(
            "wpe",
            &[context, d_model],
            normal(rng, context * d_model, 0.02),
        )?;
        let blocks = (0..layers)
            .map(|i| {
                Ok(Block {
                    ln1: LayerNorm::new(params, &format!("h{i}.ln1"), d_model)?,
                    qkv: Linear::normal(params, rng, &format!("h{i}.qkv"), d_model, 3 * d_model)?,
                    proj: Linear::normal(params, rng, &format!("h{i}.proj"), d_model, d_model)?,
                    ln2: LayerNorm::new(params, &format!("h{i}.ln2"), d_model)?,
                    fc: Linear::normal(params, rng, &format!("h{i}.fc"), d_model, 4 * d_model)?,
                    out: Linear::normal(params, rng, &format!("h{i}.out"), 4 * d_model, d_model)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(params, "ln_f", d_model)?;
        let head = Linear::normal(params, rng, "head", d_model, vocab)?;
        Ok(Self {
            wte,
            wpe,
            blocks,
            ln_f,
            head,
            heads,
            d_model,
            context,
            dropout,
            first_param,
            vocab,
            step: Step::default(),
        })
    }

    /// The sizes the hand-written step and pipeline stages work with.
    fn shape(&self) -> Shape {
        Shape {
            first_param: self.first_param,
            layers: self.blocks.len(),
            heads: self.heads,
            d: self.d_model,
            context: self.context,
            vocab: self.vocab,
            dropout: self.dropout,
        }
    }

    fn attention(&self, block: &Block, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, d) = x.dims3()?;
        let hd = d / self.heads;
        let qkv = block.qkv.forward(x)?.reshape((b, t, 3, self.heads, hd))?;
        let q = qkv
            .narrow(2, 0, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?;
        let k = qkv
            .narrow(2, 1, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?;
        let v = qkv
            .narrow(2, 2, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()?;
        let scores = (q.matmul(&k.t()?.contiguous()?)? * (1.0 / (hd as f64).sqrt()))?;
        let weights = candle_nn::ops::softmax(&scores.broadcast_add(mask)?, D::Minus1)?;
        let y = weights
            .matmul(&v)?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b, t, d))?;
        block.proj.forward(&y)
    }
}

impl Model for CharLm {
    fn token_gradients(
        &mut self,
        params: &Params,
        tokens: &[u32],
        targets: &[u32],
        rng: &mut Rng,
        grads: &mut Vec<Vec<f32>>,
    ) -> Option<Result<BatchLoss>> {
        let shape = self.shape();
        Some(self.step.run(&shape, params, tokens, targets, rng, grads))
    }

    fn transformer(&self) -> Option<Shape> {
        Some(self.shape())
    }

    fn forward(&self, input: &Tensor, train: bool, rng: &mut Rng) -> Result<Tensor> {
        let (b, t) = input.dims2()?;
        if t > self.context {
            invalid!(
                "sequence of {t} tokens exceeds the context of {}",
                self.context
            );
        }
        let tokens = self
            .wte
            .as_tensor()
            .embedding(&input.flatten_all()?)?
            .reshape((b, t, self.d_model))?;
        let positions = self.wpe.as_tensor().narrow(0, 0, t)?;
        let mut x = dropout(&tokens.broadcast_add(&positions)?, self.dropout, train, rng)?;
        let mask: Vec<f32> = (0..t * t)
            .map(|i| if i % t > i / t { -1e9 } else { 0.0 })
            .collect();
        let mask = Tensor::from_vec(mask, (t, t), input.device())?;
        for block in &self.blocks {
            let attended = self.attention(block, &block.ln1.forward(&x)?, &mask)?;
            x = (x + dropout(&attended, self.dropout, train, rng)?)?;
            let hidden = block.fc.forward(&block.ln2.forward(&x)?)?.gelu()?;
            x = (x + dropout(&block.out.forward(&hidden)?, self.dropout, train, rng)?)?;
        }
        let logits = self.head.forward(&self.ln_f.forward(&x)?)?;
        logits.reshape((b * t, ()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::referee::assert_step_matches_autograd;
    use candle_core::Device;

    const VOCAB: usize = 11;
    const CONTEXT: usize = 6;

    /// A model whose every parameter is drawn large enough (±0.6; norms' scales around 1) that
    /// attention is far from uniform and a wrong gradient anywhere shows.
    fn model(heads: usize, dropout: f64) -> (CharLm, Params) {
        let mut params = Params::new(&Device::Cpu);
        let lm = CharLm::new(
            &mut params,
            &mut Rng::seed(3),
            VOCAB,
            2,
            heads,
            8,
            CONTEXT,
            dropout,
        )
        .expect("model");
        let mut rng = Rng::seed(4);
        for (name, values) in params.names.iter().zip(&mut params.values) {
            let centre = if name.contains("ln") && name.ends_with("weight") {
                1.0
            } else {
                0.0
            };
            for v in values.iter_mut() {
                *v = centre + rng.uniform_in(-0.6, 0.6);
            }
        }
        params.sync().expect("sync");
        (lm, params)
    }

    fn manual_and_autograd_agree(heads: usize, dropout: f64) {
        let (mut lm, params) = model(heads, dropout);
        let tokens: Vec<u32> = (0..3 * CONTEXT).map(|i| (i * 7 % VOCAB) as u32).collect();
        let targets: Vec<u32> = (0..3 * CONTEXT)
            .map(|i| ((i * 5 + 1) % VOCAB) as u32)
            .collect();
        let input = Tensor::from_slice(&tokens, (3, CONTEXT), &Device::Cpu).expect("input");
        assert_step_matches_autograd(&mut lm, &params, &input, &targets, |m, rng, grads| {
            m.token_gradients(&params, &tokens, &targets, rng, grads)
        });
    }

    #[test]
    fn the_hand_written_transformer_backward_matches_autograd() {
        manual_and_autograd_agree(2, 0.0);
        manual_and_autograd_agree(1, 0.0);
    }

    #[test]
    fn with_dropout_the_hand_written_transformer_draws_the_same_masks_as_autograd() {
        manual_and_autograd_agree(2, 0.25);
    }

    #[test]
    fn a_batch_of_partial_sequences_or_an_unknown_token_is_refused() {
        let (mut lm, params) = model(2, 0.0);
        let mut grads = Vec::new();
        let mut rng = Rng::seed(0);
        let mut step = |tokens: &[u32], targets: &[u32]| {
            lm.token_gradients(&params, tokens, targets, &mut rng, &mut grads)
                .expect("a hand-written step")
                .expect_err("refused")
                .to_string()
        };
        let partial = step(&[0; CONTEXT + 1], &[0; CONTEXT + 1]);
        assert!(partial.contains("whole sequences of 6 tokens"), "{partial}");
        let short = step(&[0; CONTEXT], &[0; CONTEXT - 1]);
        assert!(short.contains("6 tokens and 5 targets"), "{short}");
        let mut bad = [1; CONTEXT];
        bad[3] = VOCAB as u32;
        let unknown = step(&bad, &[0; CONTEXT]);
        assert!(
            unknown.contains("token 11 is out of range for a vocabulary of 11"),
            "{unknown}"
        );
    }
}
