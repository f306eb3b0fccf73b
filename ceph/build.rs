//! With the `regen-bindings` feature: generates bindings for the parts of
//! librados and librbd this crate uses, as a table of functions loaded from
//! librbd.so.1 at run time (librados comes in as its dependency), from the
//! installed headers. Without it the crate uses the bindings kept in
//! `src/ffi.rs`, so it builds without Ceph's headers or libclang, and the
//! target runs, and serves files and block devices, on machines without the
//! Ceph libraries.

#[cfg(not(feature = "regen-bindings"))]
fn main() {}

#[cfg(feature = "regen-bindings")]
fn main() {
    println!("cargo:rerun-if-changed=src/wrapper.h");
    let found = ["/usr/include", "/usr/local/include"]
        .iter()
        .any(|d| std::path::Path::new(d).join("rbd/librbd.h").exists());
    if !found {
        println!(
            "cargo:warning=rbd/librbd.h not found: install librbd-dev (integration/setup does)"
        );
    }
    let bindings = bindgen::Builder::default()
        .header("src/wrapper.h")
        .allowlist_function(
            "rados_(create2|conf_read_file|conf_parse_env|conf_set|conf_get|connect|shutdown|cluster_fsid|ioctx_create|ioctx_destroy|pool_lookup|blocklist_add|getaddrs|wait_for_latest_osdmap|mon_command)",
        )
        .allowlist_function(
            "rados_(read|get_last_version|create_write_op|release_write_op|write_op_(assert_version|create|write_full|operate)|watch3|watch_check|unwatch2|watch_flush|notify2|notify_ack|buffer_free)",
        )
        .allowlist_function(
            "rbd_(open|close|get_size|get_stripe_unit|get_id|flush|read|compare_and_write|config_image_list|config_image_list_cleanup|aio_(create_completion|get_return_value|release|read|write|flush|discard|write_zeroes))",
        )
        .dynamic_library_name("LibRbd")
        .size_t_is_usize(true)
        .layout_tests(false)
        .generate()
        .expect("generating librados/librbd bindings (needs librbd-dev and libclang)");
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("ffi.rs");
    bindings.write_to_file(out).expect("writing ffi.rs");
}
