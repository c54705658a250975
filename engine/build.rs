//! With the `cuda` feature, compiles the engine's own GPU kernels (kernels/*.cu) to PTX with nvcc
//! (`scripts/cuda-toolkit` installs one); without it, does nothing, so the default build needs no
//! CUDA toolkit.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=kernels");
    println!("cargo::rerun-if-env-changed=NVCC");
    println!("cargo::rerun-if-env-changed=CUDA_ROOT");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let nvcc = std::env::var_os("NVCC")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CUDA_ROOT").map(|root| PathBuf::from(root).join("bin/nvcc")))
        .unwrap_or_else(|| PathBuf::from("nvcc"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // PTX for the oldest architecture CUDA 13 supports: the driver compiles it for the GPU at hand
    // when the module loads.
    let ptx = out.join("optim.ptx");
    let status = Command::new(&nvcc)
        .args(["--ptx", "-arch=compute_75", "-O3", "-o"])
        .arg(&ptx)
        .arg("kernels/optim.cu")
        .status()
        .unwrap_or_else(|err| {
            panic!(
                "cannot run {} to build the engine's CUDA kernels ({err}); \
                 `eval \"$(scripts/cuda-toolkit)\"` installs one",
                nvcc.display()
            )
        });
    assert!(status.success(), "nvcc failed on kernels/optim.cu");
}
