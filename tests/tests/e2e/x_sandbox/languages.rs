//! Gadgets in Python and JavaScript from the same WIT. Each does
//! what the Rust `triage` gadget does, and the service cannot tell them
//! apart; a Python gadget has no more authority than a Rust one; the big
//! components compile once and are cached safely; `gatehouse new` starters
//! build, install and run as written.
//!
//! The Python and JavaScript components are built by `langs::guest` (cached
//! across runs) with the toolchains `tools/langs/setup.sh` installs.

use gatehouse::store::Trust;
use gatehouse_e2e::langs::{self, Lang};
use gatehouse_e2e::{TOKEN, World, compiled_files, guest, stderr, stdout};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// What one run of the triage scenario produced: the turns' answers and
/// every request the tracker received (method, path, body).
#[derive(Debug, PartialEq)]
struct Trace {
    outputs: Vec<String>,
    requests: Vec<(String, String, String)>,
}

/// The triage scenario with the component at `path`, installed as
/// `triage`: one run (a read, two staged actions), both approved, then a
/// `poll` turn that sees them applied.
async fn triage_scenario(path: &Path, shared_compile: bool) -> Trace {
    let w = World::new();
    if shared_compile {
        langs::seed_compiled(w.home(), path);
    }
    let notes = std::sync::Mutex::new(Vec::<String>::new());
    w.kernel
        .operator()
        .install("triage", &read(path), &|m| {
            notes.lock().expect("notes").push(m.to_owned())
        })
        .unwrap_or_else(|e| panic!("{} does not install: {e:#}", path.display()));
    if shared_compile {
        let notes = notes.lock().expect("notes");
        assert!(
            notes.is_empty(),
            "the shared compiled form was used, nothing compiled: {notes:?}"
        );
    }
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);

    let mut outputs = Vec::new();
    let mut turn = async |input: &str| {
        let report = w.turn("triage", "work", input).await;
        let out = report.output.unwrap_or_else(|e| {
            panic!(
                "{} failed on {input:?}: {e}\nstderr: {}",
                path.display(),
                report.stderr
            )
        });
        outputs.push(out.clone());
        out
    };
    let ran = turn("").await;
    assert!(ran.starts_with("Read 2 issues from ISSUES."), "{ran}");
    assert!(
        ran.contains("createIssue: #2 pending")
            && ran.contains("addLabel triaged to #1: #3 pending"),
        "{ran}"
    );
    assert!(
        w.tracker.writes().is_empty(),
        "nothing is sent before a decision"
    );
    let polled = turn("poll 2 3").await;
    assert_eq!(polled, "#2 pending\n#3 pending");

    for id in [2, 3] {
        let decision = w
            .kernel
            .person("alice")
            .approve(id)
            .await
            .unwrap_or_else(|e| panic!("approving #{id}: {e:#}"));
        assert!(decision.ok(), "#{id} was applied");
    }
    let polled = turn("poll #2, 3").await;
    assert!(
        polled.starts_with("#2 applied: {") && polled.contains("\n#3 applied: {"),
        "{polled}"
    );
    let refused = turn("poll 99").await;
    assert!(refused.starts_with("#99 error: refused:"), "{refused}");

    let requests = w
        .tracker
        .requests()
        .into_iter()
        .map(|r| (r.method, r.path, r.body))
        .collect();
    Trace { outputs, requests }
}

/// The Rust triage gadget's trace, computed once per test process.
async fn rust_trace() -> &'static Trace {
    static TRACE: tokio::sync::OnceCell<Trace> = tokio::sync::OnceCell::const_new();
    TRACE
        .get_or_init(async || triage_scenario(&guest("triage"), false).await)
        .await
}

async fn same_requests_as_rust(name: &str) {
    let path = langs::guest(name);
    let size = read(&path).len();
    assert!(
        size > 4 << 20,
        "{name} is a big component ({size} bytes), as toolchains with a bundled runtime make"
    );
    let rust = rust_trace().await;
    let trace = triage_scenario(&path, true).await;
    assert_eq!(
        trace.requests, rust.requests,
        "{name} sends the service exactly what the Rust triage sends"
    );
    assert_eq!(
        trace.requests.len(),
        3,
        "one read and two applied actions: {:?}",
        trace.requests
    );
    assert_eq!(trace.outputs, rust.outputs, "{name} answers as Rust triage");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_triage_sends_the_same_requests_as_rust() {
    same_requests_as_rust("triage-py").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_triage_sends_the_same_requests_as_rust() {
    same_requests_as_rust("triage-js").await;
}

/// An environment variable of the test process that no guest may see.
const CANARY_NAME: &str = "GATEHOUSE_LANG_CANARY";
const CANARY_VALUE: &str = "canary-7f3a91-visible-only-to-the-host";

fn set_canary() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: std serialises its own environment accesses; no test in
        // this binary reads the environment from foreign code, and the value
        // is set once, before any world using it is created.
        unsafe { std::env::set_var(CANARY_NAME, CANARY_VALUE) };
    });
    assert_eq!(std::env::var(CANARY_NAME).as_deref(), Ok(CANARY_VALUE));
}

/// Run the probe gadget `name` in a chat with the tracker's gatekeeper,
/// aiming its connection attempts at the tracker (a real listening server,
/// so an attempt that got out would show up in its request log).
async fn probe(name: &str) -> (World, Value, String) {
    set_canary();
    let path = langs::guest(name);
    let w = World::new();
    langs::seed_compiled(w.home(), &path);
    w.kernel
        .operator()
        .install(name, &read(&path), &|_| {})
        .unwrap_or_else(|e| panic!("{name} does not install: {e:#}"));
    w.kernel.person("alice").new_chat("work").expect("chat");
    let report = w.turn(name, "work", &w.tracker.host()).await;
    let text = report.output.unwrap_or_else(|e| {
        panic!(
            "the probe turn failed: {e}\nstdout: {}\nstderr: {}",
            report.stdout, report.stderr
        )
    });
    let found: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("probe output {text:?}: {e}"));
    assert!(
        !text.contains(CANARY_VALUE) && !text.contains(TOKEN),
        "the host's environment or a secret leaked into the gadget: {text}"
    );
    assert!(
        w.tracker.requests().is_empty(),
        "the gadget reached the tracker: {:?}",
        w.tracker.requests()
    );
    (w, found, text)
}

fn is_error(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with("error:"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_gadget_cannot_read_host_files_environment_or_open_sockets() {
    let (_w, found, text) = probe("probe-py").await;
    assert!(is_error(&found["file"]), "/etc/passwd was readable: {text}");
    assert!(
        is_error(&found["environ_file"]),
        "/proc/self/environ was readable: {text}"
    );
    assert!(is_error(&found["dir"]), "/ could be listed: {text}");
    assert!(
        is_error(&found["cwd"]),
        "a working directory could be listed: {text}"
    );
    assert_eq!(
        found["env"],
        serde_json::json!({}),
        "the environment is empty"
    );
    assert_eq!(found["getenv_home"], Value::Null, "HOME is not set: {text}");
    assert!(is_error(&found["socket"]), "a socket was opened: {text}");
    assert!(is_error(&found["resolve"]), "a name was resolved: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_gadget_cannot_fetch_read_files_or_the_environment() {
    let (w, found, text) = probe("probe-js").await;
    // Built without StarlingMonkey's HTTP support, `fetch` may exist but
    // has no way out: calling it ends the turn, and nothing is sent.
    let fetched = w
        .turn("probe-js", "work", &format!("fetch {}", w.tracker.host()))
        .await;
    assert!(
        fetched
            .output
            .as_ref()
            .is_err_and(|e| e.contains("crashed")),
        "fetch did not fail: {:?} ({text})",
        fetched.output
    );
    assert!(
        w.tracker.requests().is_empty(),
        "fetch reached the tracker: {:?}",
        w.tracker.requests()
    );
    assert!(
        is_error(&found["env"]),
        "an environment was visible: {text}"
    );
    assert!(is_error(&found["require"]), "a file was read: {text}");
    assert_eq!(found["globals"], serde_json::json!([]), "{text}");
}

/// Install with the CLI, twice; the second install compiles nothing and
/// leaves the cached artifact as it was; then a corrupted artifact is
/// detected and rebuilt, and the gadget still runs.
fn install_twice_then_corrupt(name: &str) {
    let path = langs::guest(name);
    let path_arg = path.to_string_lossy().into_owned();
    let w = World::new();

    let first = w.cli(&["install", &path_arg, "--name", "triage"]);
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(
        stdout(&first).contains("installed gadget triage"),
        "{}",
        stdout(&first)
    );
    let notes = stderr(&first);
    let lines: Vec<&str> = notes.lines().collect();
    assert!(
        lines
            .first()
            .is_some_and(|l| l.starts_with("compiling ") && l.contains("KiB of WebAssembly")),
        "install says it is compiling before it starts: {notes:?}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with("compiling done in ")),
        "install says when compiling is done: {notes:?}"
    );
    assert!(
        lines.iter().all(|l| l.starts_with("compiling")),
        "only progress notes on stderr: {notes:?}"
    );
    let compiled = compiled_files(w.home());
    assert_eq!(compiled.len(), 1, "{compiled:?}");
    // Backdate the artifact, so any rewrite shows whatever the clock's
    // resolution.
    let backdated = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let set_mtime = |p: &Path| {
        std::fs::File::options()
            .write(true)
            .open(p)
            .and_then(|f| f.set_modified(backdated))
            .unwrap_or_else(|e| panic!("cannot backdate {}: {e}", p.display()));
    };
    set_mtime(&compiled[0]);
    let artifact = read(&compiled[0]);

    let second = w.cli(&["install", &path_arg, "--name", "triage"]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert_eq!(stderr(&second), "", "the second install compiles nothing");
    let modified = std::fs::metadata(&compiled[0])
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", compiled[0].display()));
    assert_eq!(modified, backdated, "the artifact was not rewritten");
    assert!(read(&compiled[0]) == artifact, "the artifact is unchanged");

    // Corrupt the artifact (same length, one flipped byte in the middle):
    // the next run detects it, recompiles and works.
    let mut damaged = artifact.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x5a;
    std::fs::write(&compiled[0], &damaged)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", compiled[0].display()));
    set_mtime(&compiled[0]);
    let chat = w.cli(&["chat", "new", "work"]);
    assert!(chat.status.success(), "{}", stderr(&chat));
    let ran = w.cli(&["run", "triage", "--chat", "work", "poll 7"]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    // The CLI marks a gadget's line that looks like the kernel's own.
    assert!(
        stdout(&ran).starts_with("> #7 error: refused:"),
        "{}",
        stdout(&ran)
    );
    assert_eq!(
        compiled_files(w.home()),
        compiled,
        "one artifact, same name"
    );
    let rebuilt = read(&compiled[0]);
    assert!(rebuilt != damaged, "the damaged artifact was rewritten");
    let modified = std::fs::metadata(&compiled[0])
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", compiled[0].display()));
    assert!(modified != backdated, "the artifact was rebuilt");

    // The rebuilt artifact is trusted by the next process as is.
    set_mtime(&compiled[0]);
    let again = w.cli(&["run", "triage", "--chat", "work", "poll 7"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let modified = std::fs::metadata(&compiled[0])
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", compiled[0].display()));
    assert_eq!(
        modified, backdated,
        "an intact artifact is loaded, not rebuilt"
    );
}

#[test]
fn python_installs_once_and_a_corrupt_cache_entry_is_rebuilt() {
    install_twice_then_corrupt("triage-py");
}

#[test]
fn javascript_installs_once_and_a_corrupt_cache_entry_is_rebuilt() {
    install_twice_then_corrupt("triage-js");
}

/// The command that builds a Rust starter named `name` as its README says,
/// and the component it makes. It runs the cargo running this test, so the
/// starter builds with the toolchain (and its wasm32-wasip2 target) the
/// repository pins; its dependencies come from crates.io and the SDK it
/// vendors.
fn rust_build(name: &str) -> (Command, std::path::PathBuf) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let target = langs::target_dir().join("starter-rust");
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target);
    if let Some(rustc) = Path::new(&cargo)
        .parent()
        .map(|bin| bin.join("rustc"))
        .filter(|r| r.exists())
    {
        cmd.env("RUSTC", rustc);
    }
    // Whatever wraps or flags the compile running this test (CI lints the
    // workspace through clippy-driver) is not what the README's reader has.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CLIPPY_ARGS",
    ] {
        cmd.env_remove(var);
    }
    let wasm = target.join(format!(
        "wasm32-wasip2/release/{}.wasm",
        name.replace('-', "_")
    ));
    (cmd, wasm)
}

/// The starter `gatehouse new` writes for `lang` (with a face when `ui`,
/// `--ui`), built with the commands its README gives; returns the built
/// component.
fn build_starter(w: &World, lang: &str, name: &str, ui: bool) -> std::path::PathBuf {
    let dir = w.home().join("starter");
    let dir_arg = dir.to_string_lossy().into_owned();
    let mut args = vec![
        "new",
        "gadget",
        name,
        "--lang",
        lang,
        "--dir",
        dir_arg.as_str(),
    ];
    if ui {
        args.push("--ui");
    }
    let created = w.cli(&args);
    assert!(created.status.success(), "{}", stderr(&created));
    assert!(
        stdout(&created).starts_with(&format!("created gadget {name}")),
        "{}",
        stdout(&created)
    );
    assert_eq!(
        stdout(&created).contains(&format!("click \"Open {name}\"")),
        ui,
        "only a starter with a face says where to see it: {}",
        stdout(&created)
    );
    let again = w.cli(&args);
    assert_eq!(again.status.code(), Some(1), "a second starter is refused");
    assert!(stderr(&again).contains("not empty"), "{}", stderr(&again));

    let pins = langs::repo_root().join("tools/langs");
    let run = |mut cmd: Command, what: &str| {
        let o = cmd
            .current_dir(&dir)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        assert!(
            o.status.success(),
            "{what} failed in the {lang} starter:\n{}{}",
            stdout(&o),
            stderr(&o)
        );
    };
    match lang {
        "rust" => {
            let (cmd, wasm) = rust_build(name);
            run(cmd, "cargo build");
            wasm
        }
        "python" => {
            assert_eq!(
                read(&dir.join("requirements.txt")),
                read(&pins.join("requirements.txt")),
                "the starter pins the componentize-py the repository verified"
            );
            let path = langs::path_with_tools(Lang::Python).unwrap_or_else(|e| panic!("{e}"));
            let mut cmd = Command::new("sh");
            cmd.arg("build.sh").env("PATH", path);
            run(cmd, "sh build.sh");
            dir.join(format!("{name}.wasm"))
        }
        "js" => {
            let pinned = |p: &Path| -> Value {
                let v: Value = serde_json::from_slice(&read(p))
                    .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                v["devDependencies"].clone()
            };
            assert_eq!(
                pinned(&dir.join("package.json")),
                pinned(&pins.join("package.json")),
                "the starter pins the componentize-js the repository verified"
            );
            // What `npm install` would fetch, already installed by
            // tools/langs/setup.sh with the same pins.
            let modules = langs::tool_bin(Lang::Js)
                .unwrap_or_else(|e| panic!("{e}"))
                .parent()
                .expect("node_modules/.bin")
                .to_owned();
            std::os::unix::fs::symlink(&modules, dir.join("node_modules"))
                .unwrap_or_else(|e| panic!("cannot link node_modules: {e}"));
            let mut cmd = Command::new("npm");
            cmd.args(["run", "--silent", "build"]);
            run(cmd, "npm run build");
            dir.join(format!("{name}.wasm"))
        }
        other => panic!("no starter language {other}"),
    }
}

/// `gatehouse new` for `lang`: the starter builds, installs and runs, alone
/// and with the tracker's gatekeeper introduced.
async fn starter_builds_installs_and_runs(lang: &str) {
    let name = format!("hello-{lang}");
    let w = World::new();
    let wasm = build_starter(&w, lang, &name, false);
    let wasm_arg = wasm.to_string_lossy().into_owned();
    let installed = w.cli(&["install", &wasm_arg, "--name", &name]);
    assert!(installed.status.success(), "{}", stderr(&installed));
    assert!(
        stdout(&installed).contains(&format!("installed gadget {name}")),
        "{}",
        stdout(&installed)
    );
    let chat = w.cli(&["chat", "new", "work"]);
    assert!(chat.status.success(), "{}", stderr(&chat));
    let ran = w.cli(&["run", &name, "--chat", "work", "hi"]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let out = stdout(&ran);
    assert!(
        out.starts_with(&format!("Hello from {name}. You said: ")) && out.contains("hi"),
        "{out}"
    );
    assert!(out.contains("Services introduced: none"), "{out}");

    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    let introduced = w.cli(&["introduce", "work", "issues", "--key", "ISSUES"]);
    assert!(introduced.status.success(), "{}", stderr(&introduced));
    let ran = w.cli(&["run", &name, "--chat", "work", "again"]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let out = stdout(&ran);
    assert!(out.contains("Service ISSUES: listIssues"), "{out}");
    assert!(
        out.contains("ISSUES answered: [") && out.contains("Login page shows a blank screen"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rust_starter_builds_installs_and_runs() {
    starter_builds_installs_and_runs("rust").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_starter_builds_installs_and_runs() {
    starter_builds_installs_and_runs("python").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_starter_builds_installs_and_runs() {
    starter_builds_installs_and_runs("js").await;
}

/// The first script of the page as shown (`html`, past the host's guard,
/// which comes first in every page) is the host's bridge, byte for byte:
/// the page can call its gadget before any script of its own runs.
fn assert_bridge_first(what: &str, html: &str) {
    let html = html.replacen(gatehouse::face::GUARD, "", 1);
    let first = html.find("<script").expect("the page has scripts");
    let want = format!("<script>{}</script>", gatehouse::face::BRIDGE);
    let got = &html[first..];
    let same = got
        .bytes()
        .zip(want.bytes())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(
        same == want.len(),
        "{what}: the page's first script is the host's bridge; \
         they differ from byte {same}: {:?}",
        got.get(same.saturating_sub(40)..(same + 80).min(got.len()))
    );
}

/// A face call's answer as JSON (panics, saying why, on a refusal).
async fn face_answer(w: &World, gadget: &str, function: &str, args: &str) -> Value {
    let answer = w
        .kernel
        .person("alice")
        .face_call(gadget, "work", function, args)
        .await
        .unwrap_or_else(|e| panic!("{gadget}.{function} was refused: {e:#}"));
    let text = answer
        .output
        .unwrap_or_else(|e| panic!("{gadget}.{function} failed: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{gadget}.{function}: {e}: {text}"))
}

/// `gatehouse new --ui` for `lang`: the starter builds and installs as
/// written, its face is titled after it and declares `services` and
/// `issues`, and each answers as a turn of the person viewing it (the
/// chat's owner, the CLI's person): the services introduced with their
/// tools, then the tracker's issues once ISSUES is introduced.
async fn starter_with_a_face_answers(lang: &str) {
    let name = format!("face-{lang}");
    let w = World::new();
    let wasm = build_starter(&w, lang, &name, true);
    let wasm_arg = wasm.to_string_lossy().into_owned();
    let installed = w.cli(&["install", &wasm_arg, "--name", &name]);
    assert!(installed.status.success(), "{}", stderr(&installed));
    // The CLI's person (GATEHOUSE_USER=alice) owns the chat.
    let chat = w.cli(&["chat", "new", "work"]);
    assert!(chat.status.success(), "{}", stderr(&chat));
    let ran = w.cli(&["run", &name, "--chat", "work", "hi"]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert!(
        stdout(&ran).starts_with(&format!("Hello from {name}. You said: ")),
        "{}",
        stdout(&ran)
    );

    let page = w
        .kernel
        .face(&name)
        .await
        .unwrap_or_else(|e| panic!("the face of {name} cannot be shown: {e:#}"))
        .unwrap_or_else(|| panic!("{name} has no face"));
    assert_eq!(page.title, name, "the face is titled after the gadget");
    assert_eq!(page.functions, ["services", "issues"]);
    assert_bridge_first(&name, &page.html);
    assert!(
        page.html.contains(&format!("<title>{name}</title>")) && !page.html.contains("innerHTML"),
        "{}",
        page.html
    );

    assert_eq!(
        face_answer(&w, &name, "services", "{}").await,
        Value::Array(vec![])
    );
    let refused = w
        .kernel
        .person("alice")
        .face_call(&name, "work", "issues", "{}")
        .await
        .expect("the call is admitted");
    assert!(
        refused.output.as_ref().is_err_and(|e| e.contains("ISSUES")),
        "no ISSUES yet: {:?}",
        refused.output
    );

    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    let introduced = w.cli(&["introduce", "work", "issues", "--key", "ISSUES"]);
    assert!(introduced.status.success(), "{}", stderr(&introduced));
    let services = face_answer(&w, &name, "services", "{}").await;
    let listed = services.as_array().expect("a list of services");
    assert_eq!(listed.len(), 1, "{services}");
    assert_eq!(listed[0]["key"], "ISSUES", "{services}");
    let tools = listed[0]["tools"].as_array().expect("its tools");
    assert!(
        tools.iter().any(|t| t == "listIssues") && tools.iter().any(|t| t == "addLabel"),
        "{services}"
    );
    let answer = w
        .kernel
        .person("alice")
        .face_call(&name, "work", "issues", "{}")
        .await
        .expect("the call is admitted");
    assert!(answer.staged.is_empty(), "a read stages nothing");
    let issues: Value =
        serde_json::from_str(&answer.output.expect("issues answers")).expect("issues answers JSON");
    let titles: Vec<&str> = issues
        .as_array()
        .expect("a list of issues")
        .iter()
        .filter_map(|i| i["title"].as_str())
        .collect();
    assert_eq!(
        titles,
        [
            "Login page shows a blank screen",
            "Export to CSV drops the header row"
        ]
    );
    let unknown = w
        .kernel
        .person("alice")
        .face_call(&name, "work", "face", "{}")
        .await
        .map(|a| a.output);
    assert!(
        unknown.is_err(),
        "an undeclared function runs nothing: {unknown:?}"
    );
    assert!(w.tracker.writes().is_empty(), "nothing was written");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rust_starter_with_a_face_builds_and_its_face_answers() {
    starter_with_a_face_answers("rust").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_starter_with_a_face_builds_and_its_face_answers() {
    starter_with_a_face_answers("python").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_javascript_starter_with_a_face_builds_and_its_face_answers() {
    starter_with_a_face_answers("js").await;
}

/// What the triage board at `path` (installed as `triage`) shows and does
/// with the tracker introduced as ISSUES: the board, the answer to a click
/// on "Label bug" for issue #1, the board after it, and the page's HTML.
async fn board_scenario(path: &Path, shared_compile: bool) -> (Value, Value, Value, String) {
    let w = World::new();
    if shared_compile {
        langs::seed_compiled(w.home(), path);
    }
    w.kernel
        .operator()
        .install("triage", &read(path), &|_| {})
        .unwrap_or_else(|e| panic!("{} does not install: {e:#}", path.display()));
    w.add_gatekeeper("issues", "issues", Trust::Byo).await;
    w.chat_with("work", "alice", &[("issues", "ISSUES")]);
    let page = w
        .kernel
        .face("triage")
        .await
        .unwrap_or_else(|e| panic!("the board of {} cannot be shown: {e:#}", path.display()))
        .unwrap_or_else(|| panic!("{} has no face", path.display()));
    assert_eq!(page.title, "Triage board");
    assert_eq!(page.functions, ["board", "label"]);

    let before = face_answer(&w, "triage", "board", "{}").await;
    let labelled = w
        .kernel
        .person("alice")
        .face_call("triage", "work", "label", r#"{"id":1,"label":"bug"}"#)
        .await
        .expect("the call is admitted");
    let said: Value =
        serde_json::from_str(&labelled.output.expect("label answers")).expect("label answers JSON");
    assert_eq!(
        labelled.staged.len(),
        1,
        "the kernel says one write was staged"
    );
    assert_eq!(said["pending"], labelled.staged[0], "{said}");
    assert!(
        w.tracker.writes().is_empty(),
        "nothing is sent before a decision: {:?}",
        w.tracker.writes()
    );
    let bad = w
        .kernel
        .person("alice")
        .face_call("triage", "work", "label", r#"{"id":"one"}"#)
        .await
        .expect("the call is admitted");
    assert!(
        bad.output.as_ref().is_err_and(|e| e.contains("numeric id")) && bad.staged.is_empty(),
        "{:?}",
        bad.output
    );
    let after = face_answer(&w, "triage", "board", "{}").await;
    (before, said, after, page.html.clone())
}

/// The JavaScript triage has the Rust triage's face: the same page (the
/// board's markup, the bridge first), the same functions, and the same
/// answers: the issues with a proposed label each, and a click that stages
/// `addLabel` (pending, nothing sent) and is then listed as pending.
#[tokio::test(flavor = "multi_thread")]
async fn javascript_triage_has_the_same_board_as_rust() {
    let (before, said, after, _) = board_scenario(&guest("triage"), false).await;
    let js = board_scenario(&langs::guest("triage-js"), true).await;
    let issues = before["issues"].as_array().expect("the board's issues");
    assert_eq!(issues.len(), 2, "{before}");
    assert_eq!(issues[0]["title"], "Login page shows a blank screen");
    assert!(
        issues.iter().all(|i| i["proposed"] == "bug"),
        "a label proposed for each: {before}"
    );
    assert_eq!(before["staged"], Value::Array(vec![]), "{before}");
    let staged = after["staged"].as_array().expect("the staged writes");
    assert_eq!(staged.len(), 1, "{after}");
    assert_eq!(staged[0]["action"], said["pending"], "{after}");
    assert_eq!(
        (
            &staged[0]["issue"],
            &staged[0]["label"],
            &staged[0]["status"]
        ),
        (
            &Value::from(1),
            &Value::from("bug"),
            &Value::from("pending")
        ),
        "{after}"
    );
    assert_eq!(js.0, before, "the same board");
    assert_eq!(js.1, said, "the same answer to a click");
    assert_eq!(js.2, after, "the same board after it");
    assert_bridge_first("triage-js", &js.3);
    let rust_board = String::from_utf8(read(
        &langs::repo_root().join("gadgets/triage/src/board.html"),
    ))
    .expect("UTF-8");
    // The markup is the Rust board's (its script may be spelled otherwise).
    let markup = |html: &str| html[..html.rfind("<script>").unwrap_or(html.len())].to_string();
    assert_eq!(
        markup(&js.3)
            .replacen(gatehouse::face::GUARD, "", 1)
            .replacen(
                &format!("<script>{}</script>", gatehouse::face::BRIDGE),
                "",
                1,
            ),
        markup(&rust_board),
        "the same markup"
    );
}

/// The code block docs/writing-a-gatekeeper.md gives for the starter edit
/// `name` (the rust block after `<!-- starter edit: NAME -->`): the test
/// applies the page's own text, so the page cannot drift from what works.
fn gatekeeper_doc_edit(name: &str) -> String {
    let page = langs::repo_root().join("docs/writing-a-gatekeeper.md");
    let doc = String::from_utf8(read(&page)).expect("the page is UTF-8");
    let marker = format!("<!-- starter edit: {name} -->\n```rust\n");
    let start = doc
        .find(&marker)
        .unwrap_or_else(|| panic!("{} has no starter edit {name}", page.display()))
        + marker.len();
    let end = doc[start..]
        .find("```")
        .unwrap_or_else(|| panic!("the starter edit {name} is not closed"));
    doc[start..start + end].to_string()
}

/// A newcomer writes a gatekeeper from `gatehouse new gatekeeper`
/// and the docs alone (the write tool the guide adds), adds it, and a
/// gadget's call of the write is staged: `pending`, awaiting a decision,
/// and nothing reaches the service, while the starter's read goes through.
#[tokio::test(flavor = "multi_thread")]
async fn a_newcomer_writes_a_gatekeeper_from_the_starter_and_gets_a_pending_write() {
    let w = World::new();
    let service = gatehouse_e2e::EchoService::start(200);
    let dir = w.home().join("notes");
    let dir_arg = dir.to_string_lossy().into_owned();
    let created = w.cli(&[
        "new",
        "gatekeeper",
        "notes",
        "--lang",
        "rust",
        "--dir",
        &dir_arg,
    ]);
    assert!(created.status.success(), "{}", stderr(&created));
    assert!(
        stdout(&created).starts_with("created gatekeeper notes"),
        "{}",
        stdout(&created)
    );
    assert!(
        dir.join("vendor/gatehouse-gatekeeper/src/lib.rs").exists(),
        "the starter vendors the SDK"
    );

    let lib = dir.join("src/lib.rs");
    let mut source = String::from_utf8(read(&lib)).expect("UTF-8");
    for (anchor, edit) in [
        ("        // Tools: add more here.\n", "tools"),
        ("            // Calls: add more here.\n", "calls"),
    ] {
        assert!(source.contains(anchor), "the starter has {anchor:?}");
        let edited = format!("{anchor}{}", gatekeeper_doc_edit(edit));
        source = source.replacen(anchor, &edited, 1);
    }
    std::fs::write(&lib, source).expect("the edit is saved");

    let (mut cmd, wasm) = rust_build("notes");
    let built = cmd
        .current_dir(&dir)
        .env_remove("RUST_BACKTRACE")
        .output()
        .expect("cargo runs");
    assert!(
        built.status.success(),
        "cargo build failed in the gatekeeper starter:\n{}{}",
        stdout(&built),
        stderr(&built)
    );

    let wasm_arg = wasm.to_string_lossy().into_owned();
    let host = service.host();
    let added = w.cli(&[
        "gatekeeper",
        "add",
        &wasm_arg,
        "--name",
        "notes",
        "--trust",
        "byo",
        "--allow-host",
        &host,
    ]);
    assert!(added.status.success(), "{}", stderr(&added));
    assert!(stdout(&added).contains("addItem"), "{}", stdout(&added));
    for args in [
        &["chat", "new", "work"][..],
        &["introduce", "work", "notes", "--key", "NOTES"],
    ] {
        let o = w.cli(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    w.install("script");
    let steps = serde_json::json!({ "steps": [
        gatehouse_e2e::call("NOTES", "addItem", serde_json::json!({"title": "Milk"})),
        gatehouse_e2e::call("NOTES", "listItems", serde_json::json!({})),
    ]});
    let ran = w.cli(&["run", "script", "--chat", "work", &steps.to_string()]);
    assert!(ran.status.success(), "{}", stderr(&ran));
    let answers: Value =
        serde_json::from_str(&stdout(&ran)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&ran)));
    let pending = &answers[0]["pending"];
    assert!(pending["action_id"].is_u64(), "{answers}");
    assert_eq!(pending["await_decision"], true, "{answers}");
    assert!(answers[1]["done"].is_object(), "the read ran: {answers}");

    let seen = service.requests();
    assert_eq!(seen.len(), 1, "only the read reached the service: {seen:?}");
    assert_eq!(seen[0]["method"], "GET", "{seen:?}");
    assert_eq!(seen[0]["path"], "/items", "{seen:?}");
    let listed = w.cli(&["pending"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(stdout(&listed).contains("addItem"), "{}", stdout(&listed));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_javascript_gadget_built_with_http_is_refused_naming_wasi_http() {
    // The same triage-js, built without `-d http fetch-event`: its
    // StarlingMonkey imports wasi:http, which gadgets are not given.
    let bin = langs::tool_bin(Lang::Js).unwrap_or_else(|e| panic!("{e}"));
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let out = scratch.path().join("with-http.wasm");
    let src = langs::repo_root().join("gadgets/triage-js/app.js");
    let built = Command::new(bin.join("componentize-js"))
        .arg("--wit")
        .arg(langs::repo_root().join("wit"))
        .args(["-n", "gadget", "-o"])
        .arg(&out)
        .arg(&src)
        .current_dir(scratch.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run componentize-js: {e}"));
    assert!(built.status.success(), "{}", stderr(&built));

    let w = World::new();
    let err = w
        .kernel
        .operator()
        .install("with-http", &read(&out), &|_| {})
        .map(|g| panic!("a gadget importing wasi:http was installed as {g:?}"))
        .unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("wasi:http") && msg.contains("imports something Gatehouse does not provide"),
        "the refusal names the import: {msg:?}"
    );
    assert!(!msg.contains('\n'), "one line: {msg:?}");
    assert!(w.gadget_names().is_empty());
    assert!(
        compiled_files(w.home()).is_empty(),
        "a refused component leaves no compiled form"
    );
}
