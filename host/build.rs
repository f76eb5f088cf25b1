//! Builds the guest components (gadgets/*, gatekeepers/*) for wasm32-wasip2
//! so that the bundled examples can be embedded and tests can install them:
//! a newcomer never builds a guest by hand.
//!
//! The nested cargo uses its own target directory (sharing the outer one
//! would deadlock on its build lock) and none of the outer build's compiler
//! settings, which are for the host, not for WebAssembly.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let root = manifest
        .parent()
        .expect("host/ sits in the workspace")
        .to_owned();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("guests");
    for dir in ["wit", "sdk", "gadgets", "gatekeepers", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-env-changed=GATEHOUSE_SKIP_GUESTS");
    println!("cargo:rerun-if-env-changed=GATEHOUSE_PREBUILT_GUESTS");
    // Guests already built (by a normal build of this repository): a
    // toolchain without the wasm32-wasip2 target, such as the nightly one
    // the fuzz targets need, can still build the host.
    if let Some(dir) = std::env::var_os("GATEHOUSE_PREBUILT_GUESTS") {
        let dir = PathBuf::from(dir);
        for group in ["gadgets", "gatekeepers"] {
            for p in crate_names(&root.join(group)) {
                let wasm = dir.join(format!("{}.wasm", p.replace('-', "_")));
                if !wasm.exists() {
                    panic!(
                        "GATEHOUSE_PREBUILT_GUESTS={} lacks {}; build the repository once normally first",
                        dir.display(),
                        wasm.display()
                    );
                }
            }
        }
        println!("cargo:rustc-env=GATEHOUSE_GUESTS_DIR={}", dir.display());
        return;
    }
    let out = target.join("wasm32-wasip2").join("release");
    println!("cargo:rustc-env=GATEHOUSE_GUESTS_DIR={}", out.display());

    let mut packages = Vec::new();
    for group in ["gadgets", "gatekeepers"] {
        packages.extend(crate_names(&root.join(group)));
    }
    packages.sort();
    if packages.is_empty() {
        panic!("no guest crates found under gadgets/ and gatekeepers/");
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            // Guests are built small and without DWARF: a component
            // with its debug sections was about 3 MB where it is about
            // 150 KB without them, and every install copies, hashes and
            // compiles the whole file. Building them so took 55 s where
            // the workspace's release profile took 74 s (the 18 Rust
            // guests alone, cold, on the 2-core CI machine); a guest's
            // speed is Cranelift's work either way.
            "--config",
            "profile.release.debug=false",
            "--config",
            "profile.release.opt-level=\"s\"",
            "--target-dir",
        ])
        .arg(&target);
    for p in &packages {
        cmd.args(["-p", p]);
    }
    for var in [
        "CARGO_TARGET_DIR",
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_BUILD_TARGET",
    ] {
        cmd.env_remove(var);
    }
    let output = cmd
        .output()
        .expect("cannot run cargo to build the guest components");
    if !output.status.success() {
        panic!(
            "building the guest components failed (is the wasm32-wasip2 target installed? `rustup toolchain install` in the repo installs it):\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    for p in &packages {
        let wasm = out.join(format!("{}.wasm", p.replace('-', "_")));
        if !wasm.exists() {
            panic!("guest {p} built but {} is missing", wasm.display());
        }
    }
}

/// The package names of the Rust guests directly under `dir`. A directory
/// without a Cargo.toml is a guest in another language (`gadgets/triage-py`,
/// `gadgets/triage-js`): its own toolchain builds it (tests/src/langs.rs),
/// so it is skipped here, as the workspace's `exclude` skips it for cargo.
fn crate_names(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for e in entries.flatten() {
        let toml = e.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&toml) else {
            continue;
        };
        if let Some(name) = text
            .lines()
            .skip_while(|l| l.trim() != "[package]")
            .find_map(|l| {
                l.trim().strip_prefix("name").map(|r| {
                    r.trim_start_matches([' ', '='])
                        .trim()
                        .trim_matches('"')
                        .to_owned()
                })
            })
        {
            names.push(name);
        }
    }
    names
}
