//! Lower-case hex, the spelling the broker's JSON API and the CLI use for binary keys and values (`key_hex`,
//! `"encoding": "hex"`): one definition both sides share, so what one writes the other reads.

/// `bytes` as lower-case hex digits.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `s`, or `None` unless it is an even number of hex digits (either case).
pub fn decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_and_refuses_what_is_not_hex() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(super::encode(&bytes), "0001abff");
        assert_eq!(super::decode("0001ABff").as_deref(), Some(&bytes[..]));
        assert_eq!(super::decode("abc"), None);
        assert_eq!(super::decode("zz"), None);
        assert_eq!(super::decode("éé"), None, "not a char boundary");
    }
}
