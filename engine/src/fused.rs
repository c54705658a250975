//! The optimizer updates for parameters that stay on their device (a GPU): candle in-place ops with
//! the arithmetic of [`Optimizer::step`](crate::optim::Optimizer::step), and the loss and accuracy
//! sums a run keeps there.
//!
//! On CUDA a parameter's whole update (moments or momentum buffer, and the parameter) is one kernel
//! launch ([`AdamStep`], [`SgdStep`]; kernels/optim.cu). candle lends an in-place op one tensor to
//! write and the others to read, so on the host the same update is two ops, the state's then the
//! parameter's ([`AdamMoments`] + [`AdamApply`], [`SgdMomentum`] + [`SgdApply`]): the same loops,
//! which tests check against the host optimizer; tests on a GPU check the kernels against them.
//!
//! One of the engine's `unsafe` exceptions (with linalg.rs and device.rs; the workspace's Cargo.toml
//! lists them): launching a CUDA kernel is an `unsafe` call in cudarc; every launch passes buffers
//! whose lengths were checked against `n` here.

#[cfg(feature = "cuda")]
use candle_core::cuda::cudarc::driver::PushKernelArg;
use candle_core::{CpuStorage, InplaceOp2, InplaceOp3, Layout, Result};

/// AdamW's first and second moments, in one tensor `mv` (`m` then `v`), updated from the gradient.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamMoments {
    pub beta1: f32,
    pub beta2: f32,
}

/// AdamW's parameter update from the moments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamApply {
    /// `1 − lr·weight_decay`.
    pub decay: f32,
    /// `lr / (1 − β1^t)`.
    pub step_size: f32,
    /// `√(1 − β2^t)`.
    pub sqrt_c2: f32,
    pub eps: f32,
}

/// SGD's momentum buffer from the gradient and the parameter (weight decay).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SgdMomentum {
    pub first: bool,
    pub momentum: f32,
    pub weight_decay: f32,
}

/// How SGD's update is formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SgdMode {
    /// No momentum: the decayed gradient.
    Plain = 0,
    Momentum = 1,
    Nesterov = 2,
}

/// SGD's parameter update from the gradient and the momentum buffer (not read in `Plain` mode).
#[derive(Debug, Clone, Copy)]
pub(crate) struct SgdApply {
    pub mode: SgdMode,
    pub lr: f32,
    pub momentum: f32,
    pub weight_decay: f32,
}

fn contiguous(layout: &Layout, what: &str) -> Result<(usize, usize)> {
    layout.contiguous_offsets().ok_or_else(|| {
        candle_core::Error::Msg(format!("the optimizer needs a contiguous {what} tensor"))
    })
}

fn cpu<'a>(storage: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let (start, end) = contiguous(layout, what)?;
    match storage {
        CpuStorage::F32(values) => Ok(&values[start..end]),
        _ => Err(candle_core::Error::Msg(format!("{what} is not f32"))),
    }
}

fn cpu_mut<'a>(storage: &'a mut CpuStorage, layout: &Layout, what: &str) -> Result<&'a mut [f32]> {
    let (start, end) = contiguous(layout, what)?;
    match storage {
        CpuStorage::F32(values) => Ok(&mut values[start..end]),
        _ => Err(candle_core::Error::Msg(format!("{what} is not f32"))),
    }
}

fn same_len(a: usize, b: usize, what: &str) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(candle_core::Error::Msg(format!(
            "{what}: {a} values where {b} were expected"
        )))
    }
}

impl InplaceOp2 for AdamMoments {
    fn name(&self) -> &'static str {
        "adamw-moments"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let g = cpu(s2, l2, "gradient")?;
        let mv = cpu_mut(s1, l1, "moments")?;
        same_len(mv.len(), 2 * g.len(), "AdamW moments")?;
        let (m, v) = mv.split_at_mut(g.len());
        let (b1, b2) = (self.beta1, self.beta2);
        for ((m, v), &g) in m.iter_mut().zip(v.iter_mut()).zip(g) {
            *m = b1 * *m + (1.0 - b1) * g;
            *v = b2 * *v + (1.0 - b2) * g * g;
        }
        Ok(())
    }
}

impl InplaceOp2 for AdamApply {
    fn name(&self) -> &'static str {
        "adamw-apply"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let mv = cpu(s2, l2, "moments")?;
        let p = cpu_mut(s1, l1, "parameter")?;
        same_len(mv.len(), 2 * p.len(), "AdamW moments")?;
        let (m, v) = mv.split_at(p.len());
        let &AdamApply {
            decay,
            step_size,
            sqrt_c2,
            eps,
        } = self;
        for ((p, &m), &v) in p.iter_mut().zip(m).zip(v) {
            *p *= decay;
            *p -= step_size * m / (v.sqrt() / sqrt_c2 + eps);
        }
        Ok(())
    }
}

impl InplaceOp3 for SgdMomentum {
    fn name(&self) -> &'static str {
        "sgd-momentum"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let g = cpu(s2, l2, "gradient")?;
        let p = cpu(s3, l3, "parameter")?;
        let buf = cpu_mut(s1, l1, "momentum")?;
        same_len(buf.len(), g.len(), "SGD momentum")?;
        same_len(p.len(), g.len(), "parameter")?;
        let (first, momentum, wd) = (self.first, self.momentum, self.weight_decay);
        for ((b, &g), &p) in buf.iter_mut().zip(g).zip(p) {
            let d = g + wd * p;
            *b = if first { d } else { momentum * *b + d };
        }
        Ok(())
    }
}

impl InplaceOp3 for SgdApply {
    fn name(&self) -> &'static str {
        "sgd-apply"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let g = cpu(s2, l2, "gradient")?;
        let buf = cpu(s3, l3, "momentum")?;
        let p = cpu_mut(s1, l1, "parameter")?;
        same_len(g.len(), p.len(), "gradient")?;
        if self.mode != SgdMode::Plain {
            same_len(buf.len(), p.len(), "SGD momentum")?;
        }
        let &SgdApply {
            mode,
            lr,
            momentum,
            weight_decay: wd,
        } = self;
        for (i, (p, &g)) in p.iter_mut().zip(g).enumerate() {
            let d = g + wd * *p;
            let update = match mode {
                SgdMode::Plain => d,
                SgdMode::Momentum => buf[i],
                SgdMode::Nesterov => d + momentum * buf[i],
            };
            *p -= lr * update;
        }
        Ok(())
    }
}

/// AdamW's whole update of one parameter in one launch on CUDA: the parameter written, the moments
/// `mv` (read-lent by candle) written by the kernel too. The host runs [`AdamMoments`] and
/// [`AdamApply`] instead.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(feature = "cuda"),
    expect(dead_code, reason = "the CUDA launch reads the fields")
)]
pub(crate) struct AdamStep {
    pub moments: AdamMoments,
    pub apply: AdamApply,
}

/// SGD's whole update of one parameter in one launch on CUDA (the momentum buffer written by the
/// kernel too); the host runs [`SgdMomentum`] and [`SgdApply`] instead.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(feature = "cuda"),
    expect(dead_code, reason = "the CUDA launch reads the fields")
)]
pub(crate) struct SgdStep {
    pub momentum: SgdMomentum,
    pub apply: SgdApply,
}

fn host_only(op: &str) -> Result<()> {
    Err(candle_core::Error::Msg(format!(
        "{op} runs on CUDA; on the host the update is two ops"
    )))
}

impl InplaceOp3 for AdamStep {
    fn name(&self) -> &'static str {
        "adamw-step"
    }

    fn cpu_fwd(
        &self,
        _: &mut CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        host_only(self.name())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &mut candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<()> {
        let (p_start, p_end) = contiguous(l1, "parameter")?;
        let (g_start, g_end) = contiguous(l2, "gradient")?;
        let (mv_start, mv_end) = contiguous(l3, "moments")?;
        let n = p_end - p_start;
        same_len(g_end - g_start, n, "gradient")?;
        same_len(mv_end - mv_start, 2 * n, "AdamW moments")?;
        let function = s1
            .device
            .get_or_load_custom_func("adamw_step", gpu::MODULE, gpu::PTX)?;
        let g = s2.as_cuda_slice::<f32>()?.slice(g_start..g_end);
        // The kernel writes the moments too: the run holds the only handle to them, and nothing
        // else reads them while the update runs in its stream.
        let mv = s3.as_cuda_slice::<f32>()?.slice(mv_start..mv_end);
        let mut p = s1.as_cuda_slice_mut::<f32>()?.slice_mut(p_start..p_end);
        let (m, a) = (self.moments, self.apply);
        let mut launch = function.builder();
        gpu::args!(
            launch,
            n,
            m.beta1,
            m.beta2,
            a.decay,
            a.step_size,
            a.sqrt_c2,
            a.eps
        );
        launch.arg(&mut p).arg(&mv).arg(&g);
        gpu::launch(launch, n)
    }
}

impl InplaceOp3 for SgdStep {
    fn name(&self) -> &'static str {
        "sgd-step"
    }

    fn cpu_fwd(
        &self,
        _: &mut CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<()> {
        host_only(self.name())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &mut candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<()> {
        let (p_start, p_end) = contiguous(l1, "parameter")?;
        let (g_start, g_end) = contiguous(l2, "gradient")?;
        let (b_start, b_end) = contiguous(l3, "momentum")?;
        let n = p_end - p_start;
        same_len(g_end - g_start, n, "gradient")?;
        if self.apply.mode != SgdMode::Plain {
            same_len(b_end - b_start, n, "SGD momentum")?;
        }
        let function = s1
            .device
            .get_or_load_custom_func("sgd_step", gpu::MODULE, gpu::PTX)?;
        let g = s2.as_cuda_slice::<f32>()?.slice(g_start..g_end);
        // The kernel writes the momentum buffer too, as AdamStep writes the moments.
        let buf = s3.as_cuda_slice::<f32>()?.slice(b_start..b_end);
        let mut p = s1.as_cuda_slice_mut::<f32>()?.slice_mut(p_start..p_end);
        let first = i32::from(self.momentum.first);
        let mode = self.apply.mode as i32;
        let a = self.apply;
        let mut launch = function.builder();
        gpu::args!(launch, n, first, mode, a.lr, a.momentum, a.weight_decay);
        launch.arg(&mut p).arg(&buf).arg(&g);
        gpu::launch(launch, n)
    }
}

/// Adds a batch's correct predictions to a running count (`[1]`, f32): the rows of the logits
/// (`[rows, classes]`) whose largest value, the first on ties, is at the row's target (`[rows]`, u32).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddCorrect;

impl InplaceOp3 for AddCorrect {
    fn name(&self) -> &'static str {
        "add-correct"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<()> {
        let (classes, logits) = (
            l2.dims().last().copied().unwrap_or(1).max(1),
            cpu(s2, l2, "logits")?,
        );
        let (start, end) = contiguous(l3, "targets")?;
        let CpuStorage::U32(targets) = s3 else {
            return Err(candle_core::Error::Msg("targets are not u32".into()));
        };
        let targets = &targets[start..end];
        same_len(logits.len(), targets.len() * classes, "logits")?;
        let total = cpu_mut(s1, l1, "correct")?;
        let correct = logits
            .chunks(classes)
            .zip(targets)
            .filter(|(z, t)| argmax(z) == **t as usize)
            .count();
        total[0] += correct as f32;
        Ok(())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &mut candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<()> {
        let (t_start, t_end) = contiguous(l1, "correct")?;
        let (z_start, z_end) = contiguous(l2, "logits")?;
        let (y_start, y_end) = contiguous(l3, "targets")?;
        let rows = y_end - y_start;
        let classes = l2.dims().last().copied().unwrap_or(1).max(1);
        same_len(z_end - z_start, rows * classes, "logits")?;
        same_len(t_end - t_start, 1, "correct")?;
        let function = s1
            .device
            .get_or_load_custom_func("add_correct", gpu::MODULE, gpu::PTX)?;
        let logits = s2.as_cuda_slice::<f32>()?.slice(z_start..z_end);
        let targets = s3.as_cuda_slice::<u32>()?.slice(y_start..y_end);
        let mut total = s1.as_cuda_slice_mut::<f32>()?.slice_mut(t_start..t_end);
        let mut launch = function.builder();
        gpu::args!(launch, rows, classes);
        launch.arg(&mut total).arg(&logits).arg(&targets);
        gpu::launch(launch, rows)
    }
}

/// The index of the largest value, the first on ties (as the kernel picks it).
fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate().skip(1) {
        if v > values[best] {
            best = i;
        }
    }
    best
}

#[cfg(feature = "cuda")]
mod gpu {
    use candle_core::Result;
    use candle_core::cuda::WrapErr;
    use candle_core::cuda::cudarc::driver::{LaunchArgs, LaunchConfig};

    /// The kernels of kernels/optim.cu, compiled by build.rs, loaded once per device as this module.
    pub(super) const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/optim.ptx"));
    pub(super) const MODULE: &str = "drover_optim";

    /// Pushes scalar arguments, each kept alive until the launch.
    macro_rules! args {
        ($launch:ident, $($arg:expr),*) => {
            $(
                let value = $arg;
                $launch.arg(&value);
            )*
        };
    }
    pub(super) use args;

    /// Launches over `n` elements (a grid-stride loop covers any `n`).
    pub(super) fn launch(mut launch: LaunchArgs<'_>, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let blocks = n.div_ceil(256).min(65_535) as u32;
        let config = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        #[expect(
            unsafe_code,
            reason = "a kernel launch; the buffers passed hold n values each, checked by the caller"
        )]
        // SAFETY: every buffer argument was sliced to the lengths the kernel reads and writes, and
        // the scalars match the kernel's signature in kernels/optim.cu.
        unsafe { launch.launch(config) }.w()?;
        Ok(())
    }
}

/// The CUDA kernels against the host ops on the same inputs; skipped where no GPU can be opened.
#[cfg(all(test, feature = "cuda"))]
#[expect(clippy::unwrap_used, reason = "a test that cannot set up should panic")]
mod gpu_tests;
