//! The character-level transformer language model.

use super::*;

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
/// self-attention and a 4× MLP, a final norm and a linear head.
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
        })
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
