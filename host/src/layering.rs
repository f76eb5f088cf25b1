//! The layering the code map promises (docs/architecture.md), checked on
//! the sources: no module imports its way back into itself, and no async
//! path waits on the store in place. Both are readings of the text by the
//! scripts in `tools/`, which a reader can run alone; this test runs them
//! so that a change breaking either fails the build's tests, not a later
//! review. Test-only: nothing here is part of the host.

use std::path::PathBuf;
use std::process::Command;

/// Run `tools/{script}` with python3 over this crate's sources; its
/// output when it fails.
fn check(script: &str) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tool = root.join("..").join("tools").join(script);
    let out = Command::new("python3")
        .arg(&tool)
        .arg(root.join("src"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}", tool.display()));
    assert!(
        out.status.success(),
        "{script} found a break in the layering:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Modules form no circle of imports, at the top level nor inside a
/// folder module (`store/`, `store/sqlite/`, `web/`, ...).
#[test]
fn no_module_imports_its_way_back_into_itself() {
    check("module_graph.py");
}

/// An async path reaches a synchronous store method only on a thread
/// that may block (`Store::run`, `Kernel::blocking`) or through the
/// engine's async verbs.
#[test]
fn no_async_path_waits_on_the_store_in_place() {
    check("blocking_calls.py");
}
