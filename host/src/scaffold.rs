//! `gatehouse new gadget NAME --lang rust|python|js [--ui]` and `gatehouse
//! new gatekeeper NAME --lang rust`: a starter project that builds and
//! installs as written. With `--ui` the gadget also has a face: a page
//! shown beside its chat (the web inbox, MCP hosts) and the functions the
//! page calls.
//!
//! The templates (`host/templates/`), the WIT contract and the Rust SDKs
//! (`sdk/`, vendored into a Rust starter as a path dependency) are embedded
//! in the binary, so a starter always matches the kernel that wrote it, and
//! an author needs nothing but this binary, the language's toolchain and
//! its package registry.

use anyhow::{Context as _, bail};
use std::path::{Path, PathBuf};

/// The languages a gadget can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// A Rust library crate built as a `wasm32-wasip2` component with cargo.
    Rust,
    /// A Python module built with componentize-py (`build.sh`).
    Python,
    /// A JavaScript module built with componentize-js (`npm run build`).
    Js,
}

/// The contract, copied into every starter as `wit/gatehouse.wit`.
pub(crate) const WIT: &str = include_str!("../../wit/gatehouse.wit");

/// What a starter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A gadget: a program that runs in a chat and calls the services
    /// introduced there (`gatehouse-gadget`).
    Gadget,
    /// A gatekeeper: the sandboxed driver that fronts one service
    /// (`gatehouse-gatekeeper`); Rust only.
    Gatekeeper,
}

impl Kind {
    /// The word people use for it.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Gadget => "gadget",
            Kind::Gatekeeper => "gatekeeper",
        }
    }
}

/// The gadget SDK, `(path in its crate, text)`: vendored into a Rust
/// gadget starter as `vendor/gatehouse-gadget/`.
const GADGET_SDK: &[(&str, &str)] = &[
    ("Cargo.toml", include_str!("../../sdk/gadget/Cargo.toml")),
    ("README.md", include_str!("../../sdk/gadget/README.md")),
    ("src/lib.rs", include_str!("../../sdk/gadget/src/lib.rs")),
    ("src/call.rs", include_str!("../../sdk/gadget/src/call.rs")),
    ("src/face.rs", include_str!("../../sdk/gadget/src/face.rs")),
    (
        "src/storage.rs",
        include_str!("../../sdk/gadget/src/storage.rs"),
    ),
    (
        "src/workflow.rs",
        include_str!("../../sdk/gadget/src/workflow.rs"),
    ),
    (
        "wit/gatehouse.wit",
        include_str!("../../sdk/gadget/wit/gatehouse.wit"),
    ),
];

/// The gatekeeper SDK, vendored into a Rust gatekeeper starter as
/// `vendor/gatehouse-gatekeeper/`.
const GATEKEEPER_SDK: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        include_str!("../../sdk/gatekeeper/Cargo.toml"),
    ),
    ("README.md", include_str!("../../sdk/gatekeeper/README.md")),
    (
        "src/lib.rs",
        include_str!("../../sdk/gatekeeper/src/lib.rs"),
    ),
    (
        "src/args.rs",
        include_str!("../../sdk/gatekeeper/src/args.rs"),
    ),
    (
        "src/http.rs",
        include_str!("../../sdk/gatekeeper/src/http.rs"),
    ),
    (
        "src/manifest.rs",
        include_str!("../../sdk/gatekeeper/src/manifest.rs"),
    ),
    (
        "src/output.rs",
        include_str!("../../sdk/gatekeeper/src/output.rs"),
    ),
    (
        "src/text.rs",
        include_str!("../../sdk/gatekeeper/src/text.rs"),
    ),
    (
        "wit/gatehouse.wit",
        include_str!("../../sdk/gatekeeper/wit/gatehouse.wit"),
    ),
];

/// The SDK a Rust starter of `kind` vendors: its directory and files.
fn sdk(kind: Kind) -> (&'static str, &'static [(&'static str, &'static str)]) {
    match kind {
        Kind::Gadget => ("vendor/gatehouse-gadget", GADGET_SDK),
        Kind::Gatekeeper => ("vendor/gatehouse-gatekeeper", GATEKEEPER_SDK),
    }
}

/// A face starter's page, the same in every language (the host puts the
/// bridge in): a Rust starter keeps it as `src/page.html`, a Python or
/// JavaScript one holds it as a string (`{{page}}`).
const PAGE: &str = include_str!("../templates/face/page.html");

/// Whether a gadget starter has a face (`--ui`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Face {
    /// A gadget that only runs in its chat.
    Without,
    /// A gadget that also shows a page beside its chat.
    With,
}

/// `(path in the starter, template)`; `{{name}}` and `{{crate}}` are
/// replaced by the gadget's name and its Rust library name, `{{page}}` by
/// the face's page as the template's language needs it (see [`page_in`]).
/// A face starter shares the files that do not change with the plain one.
fn templates(
    kind: Kind,
    lang: Lang,
    face: Face,
) -> anyhow::Result<&'static [(&'static str, &'static str)]> {
    Ok(match (kind, lang, face) {
        (Kind::Gatekeeper, _, Face::With) => {
            bail!("a gatekeeper has no face; --ui is for gadgets")
        }
        (Kind::Gatekeeper, Lang::Rust, Face::Without) => &[
            (
                "Cargo.toml",
                include_str!("../templates/rust-gatekeeper/Cargo.toml"),
            ),
            (
                "src/lib.rs",
                include_str!("../templates/rust-gatekeeper/src/lib.rs"),
            ),
            (
                "README.md",
                include_str!("../templates/rust-gatekeeper/README.md"),
            ),
            (
                ".gitignore",
                include_str!("../templates/rust-gatekeeper/gitignore"),
            ),
        ],
        (Kind::Gatekeeper, other, Face::Without) => {
            bail!("a gatekeeper starter is written in Rust only (--lang rust), not {other:?}")
        }
        (Kind::Gadget, Lang::Rust, Face::Without) => &[
            ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
            ("src/lib.rs", include_str!("../templates/rust/src/lib.rs")),
            ("README.md", include_str!("../templates/rust/README.md")),
            (".gitignore", include_str!("../templates/rust/gitignore")),
        ],
        (Kind::Gadget, Lang::Python, Face::Without) => &[
            ("app.py", include_str!("../templates/python/app.py")),
            ("build.sh", include_str!("../templates/python/build.sh")),
            (
                "requirements.txt",
                include_str!("../templates/python/requirements.txt"),
            ),
            ("README.md", include_str!("../templates/python/README.md")),
            (".gitignore", include_str!("../templates/python/gitignore")),
        ],
        (Kind::Gadget, Lang::Js, Face::Without) => &[
            ("app.js", include_str!("../templates/js/app.js")),
            ("package.json", include_str!("../templates/js/package.json")),
            ("README.md", include_str!("../templates/js/README.md")),
            (".gitignore", include_str!("../templates/js/gitignore")),
        ],
        (Kind::Gadget, Lang::Rust, Face::With) => &[
            ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
            (
                "src/lib.rs",
                include_str!("../templates/rust-ui/src/lib.rs"),
            ),
            ("src/page.html", PAGE),
            ("README.md", include_str!("../templates/rust-ui/README.md")),
            (".gitignore", include_str!("../templates/rust/gitignore")),
        ],
        (Kind::Gadget, Lang::Python, Face::With) => &[
            ("app.py", include_str!("../templates/python-ui/app.py")),
            ("build.sh", include_str!("../templates/python-ui/build.sh")),
            (
                "requirements.txt",
                include_str!("../templates/python/requirements.txt"),
            ),
            (
                "README.md",
                include_str!("../templates/python-ui/README.md"),
            ),
            (".gitignore", include_str!("../templates/python/gitignore")),
        ],
        (Kind::Gadget, Lang::Js, Face::With) => &[
            ("app.js", include_str!("../templates/js-ui/app.js")),
            (
                "package.json",
                include_str!("../templates/js-ui/package.json"),
            ),
            ("README.md", include_str!("../templates/js-ui/README.md")),
            (".gitignore", include_str!("../templates/js/gitignore")),
        ],
    })
}

/// `text` as it goes into a string of `lang`'s source, so that the string
/// holds it byte for byte: in a Python `"""` string backslashes are doubled
/// and every third quote of a run escaped (no three quotes in a row end it
/// early); in a JavaScript template literal backslashes, backticks and
/// `${` are escaped.
fn string_in(lang: Lang, text: &str) -> String {
    match lang {
        Lang::Rust => text.to_owned(),
        Lang::Python => text.replace('\\', "\\\\").replace("\"\"\"", "\"\"\\\""),
        Lang::Js => text
            .replace('\\', "\\\\")
            .replace('`', "\\`")
            .replace("${", "\\${"),
    }
}

/// The face page of a Python or JavaScript starter for gadget `name`, as a
/// string of `lang`'s source.
fn page_in(lang: Lang, name: &str) -> String {
    string_in(lang, &PAGE.replace("{{name}}", name))
}

/// What [`new_starter`] wrote.
#[derive(Debug)]
pub struct Starter {
    /// The starter's directory (`--dir`, else `./NAME`).
    pub dir: PathBuf,
    /// Every file written, the embedded WIT contract included.
    pub files: Vec<PathBuf>,
    /// The commands that build and install it, one per line.
    pub next: String,
}

/// A gadget or gatekeeper name is also a crate, package and file name:
/// lower-case letters, digits and single hyphens, starting with a letter.
fn check_name(kind: Kind, name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!(
            "{name:?} is not a {noun} name: use lower-case letters, digits and single hyphens, starting with a letter (like my-{noun})",
            noun = kind.noun()
        );
    }
    Ok(())
}

/// Write a starter for gadget `name` in `lang`, with or without a face,
/// into `dir` (default `./NAME`); see [`new_starter`].
pub fn new_gadget(
    name: &str,
    lang: Lang,
    face: Face,
    dir: Option<&Path>,
) -> anyhow::Result<Starter> {
    new_starter(Kind::Gadget, name, lang, face, dir)
}

/// Write a starter for the `kind` named `name` in `lang` (a gadget with
/// or without a face) into `dir` (default `./NAME`). Refuses a directory
/// that exists and is not empty, so an author's files are never
/// overwritten.
pub fn new_starter(
    kind: Kind,
    name: &str,
    lang: Lang,
    face: Face,
    dir: Option<&Path>,
) -> anyhow::Result<Starter> {
    check_name(kind, name)?;
    let templates = templates(kind, lang, face)?;
    let dir = dir.map_or_else(|| PathBuf::from(name), Path::to_owned);
    if let Ok(mut entries) = std::fs::read_dir(&dir)
        && entries.next().is_some()
    {
        bail!(
            "{} exists and is not empty; choose another --dir",
            dir.display()
        );
    }
    let lib = name.replace('-', "_");
    let mut files = Vec::new();
    let mut write = |rel: &str, text: &str| -> anyhow::Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        files.push(path);
        Ok(())
    };
    let page = page_in(lang, name);
    for (rel, template) in templates {
        // The page last: its text is never searched for placeholders.
        write(
            rel,
            &template
                .replace("{{name}}", name)
                .replace("{{crate}}", &lib)
                .replace("{{page}}", &page),
        )?;
    }
    write("wit/gatehouse.wit", WIT)?;
    if lang == Lang::Rust {
        let (vendor, files) = sdk(kind);
        for (rel, text) in files {
            write(&format!("{vendor}/{rel}"), text)?;
        }
    }
    let shown = dir.display();
    let mut next = match (kind, lang) {
        (Kind::Gatekeeper, _) => format!(
            "cd {shown}\ncargo build --release --target wasm32-wasip2\ngatehouse gatekeeper add target/wasm32-wasip2/release/{lib}.wasm --name {name} --trust byo --allow-host HOST:PORT"
        ),
        (Kind::Gadget, Lang::Rust) => format!(
            "cd {shown}\ncargo build --release --target wasm32-wasip2\ngatehouse install target/wasm32-wasip2/release/{lib}.wasm --name {name}"
        ),
        (Kind::Gadget, Lang::Python) => format!(
            "cd {shown}\npython3 -m venv .venv && .venv/bin/pip install -r requirements.txt\nPATH=$PWD/.venv/bin:$PATH sh build.sh\ngatehouse install {name}.wasm"
        ),
        (Kind::Gadget, Lang::Js) => {
            format!("cd {shown}\nnpm install && npm run build\ngatehouse install {name}.wasm")
        }
    };
    if face == Face::With {
        next.push_str(&format!(
            "\ngatehouse chat new work\ngatehouse serve    # then sign in (gatehouse token create $USER), open the chat work and click \"Open {name}\""
        ));
    }
    Ok(Starter { dir, files, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_crate_or_file_names_are_refused() {
        for bad in ["", "My", "1st", "a_b", "a--b", "a-", "a b", "../x"] {
            assert!(
                check_name(Kind::Gadget, bad).is_err(),
                "{bad:?} was accepted"
            );
        }
        for good in ["a", "my-gadget", "triage2"] {
            assert!(
                check_name(Kind::Gadget, good).is_ok(),
                "{good:?} was refused"
            );
        }
    }

    #[test]
    fn every_starter_names_its_gadget_and_carries_the_contract() {
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            let dir = std::env::temp_dir().join(format!(
                "gatehouse-scaffold-{}-{lang:?}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let s = new_gadget("my-gadget", lang, Face::Without, Some(&dir)).expect("written");
            let wit = std::fs::read_to_string(dir.join("wit/gatehouse.wit")).expect("wit");
            assert_eq!(wit, WIT);
            for f in &s.files {
                let text = std::fs::read_to_string(f).expect("readable");
                assert!(
                    !text.contains("{{"),
                    "{} has a placeholder left",
                    f.display()
                );
            }
            let again = new_gadget("my-gadget", lang, Face::Without, Some(&dir)).map(|s| s.dir);
            assert!(
                again.is_err_and(|e| e.to_string().contains("not empty")),
                "{lang:?}: a second starter over the first is refused"
            );
            std::fs::remove_dir_all(&dir).expect("cleaned up");
        }
    }

    /// Each SDK carries its own copy of the contract (so that a packaged or
    /// vendored SDK is complete); each copy is `wit/gatehouse.wit`, byte for
    /// byte.
    #[test]
    fn the_sdks_copies_of_the_contract_are_the_contract() {
        for kind in [Kind::Gadget, Kind::Gatekeeper] {
            let (_, files) = sdk(kind);
            let copy = files.iter().find(|(rel, _)| *rel == "wit/gatehouse.wit");
            assert!(
                copy.is_some_and(|(_, text)| *text == WIT),
                "the {} SDK's wit/gatehouse.wit differs from wit/gatehouse.wit: copy it again",
                kind.noun()
            );
        }
    }

    #[test]
    fn a_rust_starter_vendors_the_sdk_of_this_kernel() {
        for (kind, vendor) in [
            (Kind::Gadget, "vendor/gatehouse-gadget"),
            (Kind::Gatekeeper, "vendor/gatehouse-gatekeeper"),
        ] {
            let dir = std::env::temp_dir().join(format!(
                "gatehouse-scaffold-sdk-{}-{kind:?}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            new_starter(kind, "my-starter", Lang::Rust, Face::Without, Some(&dir))
                .expect("written");
            let (_, files) = sdk(kind);
            for (rel, text) in files {
                let written =
                    std::fs::read_to_string(dir.join(vendor).join(rel)).expect("vendored");
                assert_eq!(&written, text, "{kind:?}: {rel}");
            }
            let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
            assert!(
                manifest.contains(&format!("path = \"{vendor}\"")),
                "{manifest}"
            );
            std::fs::remove_dir_all(&dir).expect("cleaned up");
        }
        let refused =
            new_starter(Kind::Gatekeeper, "g", Lang::Python, Face::Without, None).map(|s| s.dir);
        assert!(refused.is_err_and(|e| e.to_string().contains("Rust only")));
        let refused =
            new_starter(Kind::Gatekeeper, "g", Lang::Rust, Face::With, None).map(|s| s.dir);
        assert!(refused.is_err_and(|e| e.to_string().contains("no face")));
    }

    /// A `--ui` starter of each language exports a face titled after the
    /// gadget, builds for the world that has one, and its page (the same
    /// in every language, held byte for byte by the string it sits in)
    /// calls `services` and `issues`. No page carries a bridge of its own:
    /// the host puts it in.
    #[test]
    fn a_starter_with_a_face_carries_its_page() {
        for (lang, source, build) in [
            (Lang::Rust, "src/lib.rs", "Cargo.toml"),
            (Lang::Python, "app.py", "build.sh"),
            (Lang::Js, "app.js", "package.json"),
        ] {
            let dir = std::env::temp_dir().join(format!(
                "gatehouse-scaffold-ui-{}-{lang:?}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            let s = new_gadget("my-face", lang, Face::With, Some(&dir)).expect("written");
            let read = |rel: &str| std::fs::read_to_string(dir.join(rel)).expect(rel);
            let code = read(source);
            let page = if lang == Lang::Rust {
                read("src/page.html")
            } else {
                code.clone()
            };
            for f in &s.files {
                assert!(
                    !read(
                        &f.strip_prefix(&dir)
                            .expect("in the starter")
                            .to_string_lossy()
                    )
                    .contains("{{"),
                    "{} has a placeholder left",
                    f.display()
                );
            }
            assert!(
                code.contains("\"services\"") && code.contains("\"issues\""),
                "{lang:?}: the face declares its functions"
            );
            assert!(
                code.contains("title: \"my-face\"") || code.contains("title=\"my-face\""),
                "{lang:?}: the face is titled after the gadget"
            );
            assert!(page.contains("<title>my-face</title>"), "{lang:?}");
            assert!(
                page.contains("textContent") && !page.contains("innerHTML"),
                "{lang:?}: the page writes text, never markup"
            );
            assert!(
                page.contains("gatehouse.call(\"services\"")
                    && page.contains("gatehouse.call(\"issues\""),
                "{lang:?}"
            );
            assert!(!page.contains("window.gatehouse"), "no bridge of its own");
            if lang == Lang::Rust {
                assert!(code.contains("export!(Starter, face)"), "{code}");
                assert_eq!(page, PAGE.replace("{{name}}", "my-face"));
            } else {
                assert!(
                    code.contains(&string_in(lang, &PAGE.replace("{{name}}", "my-face"))),
                    "{lang:?}: the page, byte for byte"
                );
                assert!(
                    read(build).contains("gadget-with-face"),
                    "{lang:?} builds for the world with a face"
                );
            }
            assert!(
                s.next.contains("gatehouse serve") && s.next.contains("Open my-face"),
                "{}",
                s.next
            );
            assert!(read("README.md").contains("Open my-face"), "{lang:?}");
            std::fs::remove_dir_all(&dir).expect("cleaned up");
        }
    }

    /// The page written into a Python `"""` string or a JavaScript template
    /// literal keeps nothing that would end the string or be read as an
    /// escape or a substitution.
    #[test]
    fn the_page_can_sit_in_a_string() {
        let tricky = "a\\b \"\"\" `x` ${y}";
        let py = string_in(Lang::Python, tricky);
        assert!(!py.replace("\\\"", "").contains("\"\"\""), "{py}");
        let js = string_in(Lang::Js, tricky).replace("\\\\", "");
        assert!(
            !js.replace("\\`", "").contains('`') && !js.replace("\\${", "").contains("${"),
            "{js}"
        );
    }
}
