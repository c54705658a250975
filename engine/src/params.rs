//! A model's parameters: named tensors in a fixed order whose values live in flat `f32` buffers (what
//! the optimizers, checkpoints and, later, parameter servers work on), mirrored into candle `Var`s for
//! the forward and backward passes.

use candle_core::{Device, Tensor, Var, backprop::GradStore};

#[derive(Debug)]
pub struct Params {
    pub names: Vec<String>,
    pub shapes: Vec<Vec<usize>>,
    /// The values, one flat buffer per tensor; the source of truth.
    pub values: Vec<Vec<f32>>,
    vars: Vec<Var>,
    device: Device,
    /// The buffers changed since the `Var`s were last synced.
    stale: bool,
}

impl Params {
    pub fn new(device: &Device) -> Self {
        Self {
            names: Vec::new(),
            shapes: Vec::new(),
            values: Vec::new(),
            vars: Vec::new(),
            device: device.clone(),
            stale: false,
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Registers a parameter with its initial values; returns the `Var` a model computes with.
    pub fn add(
        &mut self,
        name: &str,
        shape: &[usize],
        values: Vec<f32>,
    ) -> candle_core::Result<Var> {
        debug_assert_eq!(values.len(), shape.iter().product::<usize>(), "{name}");
        let var = Var::from_tensor(&Tensor::from_slice(&values, shape, &self.device)?)?;
        self.names.push(name.to_owned());
        self.shapes.push(shape.to_vec());
        self.values.push(values);
        self.vars.push(var.clone());
        Ok(var)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Total number of scalars.
    pub fn num_values(&self) -> usize {
        self.values.iter().map(Vec::len).sum()
    }

    /// Copies the buffers into the `Var`s (after an optimizer step or a restore).
    pub fn sync(&mut self) -> candle_core::Result<()> {
        for ((var, values), shape) in self.vars.iter().zip(&self.values).zip(&self.shapes) {
            var.set(&Tensor::from_slice(values, shape.as_slice(), &self.device)?)?;
        }
        self.stale = false;
        Ok(())
    }

    /// The buffers changed: the `Var`s are synced before they are next used.
    pub fn mark_stale(&mut self) {
        self.stale = true;
    }

    pub fn sync_if_stale(&mut self) -> candle_core::Result<()> {
        if self.stale { self.sync() } else { Ok(()) }
    }

    /// The gradient of every parameter as a flat buffer (zeros for a parameter the loss does not reach).
    pub fn gradients(&self, grads: &GradStore) -> candle_core::Result<Vec<Vec<f32>>> {
        self.vars
            .iter()
            .zip(&self.values)
            .map(|(var, values)| match grads.get(var.as_tensor()) {
                Some(grad) => grad.flatten_all()?.to_vec1::<f32>(),
                None => Ok(vec![0.0; values.len()]),
            })
            .collect()
    }

    /// The `Var`s the model computes with, in parameter order.
    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}
