//! The layering rule: each crate may depend only on crates below it, so the
//! stack can be used (and tested) from the bottom up.

use cargo_metadata::{DependencyKind, Metadata, MetadataCommand};

use crate::failure::{Failure, Result};

/// Bottom to top. Every crate under `crates/` is here (checked below).
pub(crate) const LAYERS: &[&str] = &[
    "ferrovia-types",
    "ferrovia-sys",
    "ferrovia-verbs",
    "ferrovia-mr",
    "ferrovia-channel",
    "ferrovia-verbs-transport",
    "ferrovia-ucx",
    "ferrovia-pmix",
    "ferrovia-node",
    "ferrovia-async",
    "ferrovia-transfer",
    "ferrovia",
    "ferrovia-testkit",
];

/// The facade: lower crates may use it as a dev-dependency (tests and
/// examples written against the public API), never as a real dependency.
const FACADE: &str = "ferrovia";

/// The test kit (`publish = false`): the doubles and the job runner every
/// crate's tests share. It sits on top (its rank programs use the node and
/// the async layer), and any crate may take it as a dev-dependency.
const TESTKIT: &str = "ferrovia-testkit";

/// One dependency edge from the workspace metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) kind: DependencyKind,
}

/// `xtask layering` (hidden): only the layering check of `cargo xtask test`.
pub(crate) fn command() -> Result<u8> {
    crate::workspace::enter_root()?;
    check().map(|()| 0)
}

/// Runs `cargo metadata` and fails listing every edge that points up.
pub(crate) fn check() -> Result<()> {
    let metadata = MetadataCommand::new()
        .no_deps()
        .exec()
        .map_err(|e| Failure::new(format!("cargo metadata: {e}")))?;
    let mut bad = unlisted(&metadata);
    bad.extend(violations(&edges(&metadata)));
    if bad.is_empty() {
        say!("xtask: layering ok ({})", LAYERS.join(" < "));
        return Ok(());
    }
    Err(Failure::new(format!(
        "layering violated (order, bottom to top: {}):\n  {}",
        LAYERS.join(" < "),
        bad.join("\n  ")
    )))
}

/// Workspace crates under `crates/` that [`LAYERS`] leaves out: a crate
/// the list forgets is a crate whose edges nobody checks.
pub(crate) fn unlisted(metadata: &Metadata) -> Vec<String> {
    metadata
        .packages
        .iter()
        .filter(|p| {
            p.manifest_path
                .parent()
                .and_then(|d| d.parent())
                .is_some_and(|d| d.file_name() == Some("crates"))
        })
        .filter(|p| !LAYERS.contains(&p.name.as_str()))
        .map(|p| format!("{} is under crates/ but not in the layering list", p.name))
        .collect()
}

/// All dependency edges of the workspace packages.
pub(crate) fn edges(metadata: &Metadata) -> Vec<Edge> {
    metadata
        .packages
        .iter()
        .flat_map(|package| {
            package.dependencies.iter().map(|dep| Edge {
                from: package.name.to_string(),
                to: dep.name.clone(),
                kind: dep.kind,
            })
        })
        .collect()
}

/// Descriptions of the edges that break the layering rule.
pub(crate) fn violations(edges: &[Edge]) -> Vec<String> {
    let layer = |name: &str| LAYERS.iter().position(|l| *l == name);
    edges
        .iter()
        .filter(|e| {
            let (Some(from), Some(to)) = (layer(&e.from), layer(&e.to)) else {
                return false;
            };
            let dev_on_top =
                e.kind == DependencyKind::Development && (e.to == FACADE || e.to == TESTKIT);
            to >= from && !dev_on_top && e.from != e.to
        })
        .map(|e| {
            let kind = match e.kind {
                DependencyKind::Normal => String::new(),
                other => format!("{other}-"),
            };
            format!(
                "{} has a {kind}dependency on {}, which is not below it",
                e.from, e.to
            )
        })
        .collect()
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

    #[test]
    fn downward_edges_are_fine() {
        let edges = [
            edge("ferrovia-verbs", "ferrovia-sys", NORMAL),
            edge("ferrovia-node", "ferrovia-ucx", BUILD),
            edge("ferrovia", "ferrovia-node", NORMAL),
            edge("ferrovia-mr", "ferrovia", DEV),
            edge("ferrovia-channel", "ferrovia-testkit", DEV),
            edge("ferrovia-testkit", "ferrovia-node", NORMAL),
            edge("ferrovia-mr", "libc", NORMAL),
            edge("xtask", "ferrovia", NORMAL),
        ];
        assert!(violations(&edges).is_empty());
    }

    #[test]
    fn upward_edges_are_reported() {
        let edges = [
            edge("ferrovia-sys", "ferrovia-verbs", NORMAL),
            edge("ferrovia-ucx", "ferrovia-node", BUILD),
            edge("ferrovia-mr", "ferrovia-channel", DEV),
            edge("ferrovia-channel", "ferrovia", NORMAL),
            edge("ferrovia-channel", "ferrovia-testkit", NORMAL),
        ];
        let bad = violations(&edges);
        assert_eq!(bad.len(), 5, "{bad:?}");
        assert!(bad[2].contains("dev-dependency on ferrovia-channel"));
    }

    #[test]
    fn the_workspace_keeps_its_layers() {
        let metadata = MetadataCommand::new().no_deps().exec().unwrap();
        let edges = edges(&metadata);
        assert!(
            edges.contains(&edge("ferrovia-verbs", "ferrovia-sys", NORMAL)),
            "{edges:?}"
        );
        assert_eq!(violations(&edges), Vec::<String>::new());
        assert_eq!(unlisted(&metadata), Vec::<String>::new());
        assert!(LAYERS.len() >= 10, "{LAYERS:?}");
    }
}
