//! Generates the UCX (ucp) bindings at build time from the headers of the
//! UCX the crate links: the system's (`pkg-config ucx`), or with the
//! `vendored` feature the UCX release `ucx-rs` builds and links statically
//! (its headers come from that crate's `links` metadata,
//! `DEP_UCX_RS_INCLUDE`). `ucp_init` is static inline: the crate calls
//! `ucp_init_version` instead, and rewrites the `UCS_PTR_*` macros in Rust,
//! so no C wrappers are needed.

use std::env;
use std::path::PathBuf;
use std::process::exit;

fn fail(msg: &str) -> ! {
    eprintln!(
        "error: ferrovia-ucx: {msg}; install with: apt-get install libucx-dev clang libclang-dev pkg-config (or run `cargo xtask deps`)"
    );
    exit(1);
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let include_paths = if env::var_os("CARGO_FEATURE_VENDORED").is_some() {
        // ucx-rs emits the link lines; only its headers are needed here.
        match env::var_os("DEP_UCX_RS_INCLUDE") {
            Some(dir) if !dir.is_empty() => vec![PathBuf::from(dir)],
            _ => fail("the `vendored` feature is on but ucx-rs gave no include directory"),
        }
    } else {
        pkg_config::Config::new()
            .probe("ucx")
            .unwrap_or_else(|e| {
                fail(&format!(
                    "pkg-config could not find ucx ({})",
                    e.to_string().lines().next().unwrap_or("")
                ))
            })
            .include_paths
    };
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let mut builder = bindgen::Builder::default()
        .header(manifest.join("wrapper.h").to_string_lossy())
        .allowlist_function("ucp_.*")
        .allowlist_function("ucs_status_string")
        .allowlist_type("ucp_.*")
        .allowlist_type("ucs_status_t")
        .allowlist_var("UCP_.*")
        .allowlist_var("UCS_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for p in &include_paths {
        builder = builder.clang_arg(format!("-I{}", p.display()));
    }
    std::panic::set_hook(Box::new(|_| {}));
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    let _ = std::panic::take_hook();
    match generated {
        Ok(Ok(b)) => b
            .write_to_file(out.join("ucx_bindings.rs"))
            .unwrap_or_else(|e| fail(&format!("cannot write bindings: {e}"))),
        Ok(Err(e)) => fail(&format!("bindgen could not parse the UCX headers: {e}")),
        Err(_) => fail("bindgen could not load libclang"),
    }
}
