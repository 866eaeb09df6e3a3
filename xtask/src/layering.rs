//! The layering rule: each crate may depend only on crates below it, so the
//! stack can be used (and tested) from the bottom up.

use crate::cmd;
use crate::failure::{Failure, Result};
use crate::json::Json;

/// Bottom to top.
pub(crate) const LAYERS: &[&str] = &[
    "ferrovia-sys",
    "ferrovia-verbs",
    "ferrovia-mr",
    "ferrovia-channel",
    "ferrovia-ucx",
    "ferrovia-node",
    "ferrovia",
];

/// The facade: lower crates may use it as a dev-dependency (tests and
/// examples written against the public API), never as a real dependency.
const FACADE: &str = "ferrovia";

/// One dependency edge from the workspace metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) from: String,
    pub(crate) to: String,
    /// `None` for normal, else `dev` or `build` (cargo's `kind`).
    pub(crate) kind: Option<String>,
}

/// `xtask layering` (hidden): only the layering check of `cargo xtask test`.
pub(crate) fn command(args: &[std::ffi::OsString]) -> Result<u8> {
    if !args.is_empty() {
        return Err(Failure::with_status("usage: cargo xtask layering", 2));
    }
    crate::workspace::enter_root()?;
    check().map(|()| 0)
}

/// Runs `cargo metadata` and fails listing every edge that points up.
pub(crate) fn check() -> Result<()> {
    let text = cmd::output(cmd::cargo().args(["metadata", "--no-deps", "--format-version", "1"]))?;
    let edges = edges_in_metadata(&text)?;
    let bad = violations(&edges);
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

/// All dependency edges of the workspace packages in `cargo metadata` JSON.
pub(crate) fn edges_in_metadata(text: &str) -> Result<Vec<Edge>> {
    let doc = Json::parse(text).map_err(|e| Failure::new(format!("cargo metadata: {e}")))?;
    let packages = doc
        .get("packages")
        .ok_or_else(|| Failure::new("cargo metadata: no `packages`"))?;
    let mut edges = Vec::new();
    for package in packages.items() {
        let Some(from) = package.get("name").and_then(Json::as_str) else {
            continue;
        };
        for dep in package
            .get("dependencies")
            .map(Json::items)
            .unwrap_or_default()
        {
            let Some(to) = dep.get("name").and_then(Json::as_str) else {
                continue;
            };
            let kind = dep.get("kind").and_then(Json::as_str).map(String::from);
            edges.push(Edge {
                from: from.to_string(),
                to: to.to_string(),
                kind,
            });
        }
    }
    Ok(edges)
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
            let dev_on_facade = e.kind.as_deref() == Some("dev") && e.to == FACADE;
            to >= from && !dev_on_facade && e.from != e.to
        })
        .map(|e| {
            let kind = e
                .kind
                .as_deref()
                .map(|k| format!("{k}-"))
                .unwrap_or_default();
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

    fn edge(from: &str, to: &str, kind: Option<&str>) -> Edge {
        Edge {
            from: from.into(),
            to: to.into(),
            kind: kind.map(String::from),
        }
    }

    #[test]
    fn downward_edges_are_fine() {
        let edges = [
            edge("ferrovia-verbs", "ferrovia-sys", None),
            edge("ferrovia-node", "ferrovia-ucx", Some("build")),
            edge("ferrovia", "ferrovia-node", None),
            edge("ferrovia-mr", "ferrovia", Some("dev")),
            edge("ferrovia-mr", "libc", None),
            edge("xtask", "ferrovia", None),
        ];
        assert!(violations(&edges).is_empty());
    }

    #[test]
    fn upward_edges_are_reported() {
        let edges = [
            edge("ferrovia-sys", "ferrovia-verbs", None),
            edge("ferrovia-ucx", "ferrovia-node", Some("build")),
            edge("ferrovia-mr", "ferrovia-channel", Some("dev")),
            edge("ferrovia-channel", "ferrovia", None),
        ];
        let bad = violations(&edges);
        assert_eq!(bad.len(), 4, "{bad:?}");
        assert!(bad[2].contains("dev-dependency on ferrovia-channel"));
    }

    #[test]
    fn reads_edges_from_metadata() {
        let text = r#"{"packages":[{"name":"ferrovia-sys","dependencies":[]},
            {"name":"ferrovia-verbs","dependencies":[
              {"name":"ferrovia-sys","req":"^0.1","kind":null,"rename":null,"features":[],"target":null},
              {"name":"ferrovia-mr","req":"^0.1","kind":"dev","features":["x"]}]}],
            "workspace_members":[],"version":1}"#;
        let edges = edges_in_metadata(text).unwrap();
        assert_eq!(
            edges,
            [
                edge("ferrovia-verbs", "ferrovia-sys", None),
                edge("ferrovia-verbs", "ferrovia-mr", Some("dev"))
            ]
        );
        assert_eq!(violations(&edges).len(), 1);
        assert!(edges_in_metadata("{").is_err());
    }
}
