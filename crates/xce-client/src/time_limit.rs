//! Time limits as Slurm users write them (`--time`): `MM`, `MM:SS`, `HH:MM:SS`, `D-HH`,
//! `D-HH:MM`, `D-HH:MM:SS`; `0`, `-1`, `UNLIMITED` and `INFINITE` mean none. Shared by every
//! front end that takes one, so `xce submit`, the HTTP API and later `sbatch` cannot differ.
//!
//! Unlike Slurm, whose resolution is the minute (it rounds `0:02` up to one minute), xce keeps
//! seconds: `0:02` is two seconds. Like Slurm, fields are not range-checked (`90` is ninety
//! minutes, `0:90` ninety seconds); a bare number is minutes.

/// The longest time limit a cluster takes unless configured otherwise (the controller's
/// `jobs.max_time_limit`): 365 days.
pub const DEFAULT_MAX_S: u32 = 365 * 86_400;

/// The forms [`parse`] accepts, for error messages.
pub const FORMS: &str =
    "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (0, -1 or UNLIMITED: no limit)";

/// Why a time limit did not parse: names the value and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("time limit {got:?}: {why}; expected {FORMS}")]
pub struct TimeLimitError {
    pub got: String,
    pub why: &'static str,
}

/// Parses a time limit into seconds; `Ok(None)` is "no limit".
pub fn parse(text: &str) -> Result<Option<u32>, TimeLimitError> {
    let err = |why| TimeLimitError {
        got: text.to_string(),
        why,
    };
    let t = text.trim();
    if t.eq_ignore_ascii_case("unlimited") || t.eq_ignore_ascii_case("infinite") || t == "-1" {
        return Ok(None);
    }
    if t.is_empty() {
        return Err(err("empty"));
    }
    let (days, rest) = match t.split_once('-') {
        Some((d, rest)) => (
            Some(number(d).ok_or(err("the days are not a number"))?),
            rest,
        ),
        None => (None, t),
    };
    let fields: Vec<&str> = rest.split(':').collect();
    let mut n = Vec::with_capacity(fields.len());
    for f in &fields {
        n.push(number(f).ok_or(err("a field is not a number"))?);
    }
    // (days, hours, minutes, seconds) by form.
    let (d, h, m, s) = match (days, n.as_slice()) {
        (None, [m]) => (0, 0, *m, 0),
        (None, [m, s]) => (0, 0, *m, *s),
        (None, [h, m, s]) => (0, *h, *m, *s),
        (Some(d), [h]) => (d, *h, 0, 0),
        (Some(d), [h, m]) => (d, *h, *m, 0),
        (Some(d), [h, m, s]) => (d, *h, *m, *s),
        _ => return Err(err("too many fields")),
    };
    let total = d
        .checked_mul(86_400)
        .and_then(|x| x.checked_add(h.checked_mul(3600)?))
        .and_then(|x| x.checked_add(m.checked_mul(60)?))
        .and_then(|x| x.checked_add(s))
        .and_then(|x| u32::try_from(x).ok())
        .ok_or(err("too long"))?;
    Ok((total > 0).then_some(total))
}

/// One field: ASCII digits only (no sign, no space, no fraction).
fn number(field: &str) -> Option<u64> {
    if field.is_empty() || field.len() > 12 || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

/// Prints seconds as squeue does: `D-HH:MM:SS` from a day on, `H:MM:SS` from an hour on,
/// else `M:SS`. [`parse`] reads every printed form back as the same seconds.
pub fn format(secs: u32) -> String {
    let (d, h, m, s) = (
        secs / 86_400,
        (secs % 86_400) / 3600,
        (secs % 3600) / 60,
        secs % 60,
    );
    if d > 0 {
        format!("{d}-{h:02}:{m:02}:{s:02}")
    } else if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

/// A limit for display: its printed form, or `UNLIMITED`.
pub fn display(limit: Option<u32>) -> String {
    limit.map_or_else(|| "UNLIMITED".to_string(), format)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn check(text: &str, secs: Option<u32>) {
        assert_eq!(parse(text), Ok(secs), "{text}");
    }

    #[test]
    fn every_slurm_form_is_read() {
        check("5", Some(300));
        check("0:02", Some(2));
        check("2:30", Some(150));
        check("1:00:00", Some(3600));
        check("1-12", Some(86_400 + 12 * 3600));
        check("1-0:30", Some(86_400 + 1800));
        check("2-03:04:05", Some(2 * 86_400 + 3 * 3600 + 4 * 60 + 5));
        // As Slurm: fields are not range-checked.
        check("90", Some(5400));
        check("0:90", Some(90));
        check("25:00:00", Some(90_000));
        for none in [
            "0",
            "0:00",
            "-1",
            "UNLIMITED",
            "unlimited",
            "INFINITE",
            "0-0",
        ] {
            check(none, None);
        }
    }

    #[test]
    fn a_malformed_limit_names_the_value_and_the_forms() {
        for bad in [
            "",
            " ",
            "1.5",
            "1h",
            "-5",
            "1-",
            "-",
            ":",
            "1::2",
            "1:2:3:4",
            "1-2:3:4:5",
            "a-1",
            "1-1-1",
            "+3",
            "99999999999999",
        ] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!("{bad:?}")) && e.contains("D-HH:MM:SS"),
                "{e}"
            );
        }
    }

    #[test]
    fn prints_as_squeue() {
        assert_eq!(format(2), "0:02");
        assert_eq!(format(1800), "30:00");
        assert_eq!(format(3600), "1:00:00");
        assert_eq!(format(86_400), "1-00:00:00");
        assert_eq!(display(None), "UNLIMITED");
    }

    proptest! {
        /// Every accepted form reads back as the same limit through its printed form.
        #[test]
        fn every_accepted_form_round_trips_through_its_printed_form(
            d in 0u64..30, h in 0u64..40, m in 0u64..100, s in 0u64..100, form in 0usize..6
        ) {
            let text = match form {
                0 => format!("{m}"),
                1 => format!("{m}:{s:02}"),
                2 => format!("{h}:{m:02}:{s:02}"),
                3 => format!("{d}-{h}"),
                4 => format!("{d}-{h}:{m}"),
                _ => format!("{d}-{h}:{m}:{s}"),
            };
            let secs = parse(&text).unwrap();
            match secs {
                None => prop_assert_eq!(parse("0").unwrap(), None),
                Some(secs) => {
                    prop_assert_eq!(parse(&format(secs)).unwrap(), Some(secs));
                }
            }
        }

        /// Whatever text comes, the parser answers without panicking, and what it accepts
        /// prints to a form it reads as the same.
        #[test]
        fn any_text_parses_or_is_refused(text in "[0-9:\\- ]{0,12}") {
            if let Ok(Some(secs)) = parse(&text) {
                prop_assert_eq!(parse(&format(secs)).unwrap(), Some(secs));
            }
        }
    }
}
