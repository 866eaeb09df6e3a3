//! The tidy checks, as rust-analyzer keeps them: what docs/ARCHITECTURE.md
//! and the project's rules claim about the source tree, checked on every
//! `cargo test -p xtask` (so in the host step of `cargo xtask test`) so
//! that the documents cannot drift from the code. Each check is a function
//! over text, with a unit test that feeds it a made-up tree and shows it
//! catches a violation; the tests here run it on the real workspace.

mod code_map;
mod ffi_tree;
mod files;
mod links;
mod never_edges;
mod package_meta;
mod unsafe_code;

use std::path::{Path, PathBuf};

use cargo_metadata::{Metadata, MetadataCommand, TargetKind};

use crate::workspace;

fn metadata() -> Metadata {
    MetadataCommand::new().no_deps().exec().unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `.rs` files below `dir`, as paths relative to it (with `/`),
/// leaving out build output (`target/`) and hidden directories.
fn rust_files(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, relative: &str, out: &mut Vec<String>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = format!("{relative}{name}");
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                if !name.starts_with('.') && path != "target" {
                    walk(&entry.path(), &format!("{path}/"), out);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", &mut out);
    out
}

fn report(bad: &[String]) {
    assert!(bad.is_empty(), "\n{}\n", bad.join("\n"));
}

#[test]
fn unsafe_lives_where_the_architecture_says() {
    let doc = read(&workspace::root().join("docs/ARCHITECTURE.md"));
    let allowed = unsafe_code::Allowed::from_document(&doc).unwrap();
    let mut sources = Vec::new();
    // Only `src/`: tests, examples and benches implement the unsafe seams
    // for their doubles and must say `unsafe` to do it.
    for package in metadata().workspace_packages() {
        let src = package.manifest_path.parent().unwrap().join("src");
        let roots: Vec<PathBuf> = package
            .targets
            .iter()
            .filter(|t| t.is_kind(TargetKind::Lib) || t.is_kind(TargetKind::Bin))
            .map(|t| t.src_path.clone().into_std_path_buf())
            .collect();
        for path in rust_files(src.as_std_path()) {
            let full = src.as_std_path().join(&path);
            sources.push(unsafe_code::SourceFile {
                krate: package.name.to_string(),
                text: read(&full),
                is_root: roots.contains(&full),
                path,
            });
        }
    }
    report(&unsafe_code::violations(&allowed, &sources));
}

#[test]
fn only_the_ucx_ffi_tree_names_ffi() {
    let src = workspace::root().join("crates/ferrovia-ucx/src");
    let files: Vec<(String, String)> = rust_files(&src)
        .into_iter()
        .map(|path| {
            let text = read(&src.join(&path));
            (path, text)
        })
        .collect();
    report(&ffi_tree::outside(&files, ffi_tree::UCX_TREE));
}

#[test]
fn no_source_file_is_too_long() {
    let root = workspace::root();
    let files: Vec<(String, String)> = rust_files(&root)
        .into_iter()
        .map(|path| {
            let text = read(&root.join(&path));
            (path, text)
        })
        .collect();
    report(&files::long_files(&files, files::LONG_FILES));
}

#[test]
fn generated_documents_hold_no_path_of_this_machine() {
    let root = workspace::root();
    let home = std::env::var("HOME").unwrap_or_default();
    let local = [root.to_str().unwrap(), home.as_str()];
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(root.join("docs")).unwrap().flatten() {
        let text = read(&entry.path());
        if text.contains(files::GENERATED_DOC) {
            for path in files::machine_paths(&text, &local) {
                bad.push(format!("{}: {path}", entry.path().display()));
            }
        }
    }
    report(&bad);
}

#[test]
fn every_crate_keeps_the_workspace_lints() {
    let root = workspace::root();
    let members: Vec<(String, String)> = metadata()
        .workspace_packages()
        .iter()
        .map(|p| (p.name.to_string(), read(p.manifest_path.as_std_path())))
        .collect();
    report(&files::lint_gaps(&read(&root.join("Cargo.toml")), &members));
}

#[test]
fn the_architecture_names_the_crates_that_exist() {
    let doc = read(&workspace::root().join("docs/ARCHITECTURE.md"));
    let metadata = metadata();
    let packages: Vec<String> = metadata
        .workspace_packages()
        .iter()
        .map(|p| p.name.to_string())
        // The benchmarks are the top-level benches/, not a layer.
        .filter(|n| n != "ferrovia-benches")
        .collect();
    report(&code_map::stack_gaps(&code_map::stack(&doc), &packages));
    let mut known = packages;
    for package in metadata.workspace_packages() {
        for target in &package.targets {
            if target.kind.contains(&TargetKind::Bin) {
                known.push(target.name.clone());
            }
        }
    }
    report(&code_map::unknown_names(&doc, &known));
}

#[test]
fn the_stack_is_the_layering_order() {
    let doc = read(&workspace::root().join("docs/ARCHITECTURE.md"));
    report(&code_map::layer_gaps(
        &code_map::stack(&doc),
        crate::layering::LAYERS,
    ));
}

#[test]
fn no_crate_depends_where_the_architecture_says_never() {
    let doc = read(&workspace::root().join("docs/ARCHITECTURE.md"));
    let metadata = metadata();
    let packages: Vec<String> = metadata
        .workspace_packages()
        .iter()
        .map(|p| p.name.to_string())
        .collect();
    let claims = never_edges::claims(&doc);
    assert!(
        claims.len() >= 5,
        "docs/ARCHITECTURE.md lost its never claims"
    );
    report(&never_edges::violations(
        &doc,
        &packages,
        &crate::layering::edges(&metadata),
    ));
}

#[test]
fn published_crates_carry_their_package_metadata() {
    let manifests: Vec<package_meta::Manifest> = metadata()
        .workspace_packages()
        .iter()
        .map(|p| {
            let dir = p.manifest_path.parent().unwrap();
            package_meta::Manifest {
                name: p.name.to_string(),
                publish: p.publish.clone(),
                description: p.description.clone(),
                readme: p.readme.as_ref().map(|r| dir.join(r).is_file()),
                keywords: p.keywords.clone(),
                categories: p.categories.clone(),
                documentation: p.documentation.clone(),
                homepage: p.homepage.clone(),
                repository: p.repository.clone(),
                docs_rs: p.metadata["docs"]["rs"].is_object(),
                rust_version: p.rust_version.is_some(),
            }
        })
        .collect();
    assert!(manifests.len() > crate::workspace::UNPUBLISHED.len());
    report(&package_meta::gaps(&manifests));
}

#[test]
fn every_link_of_the_documents_leads_somewhere() {
    let root = workspace::root();
    let mut docs = vec!["README.md".to_string(), "CHANGELOG.md".to_string()];
    for dir in ["docs", "ci"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".md") {
                docs.push(format!("{dir}/{name}"));
            }
        }
    }
    for package in metadata().workspace_packages() {
        let readme = package.manifest_path.parent().unwrap().join("README.md");
        if readme.is_file() {
            docs.push(readme.strip_prefix(&root).unwrap().to_string());
        }
    }
    let read = |p: &Path| -> Option<String> {
        if p.is_dir() {
            Some(String::new())
        } else {
            std::fs::read_to_string(p).ok()
        }
    };
    let bad: Vec<String> = docs
        .iter()
        .flat_map(|d| links::broken(&root, d, &read))
        .collect();
    report(&bad);
}
