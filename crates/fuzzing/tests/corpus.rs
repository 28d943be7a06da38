//! Every committed corpus input, seeds and findings alike, runs through its target on
//! stable: a crash fuzzing once found stays fixed. The seeds must be current.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

#[test]
fn the_seeds_are_committed_and_current() {
    let write = std::env::var_os("XCE_FUZZ_WRITE_SEEDS").is_some();
    for (target, name, bytes) in xce_fuzzing::seeds::all() {
        let path = corpus_dir(target).join(&name);
        if write {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
            continue;
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (XCE_FUZZ_WRITE_SEEDS=1 cargo test -p xce-fuzzing writes the seeds)",
                path.display()
            )
        });
        assert!(
            committed == bytes,
            "{} is stale: the encoding changed (XCE_FUZZ_WRITE_SEEDS=1 cargo test -p xce-fuzzing rewrites the seeds)",
            path.display()
        );
    }
}

#[test]
fn every_corpus_input_passes_its_target() {
    for (target, run) in xce_fuzzing::TARGETS {
        let dir = corpus_dir(target);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{} holds no input", dir.display());
        for path in inputs {
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{target}: {} fails", path.display());
        }
    }
}
