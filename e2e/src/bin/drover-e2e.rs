//! The `drover` program, built inside this package so that its tests and benchmarks get its path from
//! Cargo (a package's tests see only its own binaries): the same `main` as the `drover` binary.

fn main() -> std::process::ExitCode {
    drover::main()
}
