//! The primitives of Kafka's flexible message encoding, strict and bounded.
//!
//! Hand-written rather than taken from `kafka_protocol::protocol::types` because the decoder has to be stricter
//! than that crate's: an over-long varint is an error here (Kafka's `ByteUtils.readUnsignedVarint` rejects it
//! too), every declared length or count is checked against the bytes actually left before anything is
//! allocated, and errors name the field that failed instead of an `anyhow` string.

use uuid::Uuid;

use super::RecordError;

/// Appends Kafka-encoded primitives to a byte vector.
#[derive(Default)]
pub struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn i8(&mut self, v: i8) {
        self.bytes.push(v as u8);
    }
    pub fn bool(&mut self, v: bool) {
        self.bytes.push(u8::from(v));
    }
    pub fn i16(&mut self, v: i16) {
        self.bytes.extend_from_slice(&v.to_be_bytes());
    }
    pub fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_be_bytes());
    }
    pub fn i32(&mut self, v: i32) {
        self.bytes.extend_from_slice(&v.to_be_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.bytes.extend_from_slice(&v.to_be_bytes());
    }
    pub fn uuid(&mut self, v: &Uuid) {
        self.bytes.extend_from_slice(v.as_bytes());
    }
    /// Kafka's float64: the IEEE 754 bits, big-endian.
    pub fn f64(&mut self, v: f64) {
        self.bytes.extend_from_slice(&v.to_bits().to_be_bytes());
    }
    pub fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.bytes.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.bytes.push(v as u8);
    }
    /// A compact length: `len + 1`, 0 meaning null.
    fn compact_len(&mut self, len: usize) {
        let len = u32::try_from(len).expect("a metadata field longer than 4 GiB");
        self.uvarint(
            len.checked_add(1)
                .expect("a metadata field longer than 4 GiB"),
        );
    }
    pub fn string(&mut self, v: &str) {
        self.compact_len(v.len());
        self.bytes.extend_from_slice(v.as_bytes());
    }
    pub fn nullable_string(&mut self, v: Option<&str>) {
        match v {
            None => self.uvarint(0),
            Some(s) => self.string(s),
        }
    }
    /// Compact bytes (non-null).
    pub fn bytes(&mut self, v: &[u8]) {
        self.compact_len(v.len());
        self.bytes.extend_from_slice(v);
    }
    pub fn i32_array(&mut self, v: &[i32]) {
        self.compact_len(v.len());
        v.iter().for_each(|x| self.i32(*x));
    }
    pub fn uuid_array(&mut self, v: &[Uuid]) {
        self.compact_len(v.len());
        v.iter().for_each(|x| self.uuid(x));
    }
    /// A compact array of structs, each written by `item`.
    pub fn array<T>(&mut self, v: &[T], mut item: impl FnMut(&mut Writer, &T)) {
        self.compact_len(v.len());
        for x in v {
            item(self, x);
        }
    }
    /// The tagged-field section: `fields` holds (tag, encoded value) in ascending tag order, only those whose
    /// value differs from the default (Kafka omits default-valued tagged fields).
    pub fn tagged_fields(&mut self, fields: &[(u32, Vec<u8>)]) {
        debug_assert!(fields.windows(2).all(|w| w[0].0 < w[1].0), "tags ascend");
        self.uvarint(u32::try_from(fields.len()).expect("few tagged fields"));
        for (tag, value) in fields {
            self.uvarint(*tag);
            self.uvarint(u32::try_from(value.len()).expect("a tagged field longer than 4 GiB"));
            self.bytes.extend_from_slice(value);
        }
    }
    /// Encodes one value into a fresh buffer (a tagged field's body).
    pub fn encode_with(f: impl FnOnce(&mut Writer)) -> Vec<u8> {
        let mut w = Writer::default();
        f(&mut w);
        w.bytes
    }
}

/// Reads Kafka-encoded primitives from a byte slice; every read checks the bytes left.
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        if self.bytes.len() < n {
            return Err(RecordError::Truncated {
                field: what,
                needed: n,
                left: self.bytes.len(),
            });
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }
    fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RecordError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }
    pub fn i8(&mut self, what: &'static str) -> Result<i8, RecordError> {
        Ok(self.fixed::<1>(what)?[0] as i8)
    }
    pub fn bool(&mut self, what: &'static str) -> Result<bool, RecordError> {
        Ok(self.fixed::<1>(what)?[0] != 0)
    }
    pub fn i16(&mut self, what: &'static str) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(self.fixed(what)?))
    }
    pub fn u16(&mut self, what: &'static str) -> Result<u16, RecordError> {
        Ok(u16::from_be_bytes(self.fixed(what)?))
    }
    pub fn i32(&mut self, what: &'static str) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(self.fixed(what)?))
    }
    pub fn i64(&mut self, what: &'static str) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.fixed(what)?))
    }
    pub fn uuid(&mut self, what: &'static str) -> Result<Uuid, RecordError> {
        Ok(Uuid::from_bytes(self.fixed(what)?))
    }
    pub fn f64(&mut self, what: &'static str) -> Result<f64, RecordError> {
        Ok(f64::from_bits(u64::from_be_bytes(self.fixed(what)?)))
    }
    /// An unsigned varint of at most 5 bytes, as Kafka's `readUnsignedVarint` accepts.
    pub fn uvarint(&mut self, what: &'static str) -> Result<u32, RecordError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.fixed::<1>(what)?[0];
            if i == 4 && b > 0x0f {
                return Err(RecordError::Malformed(format!(
                    "{what}: varint overflows 32 bits"
                )));
            }
            value |= u32::from(b & 0x7f) << (i * 7);
            if b < 0x80 {
                return Ok(value);
            }
        }
        unreachable!("the fifth byte either ends the varint or is rejected as an overflow")
    }
    /// A compact length: `None` for null, else the length, checked to fit `min_item_bytes * len` in what is left.
    fn compact_len(
        &mut self,
        min_item_bytes: usize,
        what: &'static str,
    ) -> Result<Option<usize>, RecordError> {
        let raw = self.uvarint(what)?;
        if raw == 0 {
            return Ok(None);
        }
        let len = (raw - 1) as usize;
        let needed = len.saturating_mul(min_item_bytes.max(1));
        if needed > self.remaining() {
            return Err(RecordError::Truncated {
                field: what,
                needed,
                left: self.remaining(),
            });
        }
        Ok(Some(len))
    }
    pub fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, RecordError> {
        let Some(len) = self.compact_len(1, what)? else {
            return Ok(None);
        };
        let raw = self.take(len, what)?;
        let s = std::str::from_utf8(raw)
            .map_err(|e| RecordError::Malformed(format!("{what}: not UTF-8 ({e})")))?;
        Ok(Some(s.to_owned()))
    }
    /// Compact bytes (non-null).
    pub fn bytes(&mut self, what: &'static str) -> Result<Vec<u8>, RecordError> {
        let len = self.compact_len(1, what)?.ok_or_else(|| {
            RecordError::Malformed(format!("{what}: null where bytes are required"))
        })?;
        Ok(self.take(len, what)?.to_vec())
    }
    pub fn string(&mut self, what: &'static str) -> Result<String, RecordError> {
        self.nullable_string(what)?.ok_or_else(|| {
            RecordError::Malformed(format!("{what}: null where a string is required"))
        })
    }
    pub fn nullable_i32_array(
        &mut self,
        what: &'static str,
    ) -> Result<Option<Vec<i32>>, RecordError> {
        let Some(len) = self.compact_len(4, what)? else {
            return Ok(None);
        };
        (0..len)
            .map(|_| self.i32(what))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
    pub fn i32_array(&mut self, what: &'static str) -> Result<Vec<i32>, RecordError> {
        self.nullable_i32_array(what)?.ok_or_else(|| {
            RecordError::Malformed(format!("{what}: null where an array is required"))
        })
    }
    pub fn nullable_uuid_array(
        &mut self,
        what: &'static str,
    ) -> Result<Option<Vec<Uuid>>, RecordError> {
        let Some(len) = self.compact_len(16, what)? else {
            return Ok(None);
        };
        (0..len)
            .map(|_| self.uuid(what))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
    pub fn uuid_array(&mut self, what: &'static str) -> Result<Vec<Uuid>, RecordError> {
        self.nullable_uuid_array(what)?.ok_or_else(|| {
            RecordError::Malformed(format!("{what}: null where an array is required"))
        })
    }
    /// A compact array of structs whose encoding takes at least `min_item_bytes` each.
    pub fn array<T>(
        &mut self,
        min_item_bytes: usize,
        what: &'static str,
        mut item: impl FnMut(&mut Reader<'a>) -> Result<T, RecordError>,
    ) -> Result<Vec<T>, RecordError> {
        let len = self.compact_len(min_item_bytes, what)?.ok_or_else(|| {
            RecordError::Malformed(format!("{what}: null where an array is required"))
        })?;
        let mut out = Vec::with_capacity(len);
        for _ in 0..len {
            out.push(item(self)?);
        }
        Ok(out)
    }
    /// Reads the tagged-field section, handing each known tag's body to `known` (which returns false for a tag
    /// it does not know; such fields are skipped, as Kafka keeps them as unknown tagged fields). A known field
    /// must consume exactly its declared size.
    pub fn tagged_fields(
        &mut self,
        mut known: impl FnMut(u32, &mut Reader<'a>) -> Result<bool, RecordError>,
    ) -> Result<(), RecordError> {
        // Each field takes at least two bytes (tag and size).
        let count = self.uvarint("tagged field count")? as usize;
        if count.saturating_mul(2) > self.remaining() {
            return Err(RecordError::Truncated {
                field: "tagged fields",
                needed: count.saturating_mul(2),
                left: self.remaining(),
            });
        }
        let mut last_tag: Option<u32> = None;
        for _ in 0..count {
            let tag = self.uvarint("tag")?;
            if last_tag.is_some_and(|t| t >= tag) {
                return Err(RecordError::Malformed(format!(
                    "tagged fields out of order or repeated: tag {tag} after {}",
                    last_tag.unwrap_or_default()
                )));
            }
            last_tag = Some(tag);
            let size = self.uvarint("tagged field size")? as usize;
            let body = self.take(size, "tagged field")?;
            let mut field = Reader::new(body);
            if known(tag, &mut field)? && field.remaining() != 0 {
                return Err(RecordError::Malformed(format!(
                    "tagged field {tag} has {} byte(s) beyond its value",
                    field.remaining()
                )));
            }
        }
        Ok(())
    }
}
