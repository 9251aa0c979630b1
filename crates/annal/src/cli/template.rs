//! `consume --format` templates, as kcat's `-f` and rpk's `--format` take them: `%k %v\n` prints each record's
//! key, a space, its value and a newline. Parsed once into parts, then rendered per record without allocating
//! more than the output.

use annal_client::FetchedRecord;

use super::output::format_timestamp;

/// What a `%` directive prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    /// Milliseconds since the epoch.
    TimestampMs,
    /// RFC 3339, UTC, milliseconds.
    TimestampRfc3339,
    /// `k=v,k2=v2` (a null value prints the key alone).
    Headers,
    /// Key length in bytes; -1 for a null key.
    KeyLen,
    /// Value length in bytes; -1 for a null value.
    ValueLen,
    HeaderCount,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Field(Field),
}

/// A parsed `--format` template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// The directives, for help texts and errors.
pub const DIRECTIVES: &str = "%t topic, %p partition, %o offset, %k key, %v (or %s) value, %T timestamp (ms), \
%d timestamp (RFC 3339), %h headers (k=v,k2=v2), %H header count, %K key length, %S value length, %% a percent \
sign; escapes \\n \\t \\r \\\\";

impl Template {
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = Vec::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            match c {
                '%' => {
                    let field = match chars.next() {
                        Some('t') => Field::Topic,
                        Some('p') => Field::Partition,
                        Some('o') => Field::Offset,
                        Some('k') => Field::Key,
                        Some('v') | Some('s') => Field::Value,
                        Some('T') => Field::TimestampMs,
                        Some('d') => Field::TimestampRfc3339,
                        Some('h') => Field::Headers,
                        Some('H') => Field::HeaderCount,
                        Some('K') => Field::KeyLen,
                        Some('S') => Field::ValueLen,
                        Some('%') => {
                            literal.push(b'%');
                            continue;
                        }
                        Some(other) => {
                            return Err(format!("unknown directive %{other} in --format; use {DIRECTIVES}"))
                        }
                        None => {
                            return Err(format!(
                                "--format ends with a lone %; write %% for a percent sign ({DIRECTIVES})"
                            ))
                        }
                    };
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Field(field));
                }
                '\\' => {
                    let escaped = match chars.next() {
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        Some('\\') => '\\',
                        Some(other) => {
                            return Err(format!(
                                "unknown escape \\{other} in --format; use \\n, \\t, \\r or \\\\"
                            ))
                        }
                        None => {
                            return Err(
                                "--format ends with a lone \\; write \\\\ for a backslash".into()
                            )
                        }
                    };
                    literal.extend_from_slice(escaped.encode_utf8(&mut [0; 4]).as_bytes());
                }
                c => literal.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Template { parts })
    }

    /// Appends the record as the template says. Keys, values and headers are written as raw bytes (a template
    /// is for pipes and scripts); null keys and values print nothing.
    pub fn render(&self, topic: &str, partition: i32, r: &FetchedRecord, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Literal(bytes) => out.extend_from_slice(bytes),
                Part::Field(field) => render_field(*field, topic, partition, r, out),
            }
        }
    }
}

fn render_field(field: Field, topic: &str, partition: i32, r: &FetchedRecord, out: &mut Vec<u8>) {
    let len = |b: &Option<bytes::Bytes>| b.as_ref().map_or(-1, |b| b.len() as i64);
    match field {
        Field::Topic => out.extend_from_slice(topic.as_bytes()),
        Field::Partition => out.extend_from_slice(partition.to_string().as_bytes()),
        Field::Offset => out.extend_from_slice(r.offset.to_string().as_bytes()),
        Field::Key => out.extend_from_slice(r.key.as_deref().unwrap_or_default()),
        Field::Value => out.extend_from_slice(r.value.as_deref().unwrap_or_default()),
        Field::TimestampMs => out.extend_from_slice(r.timestamp.to_string().as_bytes()),
        Field::TimestampRfc3339 => out.extend_from_slice(format_timestamp(r.timestamp).as_bytes()),
        Field::Headers => {
            for (i, (k, v)) in r.headers.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(k.as_bytes());
                if let Some(v) = v {
                    out.push(b'=');
                    out.extend_from_slice(v);
                }
            }
        }
        Field::HeaderCount => out.extend_from_slice(r.headers.len().to_string().as_bytes()),
        Field::KeyLen => out.extend_from_slice(len(&r.key).to_string().as_bytes()),
        Field::ValueLen => out.extend_from_slice(len(&r.value).to_string().as_bytes()),
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
            value: Some(Bytes::from_static(b"hello")),
            headers: vec![
                ("trace".into(), Some(Bytes::from_static(b"abc"))),
                ("flag".into(), None),
            ],
        }
    }

    fn render(template: &str, r: &FetchedRecord) -> String {
        let mut out = Vec::new();
        Template::parse(template)
            .unwrap()
            .render("orders", 3, r, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_directive() {
        assert_eq!(
            render("%t/%p/%o %k=%v %T %d [%h] %H %K %S 100%%\\n", &record()),
            "orders/3/42 user-1=hello 1700000000123 2023-11-14T22:13:20.123Z [trace=abc,flag] 2 6 5 100%\n"
        );
        assert_eq!(render("%s\\t%v\\r\\\\", &record()), "hello\thello\r\\");
        assert_eq!(render("no directives", &record()), "no directives");
    }

    #[test]
    fn nulls_print_nothing_and_lengths_say_minus_one() {
        let mut r = record();
        r.key = None;
        r.value = None;
        r.headers.clear();
        assert_eq!(render("[%k][%v][%h] %K %S", &r), "[][][] -1 -1");
    }

    #[test]
    fn mistakes_are_explained() {
        let e = Template::parse("%x").unwrap_err();
        assert!(e.contains("%x") && e.contains("%k key"), "{e}");
        assert!(Template::parse("100%").unwrap_err().contains("%%"));
        assert!(Template::parse("\\q").unwrap_err().contains("\\n"));
        assert!(Template::parse("end\\").is_err());
    }

    #[test]
    fn non_ascii_literals_survive() {
        assert_eq!(render("→ %o ✓", &record()), "→ 42 ✓");
    }
}
