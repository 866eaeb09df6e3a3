//! Generates the libibverbs bindings at build time from the system headers.
//!
//! - Types and constants come from bindgen over `wrapper.h`, so layouts
//!   always match the installed headers.
//! - Exported functions are loaded at run time (bindgen's
//!   `dynamic_library_name`: a struct of function pointers filled by
//!   `dlopen`/`dlsym`), so a binary built with verbs support still starts
//!   on a host without `libibverbs.so.1` and can fall back to UCX.
//! - Static-inline data-path verbs (`ibv_post_send`, `ibv_poll_cq`,
//!   `ibv_wr_*`, ...) have no symbol in `libibverbs.so`; bindgen's
//!   `wrap_static_fns` emits C wrappers for them, compiled with `cc`
//!   (hand-ported inlines drift from rdma-core). Only inlines that call
//!   through the context's function pointers are wrapped: the object then
//!   references no libibverbs symbol, and nothing links the library.

use std::env;
use std::path::{Path, PathBuf};
use std::process::exit;

const INSTALL_HINT: &str = "apt-get install libibverbs-dev librdmacm-dev clang libclang-dev pkg-config (or run `cargo xtask deps`)";

/// Exported libibverbs functions ferrovia loads at run time.
const VERBS_FUNCTIONS: &[&str] = &[
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_get_device_name",
    "ibv_get_device_guid",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "ibv_query_port",
    "_ibv_query_gid_ex",
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_reg_mr",
    "ibv_reg_mr_iova",
    "ibv_dereg_mr",
    "ibv_create_comp_channel",
    "ibv_destroy_comp_channel",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_get_cq_event",
    "ibv_ack_cq_events",
    "ibv_create_qp",
    "ibv_destroy_qp",
    "ibv_modify_qp",
    "ibv_query_qp",
    "ibv_create_srq",
    "ibv_modify_srq",
    "ibv_query_srq",
    "ibv_destroy_srq",
    "ibv_get_async_event",
    "ibv_ack_async_event",
    "ibv_event_type_str",
    "ibv_wc_status_str",
    // Extended QPs (a cast inside libibverbs: only valid for a QP made by
    // ibv_create_qp_ex), datagram address handles, dma-buf registration.
    "ibv_qp_to_qp_ex",
    "ibv_create_ah",
    "ibv_destroy_ah",
    "ibv_reg_dmabuf_mr",
];

/// Static inlines that only call through function pointers of the
/// context, QP or CQ (no exported symbol), so their wrappers need no
/// libibverbs at link time.
const POINTER_ONLY_INLINES: &str = "ibv_(post_send|post_recv|post_srq_recv|poll_cq|req_notify_cq|wr_.*|start_poll|next_poll|end_poll|wc_read_.*|create_cq_ex|cq_ex_to_cq|alloc_mw|dealloc_mw|bind_mw|inc_rkey|advise_mr)";

/// ferrovia's own C shims (`shims.c`): extended verbs whose inlines fall
/// back to exported functions, kept to their provider path.
const SHIMS: &str = "ferrovia_(create_qp_ex|query_device_ex)";

fn fail(msg: &str) -> ! {
    // One line a user can act on; cargo shows build-script stderr on failure.
    eprintln!("error: ferrovia-sys: {msg}; install with: {INSTALL_HINT}");
    exit(1);
}

fn probe(lib: &str) -> pkg_config::Library {
    // Headers only: the library itself is loaded at run time.
    match pkg_config::Config::new()
        .atleast_version("1.0")
        .cargo_metadata(false)
        .probe(lib)
    {
        Ok(l) => l,
        Err(e) => {
            let first = e.to_string().lines().next().unwrap_or_default().to_owned();
            fail(&format!("pkg-config could not find {lib} ({first})"))
        }
    }
}

/// The bindgen settings both passes share: the headers and the enums.
fn base(header: &Path, include_paths: &[PathBuf], rdmacm: bool) -> bindgen::Builder {
    let mut b = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .newtype_enum("ibv_wc_status")
        .newtype_enum("ibv_wc_opcode")
        .newtype_enum("ibv_qp_state")
        .newtype_enum("ibv_port_state")
        .newtype_enum("ibv_mtu")
        .newtype_enum("ibv_gid_type")
        .newtype_enum("ibv_event_type")
        .newtype_enum("rdma_cm_event_type")
        .newtype_enum("rdma_port_space")
        .bitfield_enum("ibv_access_flags")
        .bitfield_enum("ibv_send_flags")
        .bitfield_enum("ibv_qp_attr_mask")
        .bitfield_enum("ibv_wc_flags")
        .bitfield_enum("ibv_srq_attr_mask")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .layout_tests(false)
        .generate_comments(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    if rdmacm {
        b = b.clang_arg("-DFERROVIA_SYS_RDMACM");
    }
    for p in include_paths {
        b = b.clang_arg(format!("-I{}", p.display()));
    }
    b
}

/// Runs bindgen, turning its panic on a missing libclang into one line.
fn generate(builder: bindgen::Builder, out: &Path) {
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
        .write_to_file(out)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", out.display())));
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=shims.h");
    println!("cargo:rerun-if-changed=shims.c");
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

    // Pass 1: types, constants and the pointer-only inlines.
    let mut types = base(&header, &include_paths, rdmacm)
        .allowlist_type("_*ibv_.*")
        .allowlist_var("_*IBV_.*")
        .allowlist_var("_*ibv_.*")
        // ibv_advise_mr's flags are the kernel ABI's names.
        .allowlist_var("IB_UVERBS_ADVISE_MR_.*")
        .allowlist_type("ib_uverbs_advise_mr_flag")
        .allowlist_function(POINTER_ONLY_INLINES)
        .allowlist_function(SHIMS)
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers);
    if rdmacm {
        types = types.allowlist_type("rdma_.*").allowlist_var("RDMA_.*");
    }
    generate(types, &out_dir.join("types.rs"));

    // Pass 2: the exported functions, as a library loaded at run time.
    let mut functions = base(&header, &include_paths, rdmacm)
        .allowlist_recursively(false)
        .dynamic_library_name("Verbs")
        .dynamic_link_require_all(true);
    for f in VERBS_FUNCTIONS {
        functions = functions.allowlist_function(f);
    }
    generate(functions, &out_dir.join("verbs_fns.rs"));
    if rdmacm {
        let cm = base(&header, &include_paths, rdmacm)
            .allowlist_recursively(false)
            .allowlist_function("rdma_.*")
            .dynamic_library_name("RdmaCm")
            .dynamic_link_require_all(true);
        generate(cm, &out_dir.join("rdmacm_fns.rs"));
    }

    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .file(manifest_dir.join("shims.c"))
        .include(&manifest_dir)
        .warnings(false);
    if rdmacm {
        cc.define("FERROVIA_SYS_RDMACM", None);
    }
    for p in &include_paths {
        cc.include(p);
    }
    cc.compile("ferrovia_sys_static_wrappers");
}
