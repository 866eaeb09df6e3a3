//! Where a crate's raw bindings may be named: in `ferrovia-ucx`, only in
//! its FFI tree (`ucp.rs` and `ucp/`), which owns the `ffi` module; the
//! rest of the crate calls the tree's wrappers. Found by a real Rust lexer
//! (proc-macro2), so comments, doc comments and strings do not count, nor
//! do the standard library's `std::ffi` and `core::ffi`.

use std::str::FromStr;

use proc_macro2::{TokenStream, TokenTree};

/// `ferrovia-ucx`'s FFI tree: the module root and its directory, relative
/// to the crate's `src/`.
pub(super) const UCX_TREE: (&str, &str) = ("ucp.rs", "ucp/");

/// The lines of `source` that name a module `ffi` other than the standard
/// library's (`std::ffi`, `core::ffi`, `alloc::ffi`).
pub(super) fn ffi_lines(source: &str) -> Result<Vec<usize>, String> {
    let tokens = TokenStream::from_str(source).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    walk(tokens, &mut lines);
    Ok(lines)
}

fn walk(tokens: TokenStream, lines: &mut Vec<usize>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tree) in trees.iter().enumerate() {
        match tree {
            TokenTree::Ident(ident) if ident == "ffi" => {
                let std_path = i >= 3
                    && matches!(&trees[i - 1], TokenTree::Punct(p) if p.as_char() == ':')
                    && matches!(&trees[i - 2], TokenTree::Punct(p) if p.as_char() == ':')
                    && matches!(&trees[i - 3], TokenTree::Ident(k)
                        if k == "std" || k == "core" || k == "alloc");
                if !std_path {
                    lines.push(ident.span().start().line);
                }
            }
            TokenTree::Group(group) => walk(group.stream(), lines),
            _ => {}
        }
    }
}

/// The files of the crate's `src/` (`files`: path relative to it, text)
/// outside `tree` that name `ffi`, and a tree that is missing.
pub(super) fn outside(files: &[(String, String)], tree: (&str, &str)) -> Vec<String> {
    let (root, dir) = tree;
    let in_tree = |path: &str| path == root || path.starts_with(dir);
    let mut bad = Vec::new();
    if !files.iter().any(|(p, _)| p == root) {
        bad.push(format!("the FFI tree's root src/{root} is missing"));
    }
    for (path, text) in files.iter().filter(|(p, _)| !in_tree(p)) {
        match ffi_lines(text) {
            Ok(lines) if !lines.is_empty() => bad.push(format!(
                "src/{path} names `ffi` at line(s) {lines:?}: only the FFI tree (src/{root}, \
                 src/{dir}) may; call its wrappers"
            )),
            Ok(_) => {}
            Err(e) => bad.push(format!("src/{path}: cannot lex: {e}")),
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    }

    #[test]
    fn only_the_standard_library_s_ffi_counts_as_fine() {
        let source = "use std::ffi::CStr;\nuse core::ffi::c_void;\n// ffi::x in a comment\n\
                      /// ffi::y in a doc\nconst S: &str = \"ffi::z\";\n\
                      use crate::ffi;\nfn f() { let s = ffi::UCS_OK; }\n";
        assert_eq!(ffi_lines(source).unwrap(), [6, 7]);
        assert!(ffi_lines("fn f() {").is_err());
    }

    #[test]
    fn catches_ffi_outside_the_tree_and_a_missing_tree() {
        let good = files(&[
            ("lib.rs", "mod ucp;\nuse std::ffi::CStr;"),
            ("ucp.rs", "mod ffi;\npub(crate) use ffi::x;"),
            ("ucp/worker.rs", "use super::ffi;\nfn f() { ffi::g() }"),
        ]);
        assert_eq!(outside(&good, UCX_TREE), Vec::<String>::new());

        let mut bad = good;
        bad.push((
            "engine/send.rs".into(),
            "fn f() {\n    crate::ucp::ffi::g()\n}".into(),
        ));
        bad.remove(1);
        let found = outside(&bad, UCX_TREE);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("src/ucp.rs is missing"), "{found:?}");
        assert!(
            found[1].contains("src/engine/send.rs names `ffi` at line(s) [2]"),
            "{found:?}"
        );
    }
}
