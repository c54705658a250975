//! The `drover` binary; the program is the library's ([`drover::main`]).

fn main() -> std::process::ExitCode {
    drover::main()
}
