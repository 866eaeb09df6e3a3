//! The links of the project's Markdown documents: every relative link
//! names a file that exists, and every `#anchor` into a Markdown file a
//! heading it has (as GitHub makes anchors from headings). Moving a
//! section from one document to another must not leave a link behind.

use std::path::{Component, Path, PathBuf};

/// The link targets of `doc`: what stands between `](` and `)`, outside
/// code blocks and code spans.
fn targets(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans: a `](` inside backticks is no link.
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, part)| part)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-`
/// and `_` dropped, spaces made `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of `doc`'s headings.
fn anchors(doc: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// `path` with its `.` and `..` taken out, as written (no file system).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The broken links of the document at `path` (relative to the workspace
/// `root`), given `read`, which returns a file's text or `None` if it does
/// not exist (directories count as existing, with no text).
pub(super) fn broken(
    root: &Path,
    path: &str,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Vec<String> {
    let Some(doc) = read(&root.join(path)) else {
        return vec![format!("{path} does not exist")];
    };
    let dir = Path::new(path).parent().unwrap_or(Path::new(""));
    let mut bad = Vec::new();
    for target in targets(&doc) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let (shown, text) = if file.is_empty() {
            (path.to_string(), Some(doc.clone()))
        } else {
            let file_path = normalize(&dir.join(file));
            (
                file_path.display().to_string(),
                read(&root.join(&file_path)),
            )
        };
        let Some(text) = text else {
            bad.push(format!(
                "{path}: the link ({target}) names {shown}, which does not exist"
            ));
            continue;
        };
        if !anchor.is_empty()
            && shown.ends_with(".md")
            && !anchors(&text).contains(&anchor.to_string())
        {
            bad.push(format!(
                "{path}: the link ({target}): {shown} has no heading #{anchor}"
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchors_are_githubs() {
        assert_eq!(
            slug(" Registered memory: what safe code may and may not do"),
            "registered-memory-what-safe-code-may-and-may-not-do"
        );
        assert_eq!(
            slug(" Async: futures that own their buffers"),
            "async-futures-that-own-their-buffers"
        );
        assert_eq!(slug(" `cargo xtask demo`"), "cargo-xtask-demo");
    }

    #[test]
    fn a_moved_file_or_section_is_a_broken_link() {
        let files = |p: &Path| -> Option<String> {
            match p.to_str().unwrap() {
                "/w/README.md" => Some(
                    "# R\n[guide](docs/guide.md#rails) [gone](docs/old.md) \
                     [here](#r) [web](https://docs.rs/x) `[no](link)`\n\
                     ```\n[code](block.md)\n```\n[missing](docs/guide.md#nowhere)\n"
                        .into(),
                ),
                "/w/docs/guide.md" => Some("# Guide\n## Rails\n[back](../README.md#r)\n".into()),
                _ => None,
            }
        };
        let root = Path::new("/w");
        assert_eq!(broken(root, "docs/guide.md", &files), Vec::<String>::new());
        let bad = broken(root, "README.md", &files);
        assert_eq!(bad.len(), 2, "{bad:#?}");
        assert!(
            bad[0].contains("docs/old.md, which does not exist"),
            "{bad:#?}"
        );
        assert!(bad[1].contains("has no heading #nowhere"), "{bad:#?}");
    }
}
