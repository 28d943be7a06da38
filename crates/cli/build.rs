//! Links the unwinder into `xce` (libgcc_eh, as `-static-libgcc` does for C programs) so the
//! process does not load libgcc_s, whose constructor probes the CPU with `cpuid`: about
//! 0.12 ms of every one-shot command on a VM where each `cpuid` traps to the hypervisor.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.ends_with("-linux-gnu") {
        println!("cargo:rustc-link-lib=static=gcc_eh");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
