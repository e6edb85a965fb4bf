//! The segment format shared by the root's two logs (the task journal,
//! `journal/`, and the noun log, `journal/nouns/`): append-only segment
//! files of checksummed records. What a payload holds is the owning log's
//! business; this module only requires that it starts with `{` (a JSON
//! object or a JSON header), which resynchronizing after damage relies on.
//!
//! ```text
//! <dir>/<20-digit segment number>.log
//!   header record: {"log_segment":N}   (written and synced when the segment is made)
//!   record := len: u32 LE | crc32(payload): u32 LE | payload: len bytes
//!   then zeros to the end of the segment's preallocated space
//! ```
//!
//! The header is not handed to the owner: [`read`] gives it back in
//! [`ReadEnd::header`] (segments made before headers existed have none).
//! With the log's reach (`reach.rs`) it lets a start tell a segment
//! emptied or cut from one that never held more.
//!
//! A record's length is never 0 (a payload starts with `{`), so eight zero
//! bytes mark the end of what was written. Segments are preallocated
//! ([`SegmentDir`], 64 MiB by default) and records are written into that
//! space, so appending a record never asks the filesystem for new space:
//! a full disk is met when the next segment is created, before any change
//! is applied. A graceful stop and every start trim the unused zeros off.
//!
//! Recovery: a segment is read record by record until the end, the zero
//! marker, or a record that is incomplete or fails its checksum. What
//! follows a bad record decides what it is: when no valid record can be
//! found after it, it is a torn tail (the write in flight at a crash,
//! never acknowledged) and is cut; when valid records follow, it is
//! corruption of acknowledged data, and the owner refuses to start and
//! names the file, the offset and the records that follow. Sizes are the
//! valid length, never the file length.
//!
//! Assumes the disk returns what an fsync acknowledged, and that space
//! set aside by `fallocate` is written in place (ext4, xfs, tmpfs); on a
//! copy-on-write filesystem a record write can still find the disk full,
//! which is then a log failure (see `commit.rs`).

use std::io::{Read, Write};

use cap_std::fs::{Dir, OpenOptions};

use super::reach::{Reach, Sealed};
use crate::store::atomic::sync_dir;

/// Bytes of a record header.
pub const HEADER: usize = 8;

/// Largest record accepted on read (a sanity bound, above any body limit).
pub const MAX_RECORD: usize = 64 * 1024 * 1024;

/// The key of a segment's header record: `{"log_segment":N}`.
const HEADER_KEY: &[u8] = b"{\"log_segment\":";

/// The header record of segment `n`, encoded.
pub fn header_record(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode(format!("{{\"log_segment\":{n}}}").as_bytes(), &mut out);
    out
}

/// The segment a header record's payload names, if it is one.
fn header_of(payload: &[u8]) -> Option<u64> {
    let digits = payload.strip_prefix(HEADER_KEY)?.strip_suffix(b"}")?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Encodes one record.
pub fn encode(payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).expect("records are under 4 GiB");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// What stopped a segment read before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// A bad final record, nothing valid after it, and not all of it
    /// written (its end lies past the last byte written): a crash's torn
    /// write.
    Torn,
    /// A bad final record that was written whole (every byte up to its
    /// end is there, or its bytes hold a whole record under its checksum
    /// with its length changed): it changed after it was written, and an
    /// acknowledged record is damaged.
    Altered,
    /// A bad record followed by valid ones: acknowledged data is damaged.
    Corrupt {
        /// Valid records found after the bad one.
        following: u64,
    },
}

/// How a segment read ended.
#[derive(Debug, PartialEq, Eq)]
pub struct ReadEnd {
    /// The segment its header record names (`None`: no header).
    pub header: Option<u64>,
    /// Records read, the header not counted.
    pub records: u64,
    /// Length of the valid prefix, in bytes (the offset of any damage).
    pub valid_len: u64,
    /// Why the read stopped early, if it did.
    pub damage: Option<Damage>,
}

/// Reads records one by one, handing each payload and its byte offset to
/// `each` (a first record that is the segment's header is kept in
/// [`ReadEnd::header`] instead), and stops at the end, at the zero end
/// marker, or at the first incomplete or corrupt record (then judged
/// torn or corrupt by what follows it).
pub fn read<E: From<std::io::Error>>(
    mut r: impl Read,
    mut each: impl FnMut(u64, &[u8]) -> Result<(), E>,
) -> Result<ReadEnd, E> {
    let mut end = ReadEnd {
        header: None,
        records: 0,
        valid_len: 0,
        damage: None,
    };
    let mut payload = Vec::new();
    loop {
        let mut header = [0u8; HEADER];
        let got = read_full(&mut r, &mut header)?;
        // The end, or preallocated zeros too few to hold a record: a
        // segment filled to within a header of its end, then closed.
        if got < HEADER && is_zero(&header[..got]) {
            return Ok(end);
        }
        let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(header[4..].try_into().expect("4 bytes"));
        let mut bad = got < HEADER || len > MAX_RECORD;
        let zero_marker = !bad && len == 0 && crc == 0;
        let mut read_len = 0;
        if !bad && !zero_marker {
            payload.resize(len, 0);
            read_len = read_full(&mut r, &mut payload)?;
            bad = read_len < len || crc32fast::hash(&payload) != crc;
            if !bad {
                match header_of(&payload).filter(|_| end.valid_len == 0) {
                    Some(n) => end.header = Some(n),
                    None => {
                        each(end.valid_len, &payload)?;
                        end.records += 1;
                    }
                }
                end.valid_len += (HEADER + len) as u64;
                continue;
            }
        }
        let mut rest = Vec::new();
        // Past the bad record's first byte, to find the valid ones after it.
        let mut from = 1;
        if zero_marker {
            // Preallocated space: zeros to the end are a clean end. They
            // are skipped a block at a time, not kept.
            let mut block = vec![0u8; 1 << 16];
            loop {
                let n = read_full(&mut r, &mut block)?;
                if n == 0 {
                    return Ok(end);
                }
                if !is_zero(&block[..n]) {
                    rest.extend_from_slice(&block[..n]);
                    from = 0;
                    break;
                }
            }
        } else {
            rest.extend_from_slice(&header[..got]);
            rest.extend_from_slice(&payload[..read_len]);
        }
        r.read_to_end(&mut rest)?;
        let following = count_valid(rest.get(from..).unwrap_or_default());
        end.damage = Some(if following > 0 {
            Damage::Corrupt { following }
        } else if !zero_marker && written_whole(&rest, got, len, crc) {
            Damage::Altered
        } else {
            Damage::Torn
        });
        return Ok(end);
    }
}

/// Whether the bad record at the start of `rest` (its header `got` bytes,
/// naming `len` and `crc`) was written whole: its claimed end is within
/// what was written (the last nonzero byte), or what was written is a
/// whole record under its checksum whose length field changed. A torn
/// write ends short, in zeros: the segment's space was zeros before.
fn written_whole(rest: &[u8], got: usize, len: usize, crc: u32) -> bool {
    if got < HEADER {
        return false;
    }
    let written = written_len(rest);
    let mislength =
        written > HEADER && rest[HEADER] == b'{' && crc32fast::hash(&rest[HEADER..written]) == crc;
    (len <= MAX_RECORD && HEADER + len <= written) || mislength
}

/// How many valid records can be found in `bytes` by resynchronizing: at
/// each offset, a record with a plausible length, a payload starting with
/// `{` and a matching checksum counts (a segment header does not), and
/// the scan jumps past it. Runs of zeros (preallocated space) are
/// skipped, not stepped through.
pub fn count_valid(bytes: &[u8]) -> u64 {
    let (mut at, mut found) = (0usize, 0u64);
    while at + HEADER < bytes.len() {
        if is_zero(&bytes[at..at + HEADER]) {
            // A record's nonzero length has a nonzero byte among its first
            // four, so none starts more than three bytes before the next
            // nonzero byte.
            let Some(next) = bytes[at..].iter().position(|b| *b != 0) else {
                break;
            };
            at = (at + next).saturating_sub(3).max(at + 1);
            continue;
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let body = at + HEADER..at + HEADER + len;
        if len > 0
            && len <= MAX_RECORD
            && body.end <= bytes.len()
            && bytes[body.start] == b'{'
            && crc32fast::hash(&bytes[body.clone()]) == crc
        {
            if header_of(&bytes[body.clone()]).is_none() {
                found += 1;
            }
            at = body.end;
        } else {
            at += 1;
        }
    }
    found
}

/// The length of `bytes` without its trailing zeros: preallocated space
/// never written. For logs whose payloads never end in a zero byte (the
/// task journal's are JSON, ending in `}`).
pub fn written_len(bytes: &[u8]) -> usize {
    let mut end = bytes.len();
    while end > 0 {
        let start = end.saturating_sub(ZEROS.len());
        let block = &bytes[start..end];
        if !is_zero(block) {
            return block
                .iter()
                .rposition(|b| *b != 0)
                .map_or(start, |i| start + i + 1);
        }
        end = start;
    }
    0
}

/// A block of zeros to compare against (a `memcmp`, not a byte loop).
const ZEROS: [u8; 4096] = [0; 4096];

fn is_zero(bytes: &[u8]) -> bool {
    bytes.chunks(ZEROS.len()).all(|c| c == &ZEROS[..c.len()])
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

/// Space set aside for a new segment unless configured otherwise
/// (`[queue] journal_segment_mib` for the task journal).
pub const SEGMENT_BYTES: u64 = 64 * 1024 * 1024;

/// How a new segment's space is set aside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Reserved (`fallocate`): quick to make, but the first write to each
    /// block converts it, so syncs carry filesystem metadata.
    Reserve,
    /// Written with zeros: slow to make (the committer does it in the
    /// background), and a sync afterwards writes only the records.
    Zeros,
}

/// A segment just made.
#[derive(Debug)]
pub struct Created {
    /// The file, open for writing.
    pub file: std::fs::File,
    /// Bytes already used at its start (its header record).
    pub used: u64,
}

/// Where new segments come from, and where their reach is kept:
/// [`SegmentDir`], or a test's stand-in that runs out of space on demand.
pub trait Segments: Send + Sync + std::fmt::Debug {
    /// Creates segment `number` holding `len` bytes whose space is already
    /// allocated as `fill` says, with its header record and its name
    /// durable, and listed in the log's reach before any record goes in.
    /// On failure it is removed (at worst an empty segment is left).
    fn create(&self, number: u64, len: u64, fill: Fill) -> std::io::Result<Created>;

    /// Seals segment `number`: every record it will hold is durable
    /// (`sealed.len` bytes, `sealed.records` records); called before any
    /// of its space is trimmed.
    fn seal(&self, number: u64, sealed: Sealed) -> std::io::Result<()>;

    /// The free bytes where segments are made, for a full disk's message.
    fn free_bytes(&self) -> Option<u64> {
        None
    }
}

/// Preallocated segments in one directory (`journal/`, `journal/nouns/`),
/// whose reach is kept in that directory's `reach.json`.
#[derive(Debug)]
pub struct SegmentDir {
    dir: Dir,
    reach: Reach,
}

impl SegmentDir {
    /// Segments in `dir`, their reach kept in `reach`.
    pub fn new(dir: Dir, reach: Reach) -> SegmentDir {
        SegmentDir { dir, reach }
    }
}

/// A store error as the `io::Error` a segment call answers.
fn as_io(e: crate::store::Error) -> std::io::Error {
    match e {
        crate::store::Error::OutOfSpace { context } => {
            std::io::Error::new(std::io::ErrorKind::StorageFull, context)
        }
        e => std::io::Error::other(e.to_string()),
    }
}

impl Segments for SegmentDir {
    fn free_bytes(&self) -> Option<u64> {
        crate::store::health::free_bytes(&self.dir).ok()
    }

    fn create(&self, number: u64, len: u64, fill: Fill) -> std::io::Result<Created> {
        use std::os::unix::fs::FileExt;
        let name = segment_name(number);
        let file = self
            .dir
            .open_with(&name, OpenOptions::new().write(true).create_new(true))?;
        let header = header_record(number);
        let made = preallocate(&file, len, fill).map(|()| file.into_std());
        let made = made.and_then(|file| {
            file.write_all_at(&header, 0)?;
            file.sync_all()?;
            sync_dir(&self.dir)?;
            self.reach.created(number, len).map_err(as_io)?;
            Ok(file)
        });
        match made {
            Ok(file) => Ok(Created {
                file,
                used: header.len() as u64,
            }),
            Err(e) => {
                // Not listed: a crash brings back at worst a segment that
                // holds only its header, which a start reads as empty.
                let _ = self.dir.remove_file(&name);
                Err(e)
            }
        }
    }

    fn seal(&self, number: u64, sealed: Sealed) -> std::io::Result<()> {
        self.reach.sealed(number, sealed).map_err(as_io)
    }
}

/// Allocates `len` zero bytes: `fallocate` for [`Fill::Reserve`] where the
/// filesystem supports it, else by writing zeros.
fn preallocate(file: &cap_std::fs::File, len: u64, fill: Fill) -> std::io::Result<()> {
    let reserved = match fill {
        Fill::Reserve => rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len),
        Fill::Zeros => Err(rustix::io::Errno::OPNOTSUPP),
    };
    match reserved {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::OPNOTSUPP) => {
            let zeros = vec![0u8; 1 << 20];
            let mut w = std::io::BufWriter::new(file);
            let mut left = len;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                w.write_all(&zeros[..n])?;
                left -= n as u64;
            }
            w.flush()
        }
        Err(e) => Err(e.into()),
    }
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
        let end = read::<std::io::Error>(bytes, |_, p| {
            out.push(p.to_vec());
            Ok(())
        })
        .unwrap();
        (out, end)
    }

    #[test]
    fn records_round_trip_and_a_zero_tail_is_a_clean_end() {
        let mut buf = Vec::new();
        for p in [&b"{}"[..], b"{\"a\":1}", b"{\"event\":\"x\"}"] {
            encode(p, &mut buf);
        }
        let (records, end) = all(&buf);
        assert_eq!(records.len(), 3);
        assert_eq!(
            end,
            ReadEnd {
                header: None,
                records: 3,
                valid_len: buf.len() as u64,
                damage: None
            }
        );
        let mut padded = buf.clone();
        padded.extend_from_slice(&[0; 4096]);
        assert_eq!(all(&padded).1.damage, None, "a preallocated zero tail");
        assert_eq!(all(&padded).1.valid_len, buf.len() as u64);
    }

    #[test]
    fn a_final_record_written_in_part_is_torn_one_changed_after_is_altered_and_damage_before_valid_records_is_corrupt()
     {
        let mut buf = Vec::new();
        encode(b"{\"n\":1}", &mut buf);
        let keep = buf.len();
        encode(b"{\"n\":2,\"second\":true}", &mut buf);
        for cut in keep + 1..buf.len() {
            let (records, end) = all(&buf[..cut]);
            assert_eq!(
                (records.len(), end.valid_len, end.damage),
                (1, keep as u64, Some(Damage::Torn)),
                "cut at {cut}"
            );
        }
        // Written in part, the rest still the segment's zeros: torn.
        for cut in keep + 1..buf.len() {
            let mut torn = buf[..cut].to_vec();
            torn.resize(buf.len() + 4096, 0);
            let (records, end) = all(&torn);
            assert_eq!(
                (records.len(), end.damage),
                (1, Some(Damage::Torn)),
                "written to {cut}"
            );
        }
        // Written whole, then changed anywhere (its length too): altered,
        // an acknowledged record, not a torn write.
        for i in keep..buf.len() {
            for bit in [0x01, 0x40, 0x80] {
                let mut bad = buf.clone();
                bad[i] ^= bit;
                bad.resize(buf.len() + 4096, 0);
                let (records, end) = all(&bad);
                assert_eq!(records.len(), 1, "flip at {i}");
                assert_eq!(end.damage, Some(Damage::Altered), "flip {bit:#x} at {i}");
            }
        }
        let mut three = buf.clone();
        encode(b"{\"n\":3}", &mut three);
        encode(b"{\"n\":4}", &mut three);
        for i in 0..keep {
            let mut bad = three.clone();
            bad[i] ^= 0x01;
            let (_, end) = all(&bad);
            assert!(
                matches!(end.damage, Some(Damage::Corrupt { following }) if following >= 2),
                "flip at {i}: {end:?}"
            );
        }
        let mut zeros_then_data = buf.clone();
        zeros_then_data.extend_from_slice(&[0; 64]);
        encode(b"{\"n\":5}", &mut zeros_then_data);
        assert_eq!(
            all(&zeros_then_data).1.damage,
            Some(Damage::Corrupt { following: 1 }),
            "a record after the zero marker is not a clean end"
        );
    }

    #[test]
    fn zeros_shorter_than_a_header_after_the_last_record_are_a_clean_end() {
        let mut buf = Vec::new();
        encode(b"{\"n\":1}", &mut buf);
        for zeros in 1..HEADER {
            let mut padded = buf.clone();
            padded.resize(buf.len() + zeros, 0);
            let (records, end) = all(&padded);
            assert_eq!(
                (records.len(), end.valid_len, end.damage),
                (1, buf.len() as u64, None),
                "{zeros} zero bytes"
            );
        }
    }

    #[test]
    fn only_trailing_zeros_are_unwritten_space() {
        let z = |n: usize| vec![0u8; n];
        let cases: Vec<(Vec<u8>, usize)> = vec![
            (vec![], 0),
            (z(9000), 0),
            (b"{}".to_vec(), 2),
            ([&b"{}"[..], &z(9000)].concat(), 2),
            ([z(5000), b"x".to_vec(), z(3)].concat(), 5001),
            ([z(4096), b"x".to_vec()].concat(), 4097),
        ];
        for (bytes, len) in cases {
            assert_eq!(written_len(&bytes), len, "{} bytes", bytes.len());
        }
    }

    #[test]
    fn a_torn_record_in_preallocated_space_is_torn_and_records_after_zeros_are_corrupt() {
        let mut buf = Vec::new();
        encode(b"{\"n\":1}", &mut buf);
        let keep = buf.len() as u64;
        let mut torn = buf.clone();
        torn.extend_from_slice(&100u32.to_le_bytes());
        torn.extend_from_slice(&7u32.to_le_bytes());
        torn.extend_from_slice(b"{\"n\":2,");
        torn.resize(torn.len() + 200_000, 0);
        let (records, end) = all(&torn);
        assert_eq!(
            (records.len(), end.valid_len, end.damage),
            (1, keep, Some(Damage::Torn))
        );

        let mut later = buf.clone();
        later.resize(later.len() + 70_000, 0);
        encode(b"{\"n\":3}", &mut later);
        later.resize(later.len() + 70_000, 0);
        let (_, end) = all(&later);
        assert_eq!(end.valid_len, keep);
        assert_eq!(end.damage, Some(Damage::Corrupt { following: 1 }));
    }

    #[test]
    fn records_ending_in_zeros_count_after_damage() {
        let mut buf = Vec::new();
        encode(b"{\"n\":1}", &mut buf);
        buf[3] ^= 0x01;
        buf.resize(buf.len() + 5000, 0);
        encode(b"{\"n\":2}\n\0\0", &mut buf);
        buf.extend_from_slice(&[0; 300]);
        encode(&[b'{'; 256], &mut buf);
        buf.extend_from_slice(&[0; 3000]);
        assert_eq!(count_valid(&buf), 2);
        assert_eq!(all(&buf).1.damage, Some(Damage::Corrupt { following: 2 }));
    }

    #[test]
    fn segment_names_round_trip() {
        assert_eq!(segment_number(&segment_name(42)), Some(42));
        assert_eq!(segment_number("snapshot.json"), None);
        assert_eq!(segment_number("42.log"), None);
    }
}
