//! The `gatehouse` command. Exit codes: 0 ok, 1 refused or failed (with a
//! one-line reason on stderr), 2 usage.

fn main() -> std::process::ExitCode {
    gatehouse::cli::main()
}
