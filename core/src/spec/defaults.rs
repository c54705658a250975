//! Defaults of the `DroverJob` fields a user may leave out.

pub fn max_restarts() -> u32 {
    5
}
pub fn eval_every() -> u64 {
    200
}
pub fn seed() -> u64 {
    1
}
pub fn mlp_hidden() -> Vec<u32> {
    vec![256, 128]
}
pub fn cnn_channels() -> Vec<u32> {
    vec![6, 16]
}
pub fn cnn_hidden() -> Vec<u32> {
    vec![120, 84]
}
pub fn charlm_layers() -> u32 {
    2
}
pub fn charlm_heads() -> u32 {
    4
}
pub fn charlm_d_model() -> u32 {
    128
}
pub fn charlm_context() -> u32 {
    64
}
pub fn synthetic_samples() -> u64 {
    10_000
}
pub fn synthetic_features() -> u32 {
    64
}
pub fn synthetic_classes() -> u32 {
    10
}
pub fn adamw_lr() -> f64 {
    0.001
}
pub fn adamw_weight_decay() -> f64 {
    0.01
}
pub fn beta1() -> f64 {
    0.9
}
pub fn beta2() -> f64 {
    0.999
}
pub fn eps() -> f64 {
    1e-8
}
pub fn workdir() -> String {
    ".".to_owned()
}
pub fn gpus_per_worker() -> u32 {
    1
}
pub fn cpus_per_worker() -> u32 {
    4
}
pub fn cpus_per_ps() -> u32 {
    2
}
pub fn memory_gb_per_task() -> u32 {
    8
}
/// SSP's staleness bound when none is given.
pub const DEFAULT_STALENESS: u32 = 4;

pub fn staleness() -> u32 {
    DEFAULT_STALENESS
}
pub fn yes() -> bool {
    true
}
pub fn checkpoint_every_steps() -> u64 {
    500
}
pub fn keep_last() -> u32 {
    3
}
pub fn keep_best() -> u32 {
    1
}
pub fn tensor() -> u32 {
    1
}
/// serde's `skip_serializing_if` passes a reference.
pub fn is_one(n: &u32) -> bool {
    *n == 1
}
