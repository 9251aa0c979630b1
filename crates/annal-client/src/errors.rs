//! Kafka error codes as names a person can search for, plus hints for the ones a CLI user can fix.

use kafka_protocol::ResponseError;

/// Kafka's own name for an error code, e.g. 3 -> "UNKNOWN_TOPIC_OR_PARTITION" (as in Kafka's docs and logs).
pub fn error_name(code: i16) -> String {
    match ResponseError::try_from_code(code) {
        None => "NONE".to_string(),
        Some(ResponseError::Unknown(code)) => format!("error code {code}"),
        Some(err) => camel_to_upper_snake(&err.to_string()),
    }
}

/// Kafka's error name plus the broker's message, when it sent one.
pub fn describe(code: i16, message: Option<&str>) -> String {
    match message.filter(|m| !m.is_empty()) {
        Some(m) => format!("{} ({m})", error_name(code)),
        None => error_name(code),
    }
}

pub fn is_retriable(code: i16) -> bool {
    ResponseError::try_from_code(code).is_some_and(|e| e.is_retriable())
}

pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const UNKNOWN_TOPIC_ID: i16 = 100;

pub fn topic_missing(topic: &str) -> anyhow::Error {
    anyhow::anyhow!("topic '{topic}' does not exist; create it with `annal topic create {topic}`")
}

fn camel_to_upper_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    for (i, ch) in name.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(ch.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_kafka_spelling() {
        assert_eq!(error_name(3), "UNKNOWN_TOPIC_OR_PARTITION");
        assert_eq!(error_name(36), "TOPIC_ALREADY_EXISTS");
        assert_eq!(error_name(38), "INVALID_REPLICATION_FACTOR");
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(-12345), "error code -12345");
    }

    #[test]
    fn describe_appends_broker_message() {
        assert_eq!(
            describe(36, Some("Topic 'x' already exists.")),
            "TOPIC_ALREADY_EXISTS (Topic 'x' already exists.)"
        );
        assert_eq!(describe(36, Some("")), "TOPIC_ALREADY_EXISTS");
        assert_eq!(describe(36, None), "TOPIC_ALREADY_EXISTS");
    }
}
