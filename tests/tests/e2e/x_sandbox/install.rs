//! SPEC X3 (and C1's "names the import"), plus bad input on disk: a
//! malformed, non-component or over-reaching `.wasm` is refused at install
//! with one clear line and nothing is installed; the compiled cache is
//! reused, and rebuilt when damaged; a corrupt state database is refused and
//! left as it was.

use gatehouse::store::Trust;
use gatehouse_e2e::{TOKEN, World, cli_command, compiled_files, guest, stderr, stdout};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The stored component sources (`<home>/components/*.wasm`), sorted.
fn stored_sources(home: &Path) -> Vec<PathBuf> {
    let dir = home.join("components");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    files.sort();
    files
}

/// A bad component, the name it is offered under and what its refusal
/// must mention.
struct Bad {
    file: PathBuf,
    expect: &'static str,
}

/// Writes the bad components into `dir`.
fn bad_components(dir: &Path) -> Vec<Bad> {
    let triage = read(&guest("triage"));
    let text = dir.join("notes.wasm");
    write(&text, b"These are my notes, not a WebAssembly component.\n");
    let half = dir.join("half.wasm");
    write(&half, &triage[..triage.len() / 2]);
    let core = dir.join("core.wasm");
    write(&core, b"\0asm\x01\0\0\0");
    vec![
        Bad {
            file: text,
            expect: "not a WebAssembly file",
        },
        Bad {
            file: half,
            expect: "not a valid WebAssembly component",
        },
        Bad {
            file: core,
            expect: "core WebAssembly module, not a component",
        },
        Bad {
            file: guest("smuggler"),
            expect: "evil:backdoor",
        },
    ]
}

/// The refusal printed by the CLI: exit code 1 and exactly one line starting
/// with `error:`, the last one. Before it, stderr may hold only the
/// "compiling ..." progress note, which install prints before it knows the
/// outcome.
fn cli_refusal(o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "a refusal exits 1; stdout {:?}, stderr {err:?}",
        stdout(o)
    );
    let lines: Vec<&str> = err.lines().collect();
    let last = lines.last().copied().unwrap_or_default();
    assert!(
        last.starts_with("error: "),
        "stderr ends with one error line: {err:?}"
    );
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l.starts_with("compiling ")),
        "stderr holds nothing but the error and a progress note: {err:?}"
    );
    last.to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_components_are_refused_with_one_line_and_nothing_is_installed() {
    let w = World::new();
    w.install("script");
    let sources = stored_sources(w.home());
    let scratch = tempfile::tempdir().expect("a scratch directory");
    for bad in bad_components(scratch.path()) {
        let bytes = read(&bad.file);
        let err = w
            .kernel
            .operator()
            .install("candidate", &bytes, &|_| {})
            .map(|g| panic!("{} was installed as {g:?}", bad.file.display()))
            .unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains(bad.expect) && !msg.contains('\n'),
            "{}: expected one line mentioning {:?}, got {msg:?}",
            bad.file.display(),
            bad.expect
        );
        assert_eq!(w.gadget_names(), ["script"], "{}", bad.file.display());
        assert_eq!(
            stored_sources(w.home()),
            sources,
            "{}: no component was stored",
            bad.file.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_components_are_refused_by_the_cli_with_one_error_line() {
    let w = World::new();
    w.install("script");
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut bads = bad_components(scratch.path());
    bads.push(Bad {
        file: guest("issues"),
        expect: "gadget",
    });
    for bad in bads {
        let path = bad.file.to_string_lossy().into_owned();
        let o = w.cli(&["install", &path, "--name", "candidate"]);
        let line = cli_refusal(&o);
        assert!(line.contains(bad.expect), "{path}: {line:?}");
    }
    let listed = w.cli(&["gadgets", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let gadgets: Value = serde_json::from_str(&stdout(&listed))
        .unwrap_or_else(|e| panic!("gadgets --json ({e}): {}", stdout(&listed)));
    let names: Vec<&str> = gadgets
        .as_array()
        .map(|a| a.iter().filter_map(|g| g["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["script"], "nothing new was installed");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gatekeeper_component_is_refused_as_a_gadget() {
    let w = World::new();
    let err = w
        .kernel
        .operator()
        .install("issues", &read(&guest("issues")), &|_| {})
        .map(|g| panic!("a gatekeeper was installed as gadget {g:?}"))
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("gadget") && !msg.contains('\n'),
        "one line about gadgets: {msg:?}"
    );
    assert!(w.gadget_names().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_component_of_the_wrong_role_is_told_what_it_must_export() {
    let w = World::new();
    let as_gadget = w
        .kernel
        .operator()
        .install("issues", &read(&guest("issues")), &|_| {})
        .map(|g| panic!("a gatekeeper was installed as gadget {g:?}"))
        .unwrap_err();
    let msg = format!("{as_gadget:#}");
    assert!(
        msg.contains("must export gatehouse:os/run"),
        "a gatekeeper installed as a gadget: {msg:?}"
    );
    w.kernel
        .operator()
        .put_secret("tracker-token", TOKEN)
        .expect("secret stored");
    let hosts = vec![w.tracker.host()];
    let as_gatekeeper = w
        .front("triage", "triage", Trust::Byo, hosts, None, Vec::new())
        .await
        .expect_err("a gadget was added as a gatekeeper");
    let msg = format!("{as_gatekeeper:#}");
    assert!(
        msg.contains("must export gatehouse:os/tool"),
        "a gadget added as a gatekeeper: {msg:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gadget_component_is_refused_as_a_gatekeeper() {
    let w = World::new();
    let triage = guest("triage");
    let hosts = vec![w.tracker.host()];
    let err = w
        .front("triage", "triage", Trust::Byo, hosts, None, Vec::new())
        .await
        .expect_err("a gadget was added as a gatekeeper");
    let msg = format!("{err:#}");
    assert!(
        msg.contains("gatekeeper") && !msg.contains('\n'),
        "one line about gatekeepers: {msg:?}"
    );
    assert!(
        w.gatekeeper_names().is_empty(),
        "{:?}",
        w.gatekeeper_names()
    );

    // The CLI says the same in one line, and adds nothing.
    let host = w.tracker.host();
    let o = w.cli(&[
        "gatekeeper",
        "add",
        &triage.to_string_lossy(),
        "--name",
        "triage",
        "--allow-host",
        &host,
    ]);
    let line = cli_refusal(&o);
    assert!(line.contains("gatekeeper"), "{line:?}");
    assert!(
        w.gatekeeper_names().is_empty(),
        "{:?}",
        w.gatekeeper_names()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gatekeeper_naming_a_missing_secret_is_refused_with_how_to_set_it() {
    let w = World::new();
    let issues = guest("issues");
    let err = w
        .kernel
        .operator()
        .add_gatekeeper(
            "issues",
            &read(&issues),
            Trust::Byo,
            vec![w.tracker.host()],
            Some("tracker-tokn".into()),
            Vec::new(),
            &|_| {},
        )
        .await
        .map(|g| panic!("added without its secret: {g:?}"))
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("\"tracker-tokn\"") && msg.contains("gatehouse secret set tracker-tokn"),
        "the refusal should name the secret and how to set it: {msg:?}"
    );
    assert!(w.gatekeeper_names().is_empty());

    let host = w.tracker.host();
    let o = w.cli(&[
        "gatekeeper",
        "add",
        &issues.to_string_lossy(),
        "--name",
        "issues",
        "--allow-host",
        &host,
        "--secret",
        "tracker-tokn",
    ]);
    let line = cli_refusal(&o);
    assert!(
        line.contains("gatehouse secret set tracker-tokn"),
        "{line:?}"
    );
    assert!(w.gatekeeper_names().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn installing_the_same_bytes_twice_does_not_recompile() {
    let w = World::new();
    let bytes = read(&guest("triage"));
    let notes = Mutex::new(Vec::<String>::new());
    let progress = |m: &str| notes.lock().expect("notes").push(m.to_owned());

    let first = w
        .kernel
        .operator()
        .install("triage", &bytes, &progress)
        .unwrap_or_else(|e| panic!("first install: {e:#}"));
    let compiled = compiled_files(w.home());
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    assert!(
        notes
            .lock()
            .expect("notes")
            .iter()
            .any(|n| n.starts_with("compiling")),
        "the first install compiles: {notes:?}"
    );
    // Backdate the artifact, so any rewrite shows whatever the clock's
    // resolution.
    let backdated = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options()
        .write(true)
        .open(&compiled[0])
        .and_then(|f| f.set_modified(backdated))
        .unwrap_or_else(|e| panic!("cannot backdate {}: {e}", compiled[0].display()));
    let artifact = read(&compiled[0]);

    notes.lock().expect("notes").clear();
    let again = w
        .kernel
        .operator()
        .install("triage", &bytes, &progress)
        .unwrap_or_else(|e| panic!("second install: {e:#}"));
    let copy = w
        .reopen()
        .operator()
        .install("triage-copy", &bytes, &progress)
        .unwrap_or_else(|e| panic!("install under another name, by another kernel: {e:#}"));
    assert_eq!(again.digest, first.digest);
    assert_eq!(copy.digest, first.digest);
    assert!(
        notes.lock().expect("notes").is_empty(),
        "nothing was compiled again: {notes:?}"
    );
    // The CLI, too, installs without compiling.
    let path = guest("triage").to_string_lossy().into_owned();
    let o = w.cli(&["install", &path]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stderr(&o).contains("compiling"), "{}", stderr(&o));

    assert_eq!(compiled_files(w.home()), compiled, "still one artifact");
    let modified = std::fs::metadata(&compiled[0])
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", compiled[0].display()));
    assert_eq!(modified, backdated, "the artifact was not rewritten");
    assert!(read(&compiled[0]) == artifact, "the artifact is unchanged");
    let mut names = w.gadget_names();
    names.sort();
    assert_eq!(names, ["triage", "triage-copy"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupted_compiled_entry_is_detected_and_rebuilt() {
    let w = World::new();
    w.install("script");
    w.kernel.person("alice").new_chat("work").expect("chat");
    let compiled = compiled_files(w.home());
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    let garbage: Vec<u8> = b"not a compiled component ".repeat(400);
    write(&compiled[0], &garbage);

    // A fresh kernel (as the next CLI process would be) runs the gadget.
    let k = w.reopen();
    let report = k
        .operator()
        .run("script", "work", r#"{"steps": [{"env": true}]}"#)
        .await
        .unwrap_or_else(|e| panic!("the kernel refused the turn: {e:#}"));
    assert_eq!(
        report.output.as_deref(),
        Ok(r#"[{"keys":[]}]"#),
        "the gadget runs from a rebuilt artifact"
    );
    assert_eq!(
        compiled_files(w.home()),
        compiled,
        "one artifact, same name"
    );
    let rebuilt = read(&compiled[0]);
    assert!(
        rebuilt != garbage && rebuilt.len() > garbage.len(),
        "the damaged artifact was rewritten ({} bytes)",
        rebuilt.len()
    );

    // And the rebuilt artifact is trusted again by the next kernel.
    let again = w
        .reopen()
        .operator()
        .run("script", "work", r#"{"steps": [{"env": true}]}"#)
        .await
        .unwrap_or_else(|e| panic!("the kernel refused the turn: {e:#}"));
    assert!(again.output.is_ok(), "{:?}", again.output);
    assert!(read(&compiled[0]) == rebuilt, "no second rebuild");
}

#[test]
fn a_corrupt_state_database_is_refused_and_left_untouched() {
    let home = tempfile::tempdir().expect("a temporary home");
    let db = home.path().join("gatehouse.db");
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 % 251) as u8).collect();
    write(&db, &garbage);

    let o = cli_command(home.path(), &["pending"])
        .output()
        .expect("the gatehouse binary runs");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "stderr {err:?}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("error: "), "{err:?}");
    assert!(
        err.contains(&db.display().to_string()),
        "the message names the database file: {err:?}"
    );
    assert!(
        err.contains("move it aside or restore a backup"),
        "the message says what to do: {err:?}"
    );
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
    assert!(read(&db) == garbage, "the damaged file was left as it was");
}
