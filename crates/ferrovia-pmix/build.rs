//! Generates the PMIx bindings at build time from the installed headers
//! (`pkg-config pmix`: Debian's `libpmix-dev`).
//!
//! - Types and constants come from bindgen over `wrapper.h`, so layouts
//!   match the installed headers.
//! - The exported functions are loaded at run time (bindgen's
//!   `dynamic_library_name`), so nothing links libpmix: a binary built
//!   with PMIx support starts on a host without it.

use std::env;
use std::path::PathBuf;
use std::process::exit;

const INSTALL_HINT: &str =
    "apt-get install libpmix-dev clang libclang-dev pkg-config (or run `cargo xtask deps`)";

/// The PMIx client functions ferrovia loads at run time.
const FUNCTIONS: &[&str] = &[
    "PMIx_Init",
    "PMIx_Finalize",
    "PMIx_Put",
    "PMIx_Commit",
    "PMIx_Fence_nb",
    "PMIx_Get",
    "PMIx_Value_destruct",
    "PMIx_Error_string",
];

fn fail(msg: &str) -> ! {
    eprintln!("error: ferrovia-pmix: {msg}; install with: {INSTALL_HINT}");
    exit(1);
}

fn generate(builder: bindgen::Builder, out: PathBuf) {
    std::panic::set_hook(Box::new(|_| {}));
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    let _ = std::panic::take_hook();
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(&format!("bindgen could not parse pmix.h: {e}")),
        Err(_) => fail("bindgen could not load libclang"),
    };
    bindings
        .write_to_file(&out)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display())));
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    // Headers only: the library is loaded at run time.
    let lib = pkg_config::Config::new()
        .atleast_version("4")
        .cargo_metadata(false)
        .probe("pmix")
        .unwrap_or_else(|e| {
            let first = e.to_string().lines().next().unwrap_or_default().to_owned();
            fail(&format!(
                "pkg-config could not find pmix 4 or later ({first})"
            ))
        });
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let base = || {
        let mut b = bindgen::Builder::default()
            .header("wrapper.h")
            .derive_default(true)
            .layout_tests(false)
            .generate_comments(false)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
        for p in &lib.include_paths {
            b = b.clang_arg(format!("-I{}", p.display()));
        }
        b
    };
    generate(
        base()
            .allowlist_type("pmix_(proc|info|value|byte_object|status|scope|op_cbfunc)_t")
            .allowlist_var("PMIX_(SUCCESS|OPERATION_SUCCEEDED|ERR_TIMEOUT|ERR_NOT_FOUND|BOOL|INT|UINT32|BYTE_OBJECT|GLOBAL|MAX_KEYLEN|MAX_NSLEN|JOB_SIZE|LOCAL_SIZE|COLLECT_DATA|OPTIONAL|TIMEOUT)"),
        out.join("types.rs"),
    );
    let mut functions = base()
        .allowlist_recursively(false)
        .dynamic_library_name("PmixLib")
        .dynamic_link_require_all(true);
    for f in FUNCTIONS {
        functions = functions.allowlist_function(f);
    }
    generate(functions, out.join("functions.rs"));
}
