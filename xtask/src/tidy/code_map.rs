//! What docs/ARCHITECTURE.md names as crates: the bird's-eye view's stack
//! (the first code block, one crate per unindented line) must be the
//! workspace's crates, and the layering list's in the same order; every
//! `ferrovia-*` name anywhere in it must be a package or a binary of the
//! workspace.

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

/// The crates of the stack that are no layer: the tasks.
const NOT_LAYERS: [&str; 2] = ["xtask", "ferrovia-benches"];

/// What is wrong with the layering list `layers` (bottom to top, as
/// `crate::layering::LAYERS`) against the stack `named` (top to bottom):
/// a crate of the stack it leaves out, a layer the stack does not draw,
/// and, if there is neither, a stack drawn in another order. The stack's
/// order is a claim too: each crate depends only on the ones below it.
pub(super) fn layer_gaps(named: &[String], layers: &[&str]) -> Vec<String> {
    let drawn: Vec<&str> = named
        .iter()
        .map(String::as_str)
        .filter(|n| !NOT_LAYERS.contains(n))
        .rev()
        .collect();
    let mut bad: Vec<String> = drawn
        .iter()
        .filter(|n| !layers.contains(n))
        .map(|n| {
            format!(
                "the bird's-eye view draws {n}, which the layering list                  (xtask/src/layering.rs) leaves out"
            )
        })
        .collect();
    bad.extend(layers.iter().filter(|l| !drawn.contains(l)).map(|l| {
        format!("the layering list (xtask/src/layering.rs) has {l}, which the bird's-eye view leaves out")
    }));
    if bad.is_empty() && drawn != layers {
        bad.push(format!(
            "the bird's-eye view draws the stack bottom to top as {}, the layering list              (xtask/src/layering.rs) orders it {}",
            drawn.join(" < "),
            layers.join(" < ")
        ));
    }
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
    fn the_layers_are_the_stack_in_its_order() {
        let stack = owned(&["ferrovia", "ferrovia-mr", "xtask"]);
        assert!(layer_gaps(&stack, &["ferrovia-mr", "ferrovia"]).is_empty());
        let bad = layer_gaps(&stack, &["ferrovia-mr", "ferrovia-types"]);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].contains("draws ferrovia,"), "{bad:?}");
        assert!(bad[1].contains("has ferrovia-types"), "{bad:?}");
        let bad = layer_gaps(&stack, &["ferrovia", "ferrovia-mr"]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(
            bad[0].contains("as ferrovia-mr < ferrovia, the layering list"),
            "{bad:?}"
        );
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
