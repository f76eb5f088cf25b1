//! The `gatehouse` CLI, built inside the test crate so that tests can run it
//! as separate processes (`CARGO_BIN_EXE_gatehouse`): the same two parts as
//! the real binary (demo/src/main.rs), the library's CLI and the demo.

fn main() -> std::process::ExitCode {
    gatehouse::cli::main(gatehouse_demo::tour)
}
