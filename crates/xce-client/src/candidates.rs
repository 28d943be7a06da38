//! The candidate-list converter (DESIGN §5.1): `[name=]host:port[,[name=]host:port...]`.
//!
//! One parser for every place a list of controllers is given (`--peers`, `XCE_PEERS`, the
//! apiserver's `backend.peers`). A single `host:port` is a list of one; there is no separate
//! single-host path anywhere.

use std::collections::HashSet;
use std::fmt;
use std::net::Ipv6Addr;

/// The most controller candidates a cluster may have. Raft majorities beyond seven buy no
/// availability and cost latency; every limit on candidates refers to this one constant.
pub const MAX_CANDIDATES: usize = 7;

/// One controller candidate: its name (as given, or `host:port` when none was given) and its
/// client address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Candidate {
    /// `host:port`, with IPv6 hosts in brackets, ready for a socket connect.
    pub fn addr(&self) -> String {
        format_addr(&self.host, self.port)
    }
}

impl fmt::Display for Candidate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.addr())
    }
}

/// Formats a host and port as a connectable address, bracketing IPv6 literals.
pub fn format_addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Why a candidate list was rejected. `entry` is the offending text exactly as given, and
/// `position` its 1-based place in the list, so the operator can find it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CandidateError {
    #[error("the candidate list is empty")]
    Empty,
    #[error("candidate {position} is empty (stray comma?)")]
    EmptyEntry { position: usize },
    #[error("candidate {position} {entry:?}: {problem}")]
    BadEntry {
        position: usize,
        entry: String,
        problem: String,
    },
    #[error("candidate {position} {entry:?}: duplicate name {name:?}")]
    DuplicateName {
        position: usize,
        entry: String,
        name: String,
    },
    #[error("candidate {position} {entry:?}: duplicate address {addr}")]
    DuplicateAddr {
        position: usize,
        entry: String,
        addr: String,
    },
    #[error("too many candidates: {count} given, at most {MAX_CANDIDATES} allowed")]
    TooMany { count: usize },
}

/// Parses and validates a candidate list.
pub fn parse_candidates(text: &str) -> Result<Vec<Candidate>, CandidateError> {
    if text.trim().is_empty() {
        return Err(CandidateError::Empty);
    }
    let entries: Vec<&str> = text.split(',').collect();
    if entries.len() > MAX_CANDIDATES {
        return Err(CandidateError::TooMany {
            count: entries.len(),
        });
    }
    let mut names = HashSet::new();
    let mut addrs = HashSet::new();
    let mut out = Vec::with_capacity(entries.len());
    for (i, raw) in entries.iter().enumerate() {
        let position = i + 1;
        let entry = raw.trim();
        if entry.is_empty() {
            return Err(CandidateError::EmptyEntry { position });
        }
        let bad = |problem: &str| CandidateError::BadEntry {
            position,
            entry: entry.to_string(),
            problem: problem.to_string(),
        };
        let candidate = parse_entry(entry).map_err(|p| bad(&p))?;
        if !names.insert(candidate.name.clone()) {
            return Err(CandidateError::DuplicateName {
                position,
                entry: entry.to_string(),
                name: candidate.name,
            });
        }
        let addr = candidate.addr().to_ascii_lowercase();
        if !addrs.insert(addr.clone()) {
            return Err(CandidateError::DuplicateAddr {
                position,
                entry: entry.to_string(),
                addr,
            });
        }
        out.push(candidate);
    }
    Ok(out)
}

/// Formats a list back into the text `parse_candidates` accepts: an unnamed candidate (its
/// name is its address) is written as its bare address, which is how it was given.
pub fn format_candidates(list: &[Candidate]) -> String {
    list.iter()
        .map(|c| {
            let addr = c.addr();
            if c.name == addr {
                addr
            } else {
                format!("{}={addr}", c.name)
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn parse_entry(entry: &str) -> Result<Candidate, String> {
    let (name, addr) = match entry.split_once('=') {
        Some((name, addr)) => {
            let name = name.trim();
            validate_name(name)?;
            (Some(name), addr.trim())
        }
        None => (None, entry),
    };
    let (host, port) = split_host_port(addr)?;
    let name = name.map_or_else(|| format_addr(&host, port), str::to_string);
    Ok(Candidate { name, host, port })
}

fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty name before '='".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(format!(
            "name {name:?} may only hold letters, digits, '-', '_' and '.'"
        ));
    }
    Ok(())
}

fn split_host_port(addr: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("IPv6 address without closing ']'")?;
        host.parse::<Ipv6Addr>()
            .map_err(|_| format!("{host:?} is not an IPv6 address"))?;
        let port = after
            .strip_prefix(':')
            .ok_or("missing ':port' after the IPv6 address")?;
        (host.to_string(), port)
    } else {
        let (host, port) = addr.rsplit_once(':').ok_or("missing ':port'")?;
        if host.contains(':') {
            return Err("IPv6 addresses must be written in brackets, like [::1]:7101".into());
        }
        validate_hostname(host)?;
        (host.to_string(), port)
    };
    Ok((host, parse_port(port)?))
}

fn validate_hostname(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("empty host".into());
    }
    if host.len() > 253
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(format!("{host:?} is not a host name or IPv4 address"));
    }
    Ok(())
}

fn parse_port(port: &str) -> Result<u16, String> {
    if port.is_empty() {
        return Err("empty port".into());
    }
    if !port.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("port {port:?} is not a number"));
    }
    match port.parse::<u32>() {
        Ok(p @ 1..=65535) => Ok(p as u16),
        _ => Err(format!("port {port} is out of range 1-65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check_ok(input: &str, expected: &[(&str, &str, u16)]) {
        let got = parse_candidates(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
        let got: Vec<_> = got
            .iter()
            .map(|c| (c.name.as_str(), c.host.as_str(), c.port))
            .collect();
        assert_eq!(got, expected, "{input:?}");
    }

    fn check_err(input: &str, expected_fragment: &str) {
        let err = parse_candidates(input).expect_err(input).to_string();
        assert!(
            err.contains(expected_fragment),
            "{input:?}: error {err:?} does not mention {expected_fragment:?}"
        );
    }

    #[test]
    fn accepts_the_documented_forms() {
        check_ok("127.0.0.1:7101", &[("127.0.0.1:7101", "127.0.0.1", 7101)]);
        check_ok(
            "c1=127.0.0.1:7101,c2=10.0.0.2:7102",
            &[("c1", "127.0.0.1", 7101), ("c2", "10.0.0.2", 7102)],
        );
        check_ok("c1=[::1]:7101", &[("c1", "::1", 7101)]);
        check_ok("[fe80::1]:1", &[("[fe80::1]:1", "fe80::1", 1)]);
        check_ok(
            " a=ctl-1.example.org:65535 , b=ctl2:7101 ",
            &[("a", "ctl-1.example.org", 65535), ("b", "ctl2", 7101)],
        );
    }

    #[test]
    fn rejections_name_the_offending_entry() {
        check_err("", "empty");
        check_err("c1=h:1,,c3=h:3", "candidate 2 is empty");
        check_err("c1=h:1,", "candidate 2 is empty");
        check_err("c1=h:1,c2=h", "\"c2=h\": missing ':port'");
        check_err("c1=h:0", "\"c1=h:0\": port 0 is out of range");
        check_err("c1=h:70000", "out of range");
        check_err("c1=h:7a", "port \"7a\" is not a number");
        check_err("c1=h:1,c1=g:2", "duplicate name \"c1\"");
        check_err("c1=h:1,c2=h:1", "\"c2=h:1\": duplicate address h:1");
        check_err("=h:1", "empty name");
        check_err("c 1=h:1", "may only hold");
        check_err("::1:7101", "brackets");
        check_err("[::1:7101", "closing");
        check_err("[zz]:1", "not an IPv6");
        check_err(":7101", "empty host");
        check_err(
            "a:1,b:2,c:3,d:4,e:5,f:6,g:7,h:8",
            "too many candidates: 8 given, at most 7",
        );
    }

    fn candidate() -> impl Strategy<Value = Candidate> {
        let host = prop_oneof![
            "[a-z][a-z0-9-]{0,12}(\\.[a-z][a-z0-9-]{0,5})?",
            (0u8..=255, 0u8..=255).prop_map(|(a, b)| format!("10.0.{a}.{b}")),
            Just("::1".to_string()),
        ];
        ("[a-z][a-z0-9_.-]{0,8}", host, 1u16..).prop_map(|(name, host, port)| Candidate {
            name,
            host,
            port,
        })
    }

    proptest! {
        #[test]
        fn valid_lists_round_trip(list in prop::collection::vec(candidate(), 1..=MAX_CANDIDATES)) {
            let (mut names, mut addrs) = (HashSet::new(), HashSet::new());
            let list: Vec<Candidate> = list
                .into_iter()
                .filter(|c| names.insert(c.name.clone()) && addrs.insert(c.addr()))
                .collect();
            let text = format_candidates(&list);
            prop_assert_eq!(parse_candidates(&text), Ok(list));
        }

        #[test]
        fn arbitrary_input_never_panics_and_errors_quote_their_entry(text in "[a-z0-9=:,\\[\\] .]{0,40}") {
            match parse_candidates(&text) {
                Ok(list) => {
                    prop_assert!(!list.is_empty() && list.len() <= MAX_CANDIDATES);
                }
                Err(CandidateError::BadEntry { entry, .. })
                | Err(CandidateError::DuplicateName { entry, .. })
                | Err(CandidateError::DuplicateAddr { entry, .. }) => {
                    prop_assert!(text.contains(&entry));
                }
                Err(_) => {}
            }
        }
    }
}
