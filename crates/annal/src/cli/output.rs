//! How consumed records are printed: a readable one-line form, the raw value, or one JSON object per line.

use chrono::{DateTime, Utc};
use serde_json::{json, Map, Value};

use annal_client::FetchedRecord;

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `[partition:offset timestamp] key=K headers={h=v} VALUE`, one line per record, bytes escaped.
    Text,
    /// The value only, as raw bytes (like kafka-console-consumer).
    Value,
    /// One JSON object per line: topic, partition, offset, timestamp, timestamp_type, key, value, headers
    /// (key, value and header values as text; bytes that are not UTF-8 become U+FFFD).
    Json,
}

/// How reports (group and producer listings) are printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportFormat {
    /// Aligned tables for people.
    Text,
    /// One JSON document, for scripts.
    Json,
}

/// Appends the formatted record, newline included, to `out`.
pub fn format_record(
    format: Format,
    topic: &str,
    partition: i32,
    r: &FetchedRecord,
    out: &mut Vec<u8>,
) {
    match format {
        Format::Text => {
            out.extend_from_slice(
                format!(
                    "[{partition}:{} {}]",
                    r.offset,
                    format_timestamp(r.timestamp)
                )
                .as_bytes(),
            );
            if let Some(key) = &r.key {
                out.extend_from_slice(b" key=");
                out.extend_from_slice(escape(key).as_bytes());
            }
            if !r.headers.is_empty() {
                let headers: Vec<String> = r
                    .headers
                    .iter()
                    .map(|(k, v)| match v {
                        Some(v) => format!("{}={}", escape(k.as_bytes()), escape(v)),
                        None => format!("{}=null", escape(k.as_bytes())),
                    })
                    .collect();
                out.extend_from_slice(format!(" headers={{{}}}", headers.join(", ")).as_bytes());
            }
            out.push(b' ');
            match &r.value {
                Some(v) => out.extend_from_slice(escape(v).as_bytes()),
                None => out.extend_from_slice(b"null"),
            }
            out.push(b'\n');
        }
        Format::Value => {
            match &r.value {
                Some(v) => out.extend_from_slice(v),
                None => out.extend_from_slice(b"null"),
            }
            out.push(b'\n');
        }
        Format::Json => {
            let text = |b: &Option<bytes::Bytes>| match b {
                Some(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
                None => Value::Null,
            };
            let headers: Map<String, Value> = r
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), text(v)))
                .collect();
            let obj = json!({
                "topic": topic,
                "partition": partition,
                "offset": r.offset,
                "timestamp": r.timestamp,
                "timestamp_type": if r.log_append_time { "LogAppendTime" } else { "CreateTime" },
                "key": text(&r.key),
                "value": text(&r.value),
                "headers": headers,
            });
            out.extend_from_slice(obj.to_string().as_bytes());
            out.push(b'\n');
        }
    }
}

/// Milliseconds since the epoch as RFC 3339 UTC, or the raw number when it is not a valid time (e.g. -1).
pub fn format_timestamp(ms: i64) -> String {
    match DateTime::<Utc>::from_timestamp_millis(ms) {
        Some(t) if ms >= 0 => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        _ => ms.to_string(),
    }
}

/// Bytes as readable text on one line: valid UTF-8 as is, except control characters and backslashes, which are
/// escaped, and invalid bytes as \xNN.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for ch in chunk.valid().chars() {
            match ch {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A table with a header row, columns padded to their widest cell, the last column unpadded.
pub fn print_table<const N: usize>(out: &mut String, header: &[&str; N], rows: &[[String; N]]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  "));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn record() -> FetchedRecord {
        FetchedRecord {
            offset: 42,
            timestamp: 1_700_000_000_123,
            log_append_time: false,
            key: Some(Bytes::from_static(b"user-1")),
            value: Some(Bytes::from_static(b"hello world")),
            headers: vec![
                ("trace".into(), Some(Bytes::from_static(b"abc"))),
                ("empty".into(), None),
            ],
        }
    }

    fn render(format: Format, r: &FetchedRecord) -> String {
        let mut out = Vec::new();
        format_record(format, "orders", 3, r, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn text_format_is_one_readable_line() {
        assert_eq!(
            render(Format::Text, &record()),
            "[3:42 2023-11-14T22:13:20.123Z] key=user-1 headers={trace=abc, empty=null} hello world\n"
        );
        let mut bare = record();
        bare.key = None;
        bare.headers.clear();
        bare.value = Some(Bytes::from_static(b"line1\nline2\xff"));
        assert_eq!(
            render(Format::Text, &bare),
            "[3:42 2023-11-14T22:13:20.123Z] line1\\nline2\\xff\n"
        );
    }

    #[test]
    fn value_format_is_raw() {
        assert_eq!(render(Format::Value, &record()), "hello world\n");
        let mut null = record();
        null.value = None;
        assert_eq!(render(Format::Value, &null), "null\n");
    }

    #[test]
    fn json_format_has_every_field() {
        let line = render(Format::Json, &record());
        assert!(line.ends_with('\n'));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["topic"], "orders");
        assert_eq!(v["partition"], 3);
        assert_eq!(v["offset"], 42);
        assert_eq!(v["timestamp"], 1_700_000_000_123i64);
        assert_eq!(v["timestamp_type"], "CreateTime");
        assert_eq!(v["key"], "user-1");
        assert_eq!(v["value"], "hello world");
        assert_eq!(v["headers"]["trace"], "abc");
        assert_eq!(v["headers"]["empty"], Value::Null);
        let mut null_key = record();
        null_key.key = None;
        let v: Value = serde_json::from_str(&render(Format::Json, &null_key)).unwrap();
        assert_eq!(v["key"], Value::Null);
    }

    #[test]
    fn timestamps() {
        assert_eq!(format_timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_timestamp(-1), "-1");
    }
}
