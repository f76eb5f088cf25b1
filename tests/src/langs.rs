//! Gadgets written in Python and JavaScript, built on demand for tests.
//!
//! They are not crates, so the host's build script does not build them.
//! Their toolchains (componentize-py, componentize-js) are pinned in
//! `tools/langs/` and installed by `tools/langs/setup.sh` (which `.ci/run`
//! runs) into [`tools_dir`]. Building one takes seconds and yields a
//! 10-20 MB component, so each output is cached under
//! `<target>/lang-guests/`, keyed by a hash of its sources, the WIT, the
//! pinned tool versions and the build command: an unchanged gadget is never
//! rebuilt, a changed one always is.

use sha2::{Digest as _, Sha256};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A gadget's language, and so its toolchain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Python,
    Js,
}

impl Lang {
    /// The language of a directory under `gadgets/` by its suffix.
    pub fn of(name: &str) -> Option<Lang> {
        if name.ends_with("-py") {
            Some(Lang::Python)
        } else if name.ends_with("-js") {
            Some(Lang::Js)
        } else {
            None
        }
    }

    /// The entry module every gadget of this language has.
    pub fn entry(self) -> &'static str {
        match self {
            Lang::Python => "app.py",
            Lang::Js => "app.js",
        }
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_owned()
}

/// Cargo's target directory, found from the running test or bench
/// executable (`<target>/<profile>/deps/<exe>`), so it follows
/// `CARGO_TARGET_DIR` without being told.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    exe.ancestors()
        .nth(3)
        .expect("test executables live in <target>/<profile>/deps")
        .to_owned()
}

/// Where `tools/langs/setup.sh` installed the toolchains:
/// `$GATEHOUSE_TOOLS_DIR`, else `<target>/tools`.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("GATEHOUSE_TOOLS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join("tools"))
}

/// The toolchain's `bin` directory for `lang` (componentize-py in the venv,
/// componentize-js in node_modules), checked to exist.
pub fn tool_bin(lang: Lang) -> Result<PathBuf, String> {
    let (bin, tool) = match lang {
        Lang::Python => (tools_dir().join("py/bin"), "componentize-py"),
        Lang::Js => (tools_dir().join("js/node_modules/.bin"), "componentize-js"),
    };
    if bin.join(tool).exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{tool} is not installed in {}; run `tools/langs/setup.sh` (as .ci/run does; \
             it needs python3 and npm) with the same CARGO_TARGET_DIR",
            bin.display()
        ))
    }
}

/// A `PATH` with the toolchain of `lang` first, for build scripts that call
/// `componentize-py` or `componentize-js` by name, as a starter's does.
pub fn path_with_tools(lang: Lang) -> Result<std::ffi::OsString, String> {
    let bin = tool_bin(lang)?;
    let mut dirs = vec![bin];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    std::env::join_paths(dirs).map_err(|e| format!("cannot build PATH: {e}"))
}

/// The gadgets under `gadgets/` that have a face: they export `face` beside
/// `run` and so are built for the world `gadget-with-face` (built for
/// `gadget`, the face would be left out). Every other one is built for
/// `gadget`: the world with a face requires an export it does not have.
const WITH_FACE: &[&str] = &["triage-js"];

/// The WIT world the gadget `name` is built for (see [`WITH_FACE`]).
pub fn world(name: &str) -> &'static str {
    if WITH_FACE.contains(&name) {
        "gadget-with-face"
    } else {
        "gadget"
    }
}

/// The build command for the gadget whose sources are in `src`, built for
/// `world`, writing `out`. The same commands docs/writing-a-gadget.md
/// shows an author.
pub fn build_command(
    lang: Lang,
    world: &str,
    src: &Path,
    wit: &Path,
    out: &Path,
) -> Result<Command, String> {
    let bin = tool_bin(lang)?;
    let mut cmd = match lang {
        Lang::Python => {
            let mut c = Command::new(bin.join("componentize-py"));
            c.arg("-d")
                .arg(wit)
                .args(["-w", world, "componentize", "-p"])
                .arg(src)
                .arg("app")
                .arg("-o")
                .arg(out)
                // Bytecode caches would land in the source directory.
                .env("PYTHONDONTWRITEBYTECODE", "1");
            c
        }
        Lang::Js => {
            let mut c = Command::new(bin.join("componentize-js"));
            c.arg("--wit")
                .arg(wit)
                // StarlingMonkey's HTTP client and fetch-event handler would
                // import wasi:http, which gadgets are not given: leave them
                // out (docs/security-model.md).
                .args(["-n", world, "-d", "http", "fetch-event", "-o"])
                .arg(out)
                .arg(src.join(Lang::Js.entry()));
            c
        }
    };
    cmd.env_remove("RUST_BACKTRACE");
    Ok(cmd)
}

/// All files under `dir` (sorted, relative), skipping build outputs.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name == "__pycache__" || name == "node_modules" || name.ends_with(".wasm") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(rel) = p.strip_prefix(dir) {
                out.push(rel.to_owned());
            }
        }
    }
    out.sort();
    out
}

fn hash_tree(h: &mut Sha256, dir: &Path) {
    for rel in files(dir) {
        let bytes = std::fs::read(dir.join(&rel))
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.join(&rel).display()));
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
}

/// The cache key of a build: sources, WIT, pinned tools, command (and so
/// the world).
fn build_key(lang: Lang, world: &str, src: &Path, wit: &Path) -> String {
    let mut h = Sha256::new();
    h.update(format!("{lang:?}\n").as_bytes());
    hash_tree(&mut h, src);
    h.update(b"\nwit\n");
    hash_tree(&mut h, wit);
    h.update(b"\ntools\n");
    let pins = repo_root().join("tools/langs");
    for pin in ["requirements.txt", "package-lock.json"] {
        h.update(std::fs::read(pins.join(pin)).unwrap_or_default());
    }
    let out = Path::new("OUT");
    if let Ok(cmd) = build_command(lang, world, Path::new("SRC"), Path::new("WIT"), out) {
        h.update(format!("{cmd:?}").as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

/// One build at a time in this process: two tests asking for the same
/// gadget get one build, and two builds do not fight over 2 cores.
static BUILDING: Mutex<()> = Mutex::new(());

/// Build the gadget in `src` (cached; see the module doc). `name` names the
/// output file and picks the world ([`world`]).
pub fn build_dir(lang: Lang, name: &str, src: &Path) -> Result<PathBuf, String> {
    let wit = repo_root().join("wit");
    let world = world(name);
    let key = build_key(lang, world, src, &wit);
    let cache = target_dir().join("lang-guests");
    let out = cache.join(format!("{name}-{key}.wasm"));
    let _guard = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    if out.exists() {
        return Ok(out);
    }
    std::fs::create_dir_all(&cache)
        .map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    // Another process may build the same key: write aside, then rename.
    let tmp = cache.join(format!("{name}-{key}.{}.tmp.wasm", std::process::id()));
    let output = build_command(lang, world, src, &wit, &tmp)?
        .current_dir(&cache)
        .output()
        .map_err(|e| format!("cannot run the {lang:?} toolchain: {e}"))?;
    if !output.status.success() || !tmp.exists() {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!(
            "building {} failed:\n{}{}",
            src.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    std::fs::rename(&tmp, &out).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    Ok(out)
}

/// Build `gadgets/NAME` (`triage-py`, `triage-js`, `probe-py`), cached.
/// Panics with the reason (toolchain missing, build failed): a test that
/// needs it cannot go on.
pub fn guest(name: &str) -> PathBuf {
    let lang = Lang::of(name).unwrap_or_else(|| panic!("{name}: not a -py or -js gadget"));
    let src = repo_root().join("gadgets").join(name);
    build_dir(lang, name, &src).unwrap_or_else(|e| panic!("{e}"))
}

/// Compiled forms shared by the tests of this process: component path ->
/// a directory holding `<digest>.wasm` and its `.cwasm` (+ `.sha256`),
/// as `Runtime::admit` leaves them.
static SEEDS: Mutex<Vec<(PathBuf, tempfile::TempDir)>> = Mutex::new(Vec::new());

/// Put the compiled form of the component at `path` into `home`'s cache,
/// compiling it at most once per test process. A Python or JavaScript
/// component takes seconds to compile; tests that are not about compiling
/// should not each pay for it (the tests that are, install without this).
pub fn seed_compiled(home: &Path, path: &Path) {
    let mut seeds = SEEDS.lock().unwrap_or_else(|e| e.into_inner());
    if !seeds.iter().any(|(p, _)| p == path) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let runtime = gatehouse::embed::Runtime::new(dir.path().to_owned(), crate::test_limits())
            .expect("a runtime");
        let bytes =
            std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        runtime
            .admit(&bytes, gatehouse::embed::Role::Gadget, &|_| {})
            .unwrap_or_else(|e| panic!("{} is refused: {e:#}", path.display()));
        seeds.push((path.to_owned(), dir));
    }
    let (_, seed) = seeds
        .iter()
        .find(|(p, _)| p == path)
        .expect("seeded just now");
    let components = home.join("components");
    std::fs::create_dir_all(&components)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", components.display()));
    let entries = std::fs::read_dir(seed.path()).expect("the seed directory lists");
    for e in entries.flatten() {
        let to = components.join(e.file_name());
        std::fs::copy(e.path(), &to)
            .unwrap_or_else(|err| panic!("cannot copy into {}: {err}", to.display()));
    }
}
