//! What crates.io and docs.rs need of each package: the crates users
//! depend on carry full metadata, and the tools and test support are never
//! published. `cargo package` only warns about missing metadata, so this
//! check holds it instead.

use crate::workspace::UNPUBLISHED;

/// crates.io's category slugs that fit ferrovia's crates (the registry
/// ignores, with a warning only, a slug it does not know).
const CATEGORIES: [&str; 8] = [
    "api-bindings",
    "asynchronous",
    "concurrency",
    "external-ffi-bindings",
    "hardware-support",
    "memory-management",
    "network-programming",
    "os::linux-apis",
];

/// One package's manifest, as far as publishing goes.
#[derive(Debug, Default)]
pub(super) struct Manifest {
    pub(super) name: String,
    /// `publish = false` is `Some(vec![])`.
    pub(super) publish: Option<Vec<String>>,
    pub(super) description: Option<String>,
    /// Whether the `readme` is set and the file exists.
    pub(super) readme: Option<bool>,
    pub(super) keywords: Vec<String>,
    pub(super) categories: Vec<String>,
    pub(super) documentation: Option<String>,
    pub(super) homepage: Option<String>,
    pub(super) repository: Option<String>,
    /// `[package.metadata.docs.rs]` is there.
    pub(super) docs_rs: bool,
    pub(super) rust_version: bool,
}

/// crates.io's rule for a keyword: at most 20 characters, ASCII letters,
/// digits, `_`, `-` or `+`, starting with a letter.
fn keyword_ok(k: &str) -> bool {
    (1..=20).contains(&k.len())
        && k.starts_with(|c: char| c.is_ascii_alphabetic())
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+".contains(c))
}

/// What keeps the packages from publishing as the project wants.
pub(super) fn gaps(packages: &[Manifest]) -> Vec<String> {
    let mut bad = Vec::new();
    for p in packages {
        let n = &p.name;
        let unpublished = p.publish.as_ref().is_some_and(Vec::is_empty);
        if UNPUBLISHED.contains(&n.as_str()) {
            if !unpublished {
                bad.push(format!(
                    "{n} is no library for users: give it publish = false"
                ));
            }
            continue;
        }
        if unpublished {
            bad.push(format!(
                "{n} has publish = false but is a library: publish it, or add it to \
                 UNPUBLISHED in xtask/src/workspace.rs"
            ));
        }
        if p.description.as_deref().is_none_or(str::is_empty) {
            bad.push(format!("{n} has no description"));
        }
        match p.readme {
            None => bad.push(format!("{n} has no readme")),
            Some(false) => bad.push(format!("{n}'s readme file does not exist")),
            Some(true) => {}
        }
        if p.keywords.is_empty() || p.keywords.len() > 5 {
            bad.push(format!("{n} has {} keywords (1 to 5)", p.keywords.len()));
        }
        for k in p.keywords.iter().filter(|k| !keyword_ok(k)) {
            bad.push(format!("{n}: crates.io refuses the keyword {k:?}"));
        }
        if p.categories.is_empty() || p.categories.len() > 5 {
            bad.push(format!(
                "{n} has {} categories (1 to 5)",
                p.categories.len()
            ));
        }
        for c in p
            .categories
            .iter()
            .filter(|c| !CATEGORIES.contains(&c.as_str()))
        {
            bad.push(format!(
                "{n}: {c:?} is not among the crates.io categories in CATEGORIES \
                 (xtask/src/tidy/package_meta.rs); check the slug and add it there"
            ));
        }
        let docs = format!("https://docs.rs/{n}");
        if p.documentation.as_deref() != Some(docs.as_str()) {
            bad.push(format!("{n}: documentation should be {docs}"));
        }
        // The project has no public repository or home page yet: a URL
        // here would lead nowhere.
        for (what, url) in [("homepage", &p.homepage), ("repository", &p.repository)] {
            if let Some(url) = url {
                bad.push(format!(
                    "{n} names a {what} ({url}); none exists yet (see README.md)"
                ));
            }
        }
        if !p.docs_rs {
            bad.push(format!("{n} has no [package.metadata.docs.rs]"));
        }
        if !p.rust_version {
            bad.push(format!("{n} states no rust-version"));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(name: &str) -> Manifest {
        Manifest {
            name: name.into(),
            description: Some("what it is".into()),
            readme: Some(true),
            keywords: vec!["rdma".into()],
            categories: vec!["network-programming".into()],
            documentation: Some(format!("https://docs.rs/{name}")),
            docs_rs: true,
            rust_version: true,
            ..Manifest::default()
        }
    }

    #[test]
    fn a_complete_library_and_unpublished_tools_pass() {
        let tools = Manifest {
            name: "xtask".into(),
            publish: Some(vec![]),
            ..Manifest::default()
        };
        assert_eq!(
            gaps(&[published("ferrovia-x"), tools]),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_gap_is_named() {
        let mut p = published("ferrovia-x");
        p.readme = Some(false);
        p.keywords = vec!["kv cache".into(), "9p".into()];
        p.categories = vec!["networking".into()];
        p.documentation = Some("https://docs.rs/ferrovia".into());
        p.repository = Some("https://example.invalid/ferrovia".into());
        p.docs_rs = false;
        let bad = gaps(&[
            p,
            Manifest {
                name: "ferrovia-testkit".into(),
                ..Manifest::default()
            },
        ]);
        for needle in [
            "readme file does not exist",
            "refuses the keyword \"kv cache\"",
            "refuses the keyword \"9p\"",
            "\"networking\" is not among",
            "documentation should be https://docs.rs/ferrovia-x",
            "names a repository",
            "no [package.metadata.docs.rs]",
            "ferrovia-testkit is no library for users",
        ] {
            assert!(bad.iter().any(|b| b.contains(needle)), "{needle}: {bad:#?}");
        }
        assert_eq!(bad.len(), 8, "{bad:#?}");
    }

    #[test]
    fn a_library_without_metadata_is_named_for_each_field() {
        let bad = gaps(&[Manifest {
            name: "ferrovia-y".into(),
            ..Manifest::default()
        }]);
        assert_eq!(bad.len(), 7, "{bad:#?}");
    }
}
