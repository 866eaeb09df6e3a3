//! Generates the libibverbs bindings at build time from the system headers.
//!
//! Static-inline verbs (`ibv_post_send`, `ibv_poll_cq`, `ibv_wr_*`, ...) have
//! no symbol in `libibverbs.so`; bindgen's `wrap_static_fns` emits a C file of
//! thin wrappers that we compile with `cc`, so they always match the headers
//! actually installed (hand-ported inlines drift from rdma-core).

use std::env;
use std::path::PathBuf;
use std::process::exit;

const INSTALL_HINT: &str = "apt-get install libibverbs-dev librdmacm-dev clang libclang-dev pkg-config (or run `cargo xtask deps`)";

fn fail(msg: &str) -> ! {
    // One line a user can act on; cargo shows build-script stderr on failure.
    eprintln!("error: ferrovia-sys: {msg}; install with: {INSTALL_HINT}");
    exit(1);
}

fn probe(lib: &str) -> pkg_config::Library {
    match pkg_config::Config::new().atleast_version("1.0").probe(lib) {
        Ok(l) => l,
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_owned();
            fail(&format!("pkg-config could not find {lib} ({first})"))
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FERROVIA_SYS_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let rdmacm = env::var_os("CARGO_FEATURE_RDMACM").is_some();
    let mut include_paths = probe("libibverbs").include_paths;
    if rdmacm {
        include_paths.extend(probe("librdmacm").include_paths);
    }
    if let Some(extra) = env::var_os("FERROVIA_SYS_INCLUDE_DIR") {
        include_paths.insert(0, PathBuf::from(extra));
    }

    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let header = manifest_dir.join("wrapper.h");
    let wrappers = out_dir.join("static_wrappers");

    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_function("_*ibv_.*")
        .allowlist_type("_*ibv_.*")
        .allowlist_var("_*IBV_.*")
        .allowlist_var("_*ibv_.*")
        .newtype_enum("ibv_wc_status")
        .newtype_enum("ibv_wc_opcode")
        .newtype_enum("ibv_qp_state")
        .newtype_enum("ibv_port_state")
        .newtype_enum("ibv_mtu")
        .newtype_enum("ibv_gid_type")
        .bitfield_enum("ibv_access_flags")
        .bitfield_enum("ibv_send_flags")
        .bitfield_enum("ibv_qp_attr_mask")
        .bitfield_enum("ibv_wc_flags")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(false)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    if rdmacm {
        builder = builder
            .clang_arg("-DFERROVIA_SYS_RDMACM")
            .allowlist_function("rdma_.*")
            .allowlist_type("rdma_.*")
            .allowlist_var("RDMA_.*");
    }
    for p in &include_paths {
        builder = builder.clang_arg(format!("-I{}", p.display()));
    }

    // bindgen panics when libclang cannot be loaded; turn that into one line.
    std::panic::set_hook(Box::new(|_| {}));
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    let _ = std::panic::take_hook();
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(&format!(
            "bindgen could not parse the rdma-core headers: {e}"
        )),
        Err(_) => fail("bindgen could not load libclang"),
    };
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot write bindings.rs: {e}")));

    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .include(&manifest_dir)
        .warnings(false);
    if rdmacm {
        cc.define("FERROVIA_SYS_RDMACM", None);
    }
    for p in &include_paths {
        cc.include(p);
    }
    cc.compile("ferrovia_sys_static_wrappers");
    // The wrappers call into libibverbs: it must follow them on the link line.
    println!("cargo:rustc-link-lib=ibverbs");
    if rdmacm {
        println!("cargo:rustc-link-lib=rdmacm");
    }
}
