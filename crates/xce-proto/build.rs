//! Regenerates the committed Cap'n Proto code, only with the `regen` feature, so that a fresh
//! machine builds without the `capnp` compiler.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "regen")]
    regen();
}

#[cfg(feature = "regen")]
fn regen() {
    println!("cargo:rerun-if-changed=schema");
    println!("cargo:rerun-if-env-changed=XCE_PROTO_OUT");
    let out = std::env::var("XCE_PROTO_OUT").unwrap_or_else(|_| "src/generated".to_string());
    std::fs::create_dir_all(&out).expect("create the generated-code directory");
    capnpc::CompilerCommand::new()
        .src_prefix("schema")
        .file("schema/xce.capnp")
        .output_path(&out)
        .run()
        .expect("compile schema/xce.capnp (is Debian's `capnproto` installed?)");
}
