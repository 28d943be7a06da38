//! cargo-fuzz target `config`: the body is `xce_fuzzing::config::run`.

#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xce_fuzzing::config::run(data));
