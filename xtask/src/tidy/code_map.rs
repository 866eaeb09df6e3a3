//! What docs/ARCHITECTURE.md names as crates: the bird's-eye view's stack
//! (the first code block, one crate per unindented line) must be the
//! workspace's crates, and every `ferrovia-*` name anywhere in it must be
//! a package or a binary of the workspace.

/// The crates of the bird's-eye view: the first word of each unindented
/// line of the document's first fenced block.
pub(super) fn stack(doc: &str) -> Vec<String> {
    let mut lines = doc.lines().skip_while(|l| !l.starts_with("```"));
    lines.next();
    lines
        .take_while(|l| !l.starts_with("```"))
        .filter(|l| !l.starts_with(' ') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// What is wrong with the stack `named` against the workspace's crates
/// `packages`: crates it leaves out, names that are no crate.
pub(super) fn stack_gaps(named: &[String], packages: &[String]) -> Vec<String> {
    let mut bad: Vec<String> = packages
        .iter()
        .filter(|p| !named.contains(p))
        .map(|p| format!("the bird's-eye view leaves out the crate {p}"))
        .collect();
    bad.extend(
        named
            .iter()
            .filter(|n| !packages.contains(n))
            .map(|n| format!("the bird's-eye view names {n}, which is no crate of the workspace")),
    );
    bad
}

/// Every `ferrovia-*` name in `doc` that is none of `known`.
pub(super) fn unknown_names(doc: &str, known: &[String]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find("ferrovia-") {
        let tail = &rest[i..];
        let end = tail
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_lowercase() || c == '-'))
            .map_or(tail.len(), |(j, _)| j);
        let name = tail[..end].trim_end_matches('-');
        if !known.iter().any(|k| k == name) && !bad.iter().any(|b: &String| b.contains(name)) {
            bad.push(format!(
                "docs/ARCHITECTURE.md names {name}, which is no package or binary"
            ));
        }
        rest = &tail[end.max(1)..];
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# x\n\n```\nferrovia        facade\nferrovia-mr     registry\n                continued\nxtask           tasks\n```\n\nSee ferrovia-mr and ferrovia-gone.\n";

    fn owned(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn reads_the_stack_and_catches_its_gaps() {
        assert_eq!(stack(DOC), owned(&["ferrovia", "ferrovia-mr", "xtask"]));
        let bad = stack_gaps(&stack(DOC), &owned(&["ferrovia", "ferrovia-node", "xtask"]));
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("leaves out the crate ferrovia-node"));
        assert!(bad[1].contains("names ferrovia-mr"));
    }

    #[test]
    fn catches_a_name_that_is_no_package() {
        let bad = unknown_names(DOC, &owned(&["ferrovia", "ferrovia-mr"]));
        assert_eq!(
            bad,
            ["docs/ARCHITECTURE.md names ferrovia-gone, which is no package or binary"]
        );
    }
}
