//! Every daemon's YAML config: the first byte picks the daemon, the rest is the file. Any
//! text is a config or an error naming the problem; a config that is accepted yields the
//! timings each daemon derives from it without overflowing.

use std::path::Path;

/// Fuzzes the controller's, the scheduler's, the worker's and the apiserver's config files.
pub fn run(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 4 {
        0 => controller(text),
        1 => scheduler(text),
        2 => worker(text),
        _ => apiserver(text),
    }
}

fn controller(text: &str) {
    use xce_controller::config::{parse_file, Config};
    let Ok(file) = parse_file(text) else { return };
    let peers = "c1=127.0.0.1:7101,c2=127.0.0.1:7102,c3=127.0.0.1:7103";
    let Ok(config) = Config::from_file("c1", peers, Path::new("/nonexistent"), file) else {
        return;
    };
    let _ = config.primary_lease();
    let _ = config.peer_budget();
    let _ = config.election_timing();
    let _ = config.openraft();
}

fn scheduler(text: &str) {
    use xce_scheduler::config::{parse_file, resolve, Overrides};
    let Ok(file) = parse_file(text) else { return };
    let over = Overrides {
        peers: Some("c1=127.0.0.1:7101".into()),
        ..Overrides::default()
    };
    let _ = resolve(Overrides::default(), file.clone());
    let _ = resolve(over, file);
}

fn worker(text: &str) {
    use xce_worker::config::{parse_file, resolve, Overrides};
    let Ok(file) = parse_file(text) else { return };
    let over = Overrides {
        peers: Some("c1=127.0.0.1:7101".into()),
        name: Some("w1".into()),
        spool_dir: Some("/nonexistent".into()),
        ..Overrides::default()
    };
    let _ = resolve(Overrides::default(), file.clone());
    let _ = resolve(over, file);
}

fn apiserver(text: &str) {
    use xce_apiserver::config::{parse_file, resolve, Overrides};
    let Ok(file) = parse_file(text) else { return };
    let over = Overrides {
        peers: Some("c1=127.0.0.1:7101".into()),
        listen: Some("127.0.0.1:8080".into()),
        ..Overrides::default()
    };
    let _ = resolve(Overrides::default(), file.clone());
    let _ = resolve(over, file);
}
