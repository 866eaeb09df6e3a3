//! Where `unsafe` may appear: the list in docs/ARCHITECTURE.md's
//! "Cross-cutting concerns" section, and the code's `unsafe` keywords and
//! `#![forbid(unsafe_code)]` attributes, found by a real Rust lexer
//! (proc-macro2): comments, doc comments and strings do not count.

use std::collections::BTreeMap;
use std::str::FromStr;

use proc_macro2::{Delimiter, TokenStream, TokenTree};

/// The list, as the document gives it in a fenced block of lines
/// `CRATE: MODULE...` (`*`: every module) and one line
/// `forbid(unsafe_code): CRATE...`; `#` starts a comment.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Allowed {
    /// Crate -> the modules (`element`, `vm/run_dir`) that may hold
    /// `unsafe`; an empty list means all of them.
    pub(super) modules: BTreeMap<String, Vec<String>>,
    /// The crates whose every root has `#![forbid(unsafe_code)]`.
    pub(super) forbid: Vec<String>,
}

/// The document's heading of the section that holds the list.
const SECTION: &str = "## Cross-cutting concerns";
/// The key of the line naming the crates that forbid unsafe code.
const FORBID: &str = "forbid(unsafe_code)";

impl Allowed {
    /// Reads the list from the first fenced block of the document's
    /// Cross-cutting concerns section (its `###` parts included).
    pub(super) fn from_document(doc: &str) -> Result<Allowed, String> {
        let section = doc
            .split_once(SECTION)
            .map(|(_, rest)| rest.split("\n## ").next().unwrap_or(rest))
            .ok_or_else(|| format!("no `{SECTION}` section"))?;
        let block = section
            .split("```")
            .nth(1)
            .ok_or_else(|| format!("no fenced block in `{SECTION}`"))?;
        let mut allowed = Allowed::default();
        // The fence's first line is its info string.
        for line in block.lines().skip(1) {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let (key, values) = line
                .split_once(':')
                .ok_or_else(|| format!("not `CRATE: MODULE...`: {line:?}"))?;
            let values: Vec<String> = values.split_whitespace().map(String::from).collect();
            if key.trim() == FORBID {
                allowed.forbid.extend(values);
            } else if values == ["*"] {
                allowed.modules.insert(key.trim().into(), Vec::new());
            } else if values.is_empty() || values.iter().any(|v| v == "*") {
                return Err(format!("`*` alone, or modules: {line:?}"));
            } else {
                allowed.modules.insert(key.trim().into(), values);
            }
        }
        if allowed.modules.is_empty() {
            return Err(format!("the block in `{SECTION}` lists no crate"));
        }
        Ok(allowed)
    }

    /// Whether `module` of `krate` may hold `unsafe`.
    fn permits(&self, krate: &str, module: &str) -> bool {
        self.modules
            .get(krate)
            .is_some_and(|m| m.is_empty() || m.iter().any(|m| m == module))
    }
}

/// The module a file under a crate's `src/` is: `element.rs` ->
/// `element`, `vm/mod.rs` -> `vm`, `bin/ferrovia-rank.rs` ->
/// `bin/ferrovia-rank`.
pub(super) fn module_of(relative_to_src: &str) -> String {
    let path = relative_to_src
        .strip_suffix(".rs")
        .unwrap_or(relative_to_src);
    path.strip_suffix("/mod").unwrap_or(path).to_string()
}

/// The lines of `source` with the `unsafe` keyword.
pub(super) fn unsafe_lines(source: &str) -> Result<Vec<usize>, String> {
    let tokens = TokenStream::from_str(source).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    walk(tokens, &mut |tree| {
        if let TokenTree::Ident(ident) = tree
            && ident == "unsafe"
        {
            lines.push(ident.span().start().line);
        }
    });
    Ok(lines)
}

fn walk(tokens: TokenStream, each: &mut dyn FnMut(&TokenTree)) {
    for tree in tokens {
        each(&tree);
        if let TokenTree::Group(group) = tree {
            walk(group.stream(), each);
        }
    }
}

/// Whether `source` (a crate root) has the inner attribute
/// `#![forbid(..., unsafe_code, ...)]`.
pub(super) fn forbids_unsafe(source: &str) -> Result<bool, String> {
    let tokens: Vec<TokenTree> = TokenStream::from_str(source)
        .map_err(|e| e.to_string())?
        .into_iter()
        .collect();
    Ok(tokens.windows(3).any(|w| match w {
        [
            TokenTree::Punct(hash),
            TokenTree::Punct(bang),
            TokenTree::Group(attr),
        ] => {
            let inner: Vec<TokenTree> = attr.stream().into_iter().collect();
            hash.as_char() == '#'
                && bang.as_char() == '!'
                && attr.delimiter() == Delimiter::Bracket
                && matches!(
                    inner.as_slice(),
                    [TokenTree::Ident(name), TokenTree::Group(args)]
                        if name == "forbid"
                            && args.stream().into_iter().any(
                                |t| matches!(t, TokenTree::Ident(i) if i == "unsafe_code")
                            )
                )
        }
        _ => false,
    }))
}

/// One source file of a crate's `src/`.
#[derive(Debug)]
pub(super) struct SourceFile {
    pub(super) krate: String,
    /// Relative to the crate's `src/`, with `/`.
    pub(super) path: String,
    pub(super) text: String,
    /// Whether it is the root of a library or a binary target.
    pub(super) is_root: bool,
}

/// What breaks the list: `unsafe` outside it, a listed crate or module
/// with no such file, a crate that should forbid unsafe code and does not
/// (in every root).
pub(super) fn violations(allowed: &Allowed, files: &[SourceFile]) -> Vec<String> {
    let mut bad = Vec::new();
    for file in files {
        let module = module_of(&file.path);
        match unsafe_lines(&file.text) {
            Ok(lines) if !lines.is_empty() && !allowed.permits(&file.krate, &module) => {
                bad.push(format!(
                    "{} src/{} (module `{module}`) has `unsafe` at line(s) {lines:?}, but \
                     docs/ARCHITECTURE.md does not list it",
                    file.krate, file.path
                ));
            }
            Err(e) => bad.push(format!("{} src/{}: cannot lex: {e}", file.krate, file.path)),
            Ok(_) => {}
        }
        if file.is_root && allowed.forbid.contains(&file.krate) {
            match forbids_unsafe(&file.text) {
                Ok(true) => {}
                Ok(false) => bad.push(format!(
                    "{} src/{} lacks #![forbid(unsafe_code)], which docs/ARCHITECTURE.md claims",
                    file.krate, file.path
                )),
                Err(e) => bad.push(format!("{} src/{}: cannot lex: {e}", file.krate, file.path)),
            }
        }
    }
    for (krate, modules) in &allowed.modules {
        let of_crate = || files.iter().filter(|f| &f.krate == krate);
        if of_crate().next().is_none() {
            bad.push(format!(
                "docs/ARCHITECTURE.md lists crate {krate}, which has no sources"
            ));
        }
        for module in modules {
            if !of_crate().any(|f| module_of(&f.path) == *module) {
                bad.push(format!(
                    "docs/ARCHITECTURE.md lists {krate} module `{module}`, which does not exist"
                ));
            }
        }
    }
    for krate in &allowed.forbid {
        if !files.iter().any(|f| &f.krate == krate && f.is_root) {
            bad.push(format!(
                "docs/ARCHITECTURE.md says {krate} forbids unsafe code, but it has no crate root"
            ));
        }
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# x\n\n## Cross-cutting concerns\n\n### Safety\n\nThe list:\n\n```text\n\
        # comment\n\
        a-sys: *\n\
        a-mr:  buffer vm/run_dir   # why\n\
        forbid(unsafe_code): a-node\n\
        ```\n\n- prose\n\n## Later\n\n```text\nb: c\n```\n";

    fn file(krate: &str, path: &str, text: &str) -> SourceFile {
        SourceFile {
            krate: krate.into(),
            path: path.into(),
            text: text.into(),
            is_root: path == "lib.rs" || path.starts_with("bin/"),
        }
    }

    #[test]
    fn the_list_is_read_from_the_cross_cutting_block() {
        let allowed = Allowed::from_document(DOC).unwrap();
        assert_eq!(allowed.modules["a-sys"], Vec::<String>::new());
        assert_eq!(allowed.modules["a-mr"], ["buffer", "vm/run_dir"]);
        assert_eq!(allowed.forbid, ["a-node"]);
        assert!(!allowed.modules.contains_key("b"));
        assert!(Allowed::from_document("## Cross-cutting concerns\n\nno block\n").is_err());
        assert!(Allowed::from_document("## Cross-cutting concerns\n```\na b\n```\n").is_err());
        assert!(Allowed::from_document("## Cross-cutting concerns\n```\na: * b\n```\n").is_err());
    }

    #[test]
    fn only_the_keyword_counts() {
        let source = "// unsafe in a comment\n/// unsafe in a doc\nconst S: &str = \"unsafe\";\n\
                      const R: &str = r#\"unsafe\"#;\nfn f() { let c = 'u'; }\n\
                      unsafe impl Send for X {}\nfn g() {\n    unsafe { h() }\n}\n";
        assert_eq!(unsafe_lines(source).unwrap(), [6, 8]);
        assert!(unsafe_lines("fn f() {").is_err());
        assert_eq!(module_of("vm/mod.rs"), "vm");
        assert_eq!(module_of("bin/ferrovia-rank.rs"), "bin/ferrovia-rank");
    }

    #[test]
    fn forbid_is_found_as_an_attribute_only() {
        assert!(forbids_unsafe("//! doc\n#![forbid(unsafe_code)]\nmod m;").unwrap());
        assert!(forbids_unsafe("#![forbid(missing_docs, unsafe_code)]").unwrap());
        assert!(!forbids_unsafe("// #![forbid(unsafe_code)]\n#![deny(unsafe_code)]").unwrap());
        assert!(!forbids_unsafe("#[forbid(unsafe_code)]\nfn f() {}").unwrap());
    }

    #[test]
    fn catches_unsafe_outside_the_list_and_a_missing_forbid() {
        let allowed = Allowed::from_document(DOC).unwrap();
        let good = [
            file("a-sys", "lib.rs", "unsafe extern \"C\" {}"),
            file("a-mr", "buffer.rs", "unsafe fn f() {}"),
            file("a-mr", "vm/run_dir.rs", "fn g() { unsafe { f() } }"),
            file("a-mr", "lib.rs", "//! unsafe only in words\n"),
            file("a-node", "lib.rs", "#![forbid(unsafe_code)]"),
            file("a-node", "bin/rank.rs", "#![forbid(unsafe_code)]"),
        ];
        assert_eq!(violations(&allowed, &good), Vec::<String>::new());

        let mut bad = good;
        bad[3].text = "unsafe impl Send for X {}".into();
        bad[5].text = "fn main() {}".into();
        let found = violations(&allowed, &bad);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(
            found[0].contains("a-mr src/lib.rs (module `lib`)"),
            "{found:?}"
        );
        assert!(
            found[1].contains("a-node src/bin/rank.rs lacks"),
            "{found:?}"
        );
    }

    #[test]
    fn catches_a_list_that_names_what_is_gone() {
        let allowed = Allowed::from_document(DOC).unwrap();
        let files = [file("a-mr", "buffer.rs", "")];
        let found = violations(&allowed, &files);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found.iter().any(|f| f.contains("crate a-sys")), "{found:?}");
        assert!(
            found.iter().any(|f| f.contains("module `vm/run_dir`")),
            "{found:?}"
        );
        assert!(
            found.iter().any(|f| f.contains("a-node forbids")),
            "{found:?}"
        );
    }
}
