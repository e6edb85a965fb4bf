//! The task journal's on-disk format: append-only segment files of
//! checksummed records, each one `Event` as JSON.
//!
//! ```text
//! journal/<20-digit segment number>.log
//!   record := len: u32 LE | crc32(payload): u32 LE | payload: len bytes (JSON)
//! ```
//!
//! Recovery: a segment is read record by record. In the last segment, a
//! short header, a short payload or a checksum mismatch marks a torn tail
//! (a write the crash interrupted, never acknowledged): it is cut off and
//! logged. The same in an earlier segment is corruption of acknowledged
//! data, and the daemon refuses to start rather than lose it.
//! Assumes the disk returns what an fsync acknowledged.

use std::io::Read;

/// Bytes of a record header.
pub const HEADER: usize = 8;

/// Largest record accepted on read (a sanity bound; events are small).
pub const MAX_RECORD: usize = 64 * 1024 * 1024;

/// Encodes one record.
pub fn encode(payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).expect("records are under 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// How a segment read ended.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadEnd {
    /// Records read.
    pub records: u64,
    /// Length of the valid prefix, in bytes.
    pub valid_len: u64,
    /// Whether bytes after the valid prefix were dropped.
    pub torn: bool,
}

/// Reads records one by one, handing each payload to `each`, and stops at
/// the end or at the first incomplete or corrupt record.
pub fn read<E: From<std::io::Error>>(
    mut r: impl Read,
    mut each: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<ReadEnd, E> {
    let mut end = ReadEnd {
        records: 0,
        valid_len: 0,
        torn: false,
    };
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; HEADER];
        match read_full(&mut r, &mut header)? {
            0 => return Ok(end),
            n if n < HEADER => {
                end.torn = true;
                return Ok(end);
            }
            _ => {}
        }
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        if len > MAX_RECORD {
            end.torn = true;
            return Ok(end);
        }
        payload.resize(len, 0);
        if read_full(&mut r, &mut payload)? < len || crc32fast::hash(&payload) != crc {
            end.torn = true;
            return Ok(end);
        }
        each(&payload)?;
        end.records += 1;
        end.valid_len += (HEADER + len) as u64;
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// The file name of segment `n`.
pub fn segment_name(n: u64) -> String {
    format!("{n:020}.log")
}

/// The segment number of a file name, if it is one.
pub fn segment_number(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(bytes: &[u8]) -> (Vec<Vec<u8>>, ReadEnd) {
        let mut out = Vec::new();
        let end = read::<std::io::Error>(bytes, |p| {
            out.push(p.to_vec());
            Ok(())
        })
        .unwrap();
        (out, end)
    }

    #[test]
    fn records_round_trip() {
        let mut buf = Vec::new();
        for p in [&b"{}"[..], b"", b"{\"event\":\"x\"}"] {
            encode(p, &mut buf);
        }
        let (records, end) = all(&buf);
        assert_eq!(
            records,
            vec![b"{}".to_vec(), b"".to_vec(), b"{\"event\":\"x\"}".to_vec()]
        );
        assert_eq!(
            end,
            ReadEnd {
                records: 3,
                valid_len: buf.len() as u64,
                torn: false
            }
        );
    }

    #[test]
    fn every_truncation_and_bit_flip_is_a_torn_tail_never_a_wrong_record() {
        let mut buf = Vec::new();
        encode(b"first", &mut buf);
        let keep = buf.len();
        encode(b"second record", &mut buf);
        for cut in keep..buf.len() {
            let (records, end) = all(&buf[..cut]);
            assert_eq!(
                (records.len(), end.valid_len, end.torn),
                (1, keep as u64, cut > keep),
                "cut at {cut}"
            );
        }
        for i in keep..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            let (records, end) = all(&bad);
            assert_eq!(records, vec![b"first".to_vec()], "flip at {i}");
            assert!(end.torn);
        }
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_number(&segment_name(42)), Some(42));
        assert_eq!(segment_number("snapshot.json"), None);
        assert_eq!(segment_number("42.log"), None);
    }
}
