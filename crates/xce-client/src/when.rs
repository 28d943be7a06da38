//! Points in time as batch users write them: Slurm's `--begin` and `sacct --starttime` forms
//! (`now+1h`, `16:00`, `2026-12-24`, `2026-12-24T08:00`), and RFC 3339 as the HTTP API and
//! `-o json` print it. Shared by every front end, so `xce submit --begin`, `xce jobs --since`
//! and the HTTP API cannot read the same text differently. Times without a zone are the
//! local time of whoever typed them (the CLI's time zone).

use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeZone};

/// The forms [`parse`] accepts, for error messages.
pub const FORMS: &str = "now, now+N or now-N (N seconds, or N with s, m, h, d or w), today, \
     tomorrow, midnight, noon, HH:MM[:SS], YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS] (local time), or \
     RFC 3339 with a zone (2026-12-24T08:00:00Z)";

/// How a time of day alone (`16:00`, `noon`) is read: the next such time (a start: Slurm's
/// `--begin` means tomorrow once today's has passed), or the last one (a `--since`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeOfDay {
    Next,
    Last,
}

/// Why a time did not parse: names the value and the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("time {got:?}: {why}; expected {FORMS}")]
pub struct WhenError {
    pub got: String,
    pub why: String,
}

/// Parses `text` into milliseconds since the epoch, `now_ms` being now, in the local zone.
pub fn parse(text: &str, now_ms: u64, day: TimeOfDay) -> Result<u64, WhenError> {
    parse_in(&chrono::Local, text, now_ms, day)
}

/// A begin time (`--begin`, HTTP `begin_time`): the next such time, and a time past is now,
/// as Slurm's `--begin`.
pub fn parse_begin(text: &str, now_ms: u64) -> Result<u64, WhenError> {
    parse(text, now_ms, TimeOfDay::Next).map(|at| at.max(now_ms))
}

/// [`parse`] in the zone `tz` (tests use fixed offsets).
pub fn parse_in<Tz: TimeZone>(
    tz: &Tz,
    text: &str,
    now_ms: u64,
    day: TimeOfDay,
) -> Result<u64, WhenError> {
    let err = |why: &str| WhenError {
        got: text.to_string(),
        why: why.to_string(),
    };
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let now = i64::try_from(now_ms)
        .ok()
        .and_then(|ms| tz.timestamp_millis_opt(ms).single())
        .ok_or_else(|| err("now is out of range"))?;
    let ms = match lower.as_str() {
        "" => return Err(err("empty")),
        "now" => now_ms as i64,
        "today" => local_ms(tz, now.date_naive().and_time(NaiveTime::MIN)).map_err(&err)?,
        "tomorrow" => {
            let date = now
                .date_naive()
                .succ_opt()
                .ok_or_else(|| err("out of range"))?;
            local_ms(tz, date.and_time(NaiveTime::MIN)).map_err(&err)?
        }
        "midnight" => at_time_of_day(tz, &now, NaiveTime::MIN, day).map_err(&err)?,
        "noon" => {
            let noon = NaiveTime::from_hms_opt(12, 0, 0).ok_or_else(|| err("noon"))?;
            at_time_of_day(tz, &now, noon, day).map_err(&err)?
        }
        _ if lower.starts_with("now+") || lower.starts_with("now-") => {
            let offset = offset_ms(&lower[4..]).ok_or_else(|| err("not a count with a unit"))?;
            if lower.as_bytes()[3] == b'+' {
                (now_ms as i64).saturating_add(offset)
            } else {
                (now_ms as i64).saturating_sub(offset)
            }
        }
        _ => absolute(tz, t, &now, day).map_err(|w| err(&w))?,
    };
    u64::try_from(ms).map_err(|_| err("before 1970"))
}

/// `N` seconds, or `N` with a unit, in milliseconds.
fn offset_ms(text: &str) -> Option<i64> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (count, unit) = text.split_at(digits);
    let count: i64 = count.parse().ok()?;
    let unit_ms: i64 = match unit {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
        "h" | "hour" | "hours" => 3_600_000,
        "d" | "day" | "days" => 86_400_000,
        "w" | "week" | "weeks" => 604_800_000,
        _ => return None,
    };
    count.checked_mul(unit_ms)
}

/// A date, a date and time, a time of day, or RFC 3339.
fn absolute<Tz: TimeZone>(
    tz: &Tz,
    t: &str,
    now: &DateTime<Tz>,
    day: TimeOfDay,
) -> Result<i64, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(t) {
        return Ok(at.timestamp_millis());
    }
    for form in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"] {
        if let Ok(at) = NaiveDateTime::parse_from_str(t, form) {
            return local_ms(tz, at).map_err(str::to_string);
        }
    }
    if let Ok(date) = NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        return local_ms(tz, date.and_time(NaiveTime::MIN)).map_err(str::to_string);
    }
    for form in ["%H:%M:%S", "%H:%M"] {
        if let Ok(time) = NaiveTime::parse_from_str(t, form) {
            return at_time_of_day(tz, now, time, day).map_err(str::to_string);
        }
    }
    Err("not a time in any form".to_string())
}

/// `time` today, or the day after (`Next`) or before (`Last`) when today's is on the wrong
/// side of now.
fn at_time_of_day<Tz: TimeZone>(
    tz: &Tz,
    now: &DateTime<Tz>,
    time: NaiveTime,
    day: TimeOfDay,
) -> Result<i64, &'static str> {
    let today = now.date_naive();
    let at = local_ms(tz, today.and_time(time))?;
    let now_ms = now.timestamp_millis();
    let other = match day {
        TimeOfDay::Next if at <= now_ms => today.succ_opt(),
        TimeOfDay::Last if at > now_ms => today.pred_opt(),
        _ => return Ok(at),
    };
    local_ms(tz, other.ok_or("out of range")?.and_time(time))
}

/// A local date and time in `tz`, in ms; the earlier of two when the clocks went back.
fn local_ms<Tz: TimeZone>(tz: &Tz, at: NaiveDateTime) -> Result<i64, &'static str> {
    match tz.from_local_datetime(&at) {
        LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Ok(t.timestamp_millis()),
        LocalResult::None => Err("that local time does not exist (the clocks went forward)"),
    }
}

/// Now, in ms since the epoch (0 on a clock set before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `ms` as RFC 3339 in UTC, to the second: what [`parse`] reads back.
pub fn rfc3339(ms: u64) -> String {
    crate::json::rfc3339(ms)
}

/// How long before `then` it is from `now`, for readable reasons ("in 1 h 5 min").
pub fn until(now_ms: u64, then_ms: u64) -> String {
    let left = Duration::milliseconds(then_ms.saturating_sub(now_ms) as i64);
    let (d, h, m, s) = (
        left.num_days(),
        left.num_hours() % 24,
        left.num_minutes() % 60,
        left.num_seconds() % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use chrono::FixedOffset;
    use proptest::prelude::*;

    use super::*;

    /// 2026-12-05T10:30:00Z.
    const NOW: u64 = 1_796_466_600_000;

    #[test]
    fn a_begin_time_past_is_now_and_a_future_one_is_kept() {
        assert_eq!(parse_begin("2020-01-01T00:00:00", NOW), Ok(NOW));
        assert_eq!(parse_begin("now", NOW), Ok(NOW));
        let later = parse_begin("2099-01-01T00:00:00", NOW).unwrap();
        assert!(later > NOW + 365 * 24 * 3600 * 1000, "{later}");
        assert!(parse_begin("yesterday-ish", NOW).is_err());
    }

    fn at(text: &str, day: TimeOfDay) -> Result<u64, WhenError> {
        parse_in(&chrono::Utc, text, NOW, day)
    }

    #[test]
    fn relative_times_count_from_now_in_seconds_by_default() {
        let next = TimeOfDay::Next;
        assert_eq!(at("now", next), Ok(NOW));
        assert_eq!(at("now+3", next), Ok(NOW + 3_000));
        assert_eq!(at("now+3s", next), Ok(NOW + 3_000));
        assert_eq!(at("NOW+1h", next), Ok(NOW + 3_600_000));
        assert_eq!(at("now+2days", next), Ok(NOW + 2 * 86_400_000));
        assert_eq!(at("now-1w", next), Ok(NOW - 604_800_000));
        assert!(at("now+1y", next).is_err());
        assert!(at("now+", next).is_err());
    }

    #[test]
    fn a_time_of_day_is_the_next_one_for_a_start_and_the_last_one_for_a_since() {
        let today_0800 = NOW - 2 * 3_600_000 - 1_800_000;
        assert_eq!(at("08:00", TimeOfDay::Last), Ok(today_0800));
        assert_eq!(at("08:00", TimeOfDay::Next), Ok(today_0800 + 86_400_000));
        let today_1600 = today_0800 + 8 * 3_600_000;
        assert_eq!(at("16:00:00", TimeOfDay::Next), Ok(today_1600));
        assert_eq!(at("16:00", TimeOfDay::Last), Ok(today_1600 - 86_400_000));
        // A start at midnight is the coming one; a `--since midnight`, the one just past.
        assert_eq!(
            at("midnight", TimeOfDay::Next),
            Ok(today_0800 + 16 * 3_600_000)
        );
        assert_eq!(
            at("midnight", TimeOfDay::Last),
            Ok(today_0800 - 8 * 3_600_000)
        );
        assert_eq!(at("today", TimeOfDay::Next), Ok(today_0800 - 8 * 3_600_000));
        assert_eq!(
            at("tomorrow", TimeOfDay::Next),
            Ok(today_0800 + 16 * 3_600_000)
        );
    }

    #[test]
    fn dates_are_local_and_rfc_3339_carries_its_zone() {
        let plus2 = FixedOffset::east_opt(7_200).unwrap();
        let day = TimeOfDay::Next;
        let midnight_utc = parse_in(&chrono::Utc, "2026-12-24", NOW, day).unwrap();
        assert_eq!(rfc3339(midnight_utc), "2026-12-24T00:00:00Z");
        let midnight_plus2 = parse_in(&plus2, "2026-12-24", NOW, day).unwrap();
        assert_eq!(midnight_utc - midnight_plus2, 7_200_000);
        let eight = parse_in(&plus2, "2026-12-24T08:00", NOW, day).unwrap();
        assert_eq!(rfc3339(eight), "2026-12-24T06:00:00Z");
        // A zone given wins over the local one.
        let zoned = parse_in(&plus2, "2026-12-24T08:00:00Z", NOW, day).unwrap();
        assert_eq!(rfc3339(zoned), "2026-12-24T08:00:00Z");
    }

    #[test]
    fn a_bad_time_is_named_with_the_forms() {
        for bad in [
            "",
            "yesterday",
            "25:00",
            "2026-13-01",
            "12/24/2026",
            "1969-12-31",
        ] {
            let e = at(bad, TimeOfDay::Next).unwrap_err();
            let shown = e.to_string();
            assert!(
                shown.contains(&format!("{bad:?}")) && shown.contains("now+N"),
                "{shown}"
            );
        }
    }

    #[test]
    fn until_reads_like_a_person_would_say_it() {
        assert_eq!(until(0, 5_000), "5 s");
        assert_eq!(until(0, 65_000), "1 min 5 s");
        assert_eq!(until(0, 3_900_000), "1 h 5 min");
        assert_eq!(until(0, 90_000_000), "1 d 1 h");
        assert_eq!(until(10, 0), "0 s");
    }

    proptest! {
        /// Every time printed as RFC 3339 (as `-o json` and the HTTP API print them) reads
        /// back as itself, whatever the local zone.
        #[test]
        fn printed_times_read_back(secs in 0u64..4_102_444_800, offset in -50_400i32..50_400) {
            let tz = FixedOffset::east_opt(offset).unwrap();
            let ms = secs * 1000;
            prop_assert_eq!(parse_in(&tz, &rfc3339(ms), NOW, TimeOfDay::Next), Ok(ms));
        }

        /// `now+N` units agree with each other.
        #[test]
        fn units_agree(n in 0i64..10_000) {
            let plus = |unit: &str| at(&format!("now+{n}{unit}"), TimeOfDay::Next).unwrap();
            prop_assert_eq!(plus("m"), plus("") + (n as u64) * 59_000);
            prop_assert_eq!(plus("h"), plus("min") + (n as u64) * 3_540_000);
        }
    }
}
