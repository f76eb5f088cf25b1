//! The `gatehouse` CLI, built inside the test crate so that tests can run it
//! as separate processes (`CARGO_BIN_EXE_gatehouse`).

fn main() -> std::process::ExitCode {
    gatehouse::cli::main()
}
