//! Bounded decompression of fetched record batches.
//!
//! The codecs in `kafka_protocol::compression` decompress without a size limit, so a small hostile batch could
//! expand to gigabytes. Here every codec stops at `limit` bytes. Formats are Kafka's: gzip, snappy in
//! snappy-java's ("xerial") framing or raw, LZ4 frames, zstd frames.

use std::io::Read;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use kafka_protocol::records::Compression;

/// The most a single batch may decompress to. Kafka batches are about 1 MiB by default (max.message.bytes);
/// this leaves room for raised limits and highly compressible data.
pub const MAX_DECOMPRESSED_BATCH: usize = 256 * 1024 * 1024;

/// snappy-java's stream header: magic, version 1, compatible version 1.
const XERIAL_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_LEN: usize = 16;

pub fn decompress(data: &[u8], compression: Compression, limit: usize) -> Result<Bytes> {
    let out = match compression {
        Compression::None => data.to_vec(),
        Compression::Gzip => read_bounded(flate2::read::MultiGzDecoder::new(data), limit, "gzip")?,
        Compression::Zstd => read_bounded(
            zstd::stream::read::Decoder::new(data).context("bad zstd data")?,
            limit,
            "zstd",
        )?,
        Compression::Lz4 => read_bounded(lz4_flex::frame::FrameDecoder::new(data), limit, "lz4")?,
        Compression::Snappy => snappy(data, limit)?,
    };
    Ok(Bytes::from(out))
}

fn read_bounded(reader: impl Read, limit: usize, codec: &str) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    reader
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .with_context(|| format!("cannot decompress {codec} batch"))?;
    if out.len() > limit {
        bail!("a {codec} batch decompresses to more than {limit} bytes; refusing it");
    }
    Ok(out)
}

fn snappy(data: &[u8], limit: usize) -> Result<Vec<u8>> {
    let mut decoder = snap::raw::Decoder::new();
    let mut out = Vec::new();
    let mut append = |block: &[u8], out: &mut Vec<u8>| -> Result<()> {
        let len = snap::raw::decompress_len(block).context("bad snappy block")?;
        if len > limit.saturating_sub(out.len()) {
            bail!("a snappy batch decompresses to more than {limit} bytes; refusing it");
        }
        let start = out.len();
        out.resize(start + len, 0);
        decoder
            .decompress(block, &mut out[start..])
            .context("cannot decompress snappy block")?;
        Ok(())
    };
    if data.len() < XERIAL_HEADER_LEN || &data[..XERIAL_MAGIC.len()] != XERIAL_MAGIC {
        // Raw snappy, as some non-Java clients write it.
        append(data, &mut out)?;
        return Ok(out);
    }
    let mut rest = &data[XERIAL_HEADER_LEN..];
    while !rest.is_empty() {
        if rest.len() < 4 {
            bail!("truncated snappy block length");
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        rest = &rest[4..];
        if len > rest.len() {
            bail!("snappy block of {len} bytes with only {} left", rest.len());
        }
        append(&rest[..len], &mut out)?;
        rest = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gzip_bomb_is_refused() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&vec![0u8; 4 * 1024 * 1024]).unwrap();
        let bomb = enc.finish().unwrap();
        assert!(bomb.len() < 64 * 1024);
        let err = decompress(&bomb, Compression::Gzip, 1024 * 1024)
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than"), "{err}");
        assert_eq!(
            decompress(&bomb, Compression::Gzip, 4 * 1024 * 1024)
                .unwrap()
                .len(),
            4 * 1024 * 1024
        );
    }

    #[test]
    fn zstd_and_lz4_are_bounded() {
        let data = vec![7u8; 2 * 1024 * 1024];
        let z = zstd::encode_all(&data[..], 3).unwrap();
        assert!(decompress(&z, Compression::Zstd, 1024).is_err());
        assert_eq!(decompress(&z, Compression::Zstd, data.len()).unwrap(), data);
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        enc.write_all(&data).unwrap();
        let l = enc.finish().unwrap();
        assert!(decompress(&l, Compression::Lz4, 1024).is_err());
        assert_eq!(decompress(&l, Compression::Lz4, data.len()).unwrap(), data);
    }

    #[test]
    fn snappy_claimed_length_is_checked_before_allocating() {
        // A raw snappy block whose header varint claims ~4 GiB.
        let claim = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        let err = decompress(&claim, Compression::Snappy, 1024 * 1024)
            .unwrap_err()
            .to_string();
        assert!(err.contains("more than"), "{err}");
        // Xerial framing with two chunks.
        let mut framed = Vec::from(&b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"[..]);
        for part in [&b"hello "[..], &b"world"[..]] {
            let block = snap::raw::Encoder::new().compress_vec(part).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(
            &decompress(&framed, Compression::Snappy, 100).unwrap()[..],
            b"hello world"
        );
        assert!(decompress(&framed[..framed.len() - 2], Compression::Snappy, 100).is_err());
    }
}
