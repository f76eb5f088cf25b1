//! `gatehouse new gadget NAME --lang rust|python|js`: a starter project that
//! builds and installs as written.
//!
//! The templates (`host/templates/`) and the WIT contract are embedded in
//! the binary, so a starter always matches the kernel that wrote it, and an
//! author needs nothing but this binary and the language's toolchain.

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

/// `(path in the starter, template)`; `{{name}}` and `{{crate}}` are
/// replaced by the gadget's name and its Rust library name.
fn templates(lang: Lang) -> &'static [(&'static str, &'static str)] {
    match lang {
        Lang::Rust => &[
            ("Cargo.toml", include_str!("../templates/rust/Cargo.toml")),
            ("src/lib.rs", include_str!("../templates/rust/src/lib.rs")),
            ("README.md", include_str!("../templates/rust/README.md")),
            (".gitignore", include_str!("../templates/rust/gitignore")),
        ],
        Lang::Python => &[
            ("app.py", include_str!("../templates/python/app.py")),
            ("build.sh", include_str!("../templates/python/build.sh")),
            (
                "requirements.txt",
                include_str!("../templates/python/requirements.txt"),
            ),
            ("README.md", include_str!("../templates/python/README.md")),
            (".gitignore", include_str!("../templates/python/gitignore")),
        ],
        Lang::Js => &[
            ("app.js", include_str!("../templates/js/app.js")),
            ("package.json", include_str!("../templates/js/package.json")),
            ("README.md", include_str!("../templates/js/README.md")),
            (".gitignore", include_str!("../templates/js/gitignore")),
        ],
    }
}

/// What [`new_gadget`] wrote.
#[derive(Debug)]
pub struct Starter {
    /// The starter's directory (`--dir`, else `./NAME`).
    pub dir: PathBuf,
    /// Every file written, the embedded WIT contract included.
    pub files: Vec<PathBuf>,
    /// The commands that build and install it, one per line.
    pub next: String,
}

/// A gadget name is also a crate, package and file name: lower-case
/// letters, digits and single hyphens, starting with a letter.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !ok {
        bail!(
            "{name:?} is not a gadget name: use lower-case letters, digits and single hyphens, starting with a letter (like my-gadget)"
        );
    }
    Ok(())
}

/// Write a starter for gadget `name` in `lang` into `dir` (default
/// `./NAME`). Refuses a directory that exists and is not empty, so an
/// author's files are never overwritten.
pub fn new_gadget(name: &str, lang: Lang, dir: Option<&Path>) -> anyhow::Result<Starter> {
    check_name(name)?;
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
    for (rel, template) in templates(lang) {
        write(
            rel,
            &template
                .replace("{{name}}", name)
                .replace("{{crate}}", &lib),
        )?;
    }
    write("wit/gatehouse.wit", WIT)?;
    let shown = dir.display();
    let next = match lang {
        Lang::Rust => format!(
            "cd {shown}\ncargo build --release --target wasm32-wasip2\ngatehouse install target/wasm32-wasip2/release/{lib}.wasm --name {name}"
        ),
        Lang::Python => format!(
            "cd {shown}\npython3 -m venv .venv && .venv/bin/pip install -r requirements.txt\nPATH=$PWD/.venv/bin:$PATH sh build.sh\ngatehouse install {name}.wasm"
        ),
        Lang::Js => {
            format!("cd {shown}\nnpm install && npm run build\ngatehouse install {name}.wasm")
        }
    };
    Ok(Starter { dir, files, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_crate_or_file_names_are_refused() {
        for bad in ["", "My", "1st", "a_b", "a--b", "a-", "a b", "../x"] {
            assert!(check_name(bad).is_err(), "{bad:?} was accepted");
        }
        for good in ["a", "my-gadget", "triage2"] {
            assert!(check_name(good).is_ok(), "{good:?} was refused");
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
            let s = new_gadget("my-gadget", lang, Some(&dir)).expect("written");
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
            let again = new_gadget("my-gadget", lang, Some(&dir)).map(|s| s.dir);
            assert!(
                again.is_err_and(|e| e.to_string().contains("not empty")),
                "{lang:?}: a second starter over the first is refused"
            );
            std::fs::remove_dir_all(&dir).expect("cleaned up");
        }
    }
}
