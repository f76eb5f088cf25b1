//! The `gatehouse` command. Exit codes: 0 ok, 1 refused or failed (with a
//! one-line reason on stderr), 2 usage.
//!
//! The command is the host library's CLI; this binary only hands it the
//! guided tour (`gatehouse demo`), which the library does not contain.

fn main() -> std::process::ExitCode {
    gatehouse::cli::main(gatehouse_demo::tour)
}
