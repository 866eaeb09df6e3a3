//! The "never depends" claims of docs/ARCHITECTURE.md, checked against
//! the dependency edges of `cargo metadata`.
//!
//! A claim is a sentence "`A` never depends on `B`", or on several crates
//! ("on `B` or `C`", "on `B`, `C` or `D`"), or "on any workspace crate"
//! (every workspace crate but A). It may wrap across lines. It means: no
//! path of normal or build dependencies leads from A to B through the
//! workspace's crates. Build dependencies count, since building A then
//! builds and runs B; optional ones count, since a feature turns them on.
//! Dev-dependencies do not: tests and examples may use crates above (the
//! facade), which the layering check bounds. "`A` never depends directly
//! on `B`" claims only that A has no such edge to B itself.
//! Both names must be crates of the workspace.

use std::collections::BTreeMap;

use cargo_metadata::DependencyKind;

use crate::layering::Edge;

/// What follows the first crate's name in a claim.
const NEVER: &str = " never depends ";
/// The target of a claim about every other crate.
const ANY: &str = "any workspace crate";

/// One claim as the document states it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Claim {
    pub(super) from: String,
    pub(super) to: Vec<String>,
    /// "never depends directly on": only A's own edges count.
    pub(super) direct: bool,
    /// Whether the target is [`ANY`].
    pub(super) any: bool,
    /// The claim's words, for the report.
    pub(super) text: String,
}

/// The claims of `doc`, or for each sentence that uses the form but
/// cannot be read, why. Whitespace (line breaks too) counts as one space.
pub(super) fn claims(doc: &str) -> Vec<Result<Claim, String>> {
    let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find(NEVER) {
        let start = at + i;
        at = start + NEVER.len();
        // Prose ("it never depends on the id") is no claim: a claim
        // starts with a crate's name in backticks.
        let Some(before) = text[..start].strip_suffix('`') else {
            continue;
        };
        let Some(claim_start) = before.rfind('`') else {
            continue;
        };
        let from = &before[claim_start + 1..];
        let rest = &text[at..];
        let (direct, rest) = match rest.strip_prefix("directly ") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let Some(rest) = rest.strip_prefix("on ") else {
            out.push(Err(unreadable(
                &text[claim_start..],
                "no `on` after `never depends`",
            )));
            continue;
        };
        let mut claim = Claim {
            from: from.to_owned(),
            to: Vec::new(),
            direct,
            any: rest.starts_with(ANY),
            text: String::new(),
        };
        let mut end = text.len() - rest.len();
        if claim.any {
            end += ANY.len();
        } else {
            let mut names = rest;
            while let Some((name, tail)) = names.strip_prefix('`').and_then(|n| n.split_once('`')) {
                claim.to.push(name.to_owned());
                end = text.len() - tail.len();
                // Past the separator, up to the next name's backtick.
                match [", or `", ", `", " or `"]
                    .into_iter()
                    .find(|sep| tail.starts_with(sep))
                {
                    Some(sep) => names = &tail[sep.len() - 1..],
                    None => break,
                }
            }
        }
        claim.text = text[claim_start..end].to_owned();
        if claim.to.is_empty() && !claim.any {
            out.push(Err(unreadable(
                &text[claim_start..],
                "no crate in backticks",
            )));
        } else {
            out.push(Ok(claim));
        }
    }
    out
}

fn unreadable(from: &str, why: &str) -> String {
    let shown: String = from.chars().take(80).collect();
    format!(
        "docs/ARCHITECTURE.md: cannot read the claim \"{shown}...\" ({why}); write \
         \"`A` never depends on `B`\" (xtask/src/tidy/never_edges.rs)"
    )
}

/// The path from `from` to `to` over `edges` (normal and build ones), if
/// any, as the crates along it.
fn path(edges: &[Edge], from: &str, to: &str, direct: bool) -> Option<Vec<String>> {
    let counts = |e: &&Edge| e.kind != DependencyKind::Development && e.from != e.to;
    // Breadth first, each crate remembering the one it was reached from.
    let mut reached: BTreeMap<&str, &str> = BTreeMap::new();
    let mut frontier = vec![from];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for krate in frontier {
            for edge in edges.iter().filter(counts).filter(|e| e.from == krate) {
                if edge.to != from && !reached.contains_key(edge.to.as_str()) {
                    reached.insert(&edge.to, krate);
                    next.push(edge.to.as_str());
                }
            }
        }
        frontier = if direct { Vec::new() } else { next };
    }
    reached.contains_key(to).then(|| {
        let mut path = vec![to.to_owned()];
        let mut at = to;
        while let Some(&before) = reached.get(at) {
            path.push(before.to_owned());
            at = before;
        }
        path.reverse();
        path
    })
}

/// What breaks the claims of `doc`: a claim that a path contradicts, one
/// that names no crate of `packages`, one that cannot be read.
pub(super) fn violations(doc: &str, packages: &[String], edges: &[Edge]) -> Vec<String> {
    let mut bad = Vec::new();
    for claim in claims(doc) {
        let claim = match claim {
            Ok(claim) => claim,
            Err(e) => {
                bad.push(e);
                continue;
            }
        };
        let unknown: Vec<&String> = std::iter::once(&claim.from)
            .chain(&claim.to)
            .filter(|n| !packages.contains(n))
            .collect();
        if !unknown.is_empty() {
            for name in unknown {
                bad.push(format!(
                    "docs/ARCHITECTURE.md claims \"{}\", but {name} is no crate of the workspace",
                    claim.text
                ));
            }
            continue;
        }
        let targets: Vec<&String> = if claim.any {
            packages.iter().filter(|p| **p != claim.from).collect()
        } else {
            claim.to.iter().collect()
        };
        for to in targets {
            if let Some(path) = path(edges, &claim.from, to, claim.direct) {
                bad.push(format!(
                    "docs/ARCHITECTURE.md claims \"{}\", but {} (normal or build dependencies)",
                    claim.text,
                    path.join(" -> ")
                ));
            }
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    const NORMAL: DependencyKind = DependencyKind::Normal;
    const DEV: DependencyKind = DependencyKind::Development;
    const BUILD: DependencyKind = DependencyKind::Build;

    fn edge(from: &str, to: &str, kind: DependencyKind) -> Edge {
        Edge {
            from: from.into(),
            to: to.into(),
            kind,
        }
    }

    fn packages() -> Vec<String> {
        ["a-top", "a-mid", "a-low", "a-base"]
            .map(String::from)
            .to_vec()
    }

    /// a-top -> a-mid -> a-low (build) -> a-base; a-base -dev-> a-top.
    fn edges() -> Vec<Edge> {
        vec![
            edge("a-top", "a-mid", NORMAL),
            edge("a-mid", "a-low", BUILD),
            edge("a-low", "a-base", NORMAL),
            edge("a-low", "libc", NORMAL),
            edge("a-base", "a-top", DEV),
        ]
    }

    #[test]
    fn reads_the_claims_and_leaves_prose_alone() {
        let doc = "**Architecture Invariant:** `a-mid` never depends on `a-top`\n\
                   or `b`. And `a-base` never depends on any workspace crate; \
                   `x` never depends directly on `y`, `z`, or `w`. The id never \
                   depends on the QP.";
        let found: Vec<Claim> = claims(doc).into_iter().map(Result::unwrap).collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert_eq!(found[0].from, "a-mid");
        assert_eq!(found[0].to, ["a-top", "b"]);
        assert_eq!(found[0].text, "`a-mid` never depends on `a-top` or `b`");
        assert!(found[1].any && found[1].to.is_empty());
        assert!(found[2].direct);
        assert_eq!(found[2].to, ["y", "z", "w"]);
        assert!(claims("`a` never depends on b").pop().unwrap().is_err());
        assert!(claims("`a` never depends upon `b`").pop().unwrap().is_err());
    }

    #[test]
    fn true_claims_pass() {
        let doc = "`a-base` never depends on any workspace crate. `a-low` never \
                   depends on `a-mid` or `a-top`. `a-top` never depends directly on \
                   `a-low`.";
        assert_eq!(violations(doc, &packages(), &edges()), Vec::<String>::new());
    }

    #[test]
    fn catches_a_path_and_a_misspelt_crate() {
        let doc = "`a-top` never depends on `a-base`. `a-mid` never depends \
                   directly on `a-low`. `a-top` never depends on `a-mdi`.";
        let bad = violations(doc, &packages(), &edges());
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(
            bad[0].contains("but a-top -> a-mid -> a-low -> a-base"),
            "{bad:?}"
        );
        assert!(bad[1].contains("but a-mid -> a-low"), "{bad:?}");
        assert!(
            bad[2].contains("but a-mdi is no crate of the workspace"),
            "{bad:?}"
        );
    }
}
