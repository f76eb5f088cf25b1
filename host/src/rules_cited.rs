//! Every rule the repository cites is defined in `docs/rules.md`.
//!
//! Comments, tests and docs cite rules as `SPEC P7`, `SPEC G` (a group),
//! `SPEC P1-P4` or `rules.md A5`, and in parentheses as `(P7)` or
//! `(K2, K3)`. A citation of a rule that page does not define is a promise
//! nobody can look up, so this test reads the sources and fails on one.
//! Test-only: nothing here is part of the host.

use regex::Regex;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const LETTERS: &str = "CWKAPVUROSBGFMHLX";

/// The rules and groups `docs/rules.md` defines (`### P7 — ...`,
/// `## P — ...`).
fn defined(rules_md: &str) -> (BTreeSet<String>, BTreeSet<char>) {
    let rule = Regex::new(r"(?m)^### ([A-Z])([0-9]+) ").expect("rule heading pattern");
    let group = Regex::new(r"(?m)^## ([A-Z]) ").expect("group heading pattern");
    let rules = rule
        .captures_iter(rules_md)
        .map(|c| format!("{}{}", &c[1], &c[2]))
        .collect();
    let groups = group
        .captures_iter(rules_md)
        .filter_map(|c| c[1].chars().next())
        .collect();
    (rules, groups)
}

/// The citations in one text: `(rule or group, line)`. A bare rule
/// counts only after `SPEC`/`rules.md` or inside parentheses, so that
/// `B64` or `%C3` are not mistaken for rules.
fn citations(text: &str) -> Vec<(String, usize)> {
    let l = LETTERS;
    let item = format!(r"[{l}]?[0-9]+|[{l}]\b");
    let after = Regex::new(&format!(
        r"(?:SPEC|rules\.md)\s+((?:[{l}][0-9]*)(?:\s*(?:-|–|,|and|or)\s*(?:{item}))*)"
    ))
    .expect("citation pattern");
    let paren = Regex::new(&format!(
        r"\(((?:[{l}][0-9]+)(?:\s*(?:-|–|,|;)\s*(?:[{l}]?[0-9]+))*)\)"
    ))
    .expect("parenthesised citation pattern");
    let token = Regex::new(&format!(r"([{l}])?([0-9]+)?")).expect("token pattern");
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for c in after.captures_iter(line).chain(paren.captures_iter(line)) {
            let mut letter = None;
            for part in c[1].split([',', '-', '–', ';', ' ']) {
                let part = part.trim();
                if part.is_empty() || part == "and" || part == "or" {
                    continue;
                }
                let Some(t) = token.captures(part) else {
                    continue;
                };
                if let Some(x) = t.get(1) {
                    letter = x.as_str().chars().next();
                }
                let Some(x) = letter else { continue };
                match t.get(2) {
                    Some(d) => out.push((format!("{x}{}", d.as_str()), n + 1)),
                    None => out.push((x.to_string(), n + 1)),
                }
            }
        }
    }
    out
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | "node_modules" | ".git") {
                sources(&p, out);
            }
        } else if [".rs", ".md", ".wit", ".py", ".js"]
            .iter()
            .any(|x| name.ends_with(x))
        {
            out.push(p);
        }
    }
}

#[test]
fn the_scanner_sees_every_form_of_citation() {
    let text = "x SPEC P7 y (K2, K3) z SPEC G and SPEC A1-A3 and rules.md X9 B64 %C3";
    let found: Vec<String> = citations(text).into_iter().map(|(r, _)| r).collect();
    assert_eq!(found, ["P7", "G", "A1", "A3", "X9", "K2", "K3"]);
    let (rules, groups) = defined("## P — x\n### P7 — y\n");
    assert!(rules.contains("P7") && groups.contains(&'P'));
}

#[test]
fn every_cited_rule_is_defined_in_rules_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate sits in the workspace");
    let rules_md = std::fs::read_to_string(root.join("docs/rules.md")).expect("docs/rules.md");
    let (rules, groups) = defined(&rules_md);
    assert!(rules.len() > 50, "docs/rules.md defines only {rules:?}");
    let me = Path::new(file!()).file_name().expect("this file's name");
    let mut files = Vec::new();
    for d in [
        "host",
        "tests",
        "docs",
        "gadgets",
        "gatekeepers",
        "wit",
        "fuzz",
        "tools",
    ] {
        sources(&root.join(d), &mut files);
    }
    files.push(root.join("README.md"));
    let mut missing = Vec::new();
    let mut seen = 0;
    for f in files.iter().filter(|f| f.file_name() != Some(me)) {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        for (cited, line) in citations(&text) {
            seen += 1;
            let known = if cited.len() == 1 {
                cited.chars().next().is_some_and(|g| groups.contains(&g))
            } else {
                rules.contains(&cited)
            };
            if !known {
                let at = f.strip_prefix(root).unwrap_or(f);
                missing.push(format!("{}:{line}: {cited}", at.display()));
            }
        }
    }
    assert!(
        seen > 100,
        "only {seen} citations found: the scanner is broken"
    );
    assert!(
        missing.is_empty(),
        "rules cited but not defined in docs/rules.md:\n{}",
        missing.join("\n")
    );
}
