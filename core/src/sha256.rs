//! `Sha256`: a content digest, parsed once from 64 lowercase hex characters
//! and carried as 32 bytes from then on.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::Digest;

/// A sha256 digest; displays and serializes as 64 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256([u8; 32]);

/// A string that is not 64 lowercase hex characters.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a sha256 (64 lowercase hex characters)")]
pub struct BadSha256(pub String);

impl Sha256 {
    /// Hashes `bytes`.
    pub fn of(bytes: &[u8]) -> Sha256 {
        Sha256(sha2::Sha256::digest(bytes).into())
    }

    /// A hash from its 32 bytes (as stored in a pack record).
    pub fn from_bytes(bytes: [u8; 32]) -> Sha256 {
        Sha256(bytes)
    }

    /// The hash a streaming `sha2::Sha256` finished with.
    pub fn from_digest(out: sha2::digest::Output<sha2::Sha256>) -> Sha256 {
        Sha256(out.into())
    }

    /// The 64-character lowercase hex form.
    pub fn hex(&self) -> String {
        self.with_hex(str::to_owned)
    }

    /// Calls `f` with the hex form, written on the stack: serializing and
    /// displaying a digest (receipts, journal records, answers) allocate
    /// nothing for it.
    fn with_hex<T>(&self, f: impl FnOnce(&str) -> T) -> T {
        let mut out = [0u8; 64];
        hex::encode_to_slice(self.0, &mut out).expect("64 bytes hold 32 bytes in hex");
        f(std::str::from_utf8(&out).expect("hex digits are ASCII"))
    }

    /// The raw digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl FromStr for Sha256 {
    type Err = BadSha256;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let nibble = |b: u8| match b {
            b'0'..=b'9' => Some(b - b'0'),
            b'a'..=b'f' => Some(b - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        let parsed = s.len() == 64
            && out
                .iter_mut()
                .zip(s.as_bytes().chunks_exact(2))
                .all(|(o, pair)| match (nibble(pair[0]), nibble(pair[1])) {
                    (Some(hi), Some(lo)) => {
                        *o = hi << 4 | lo;
                        true
                    }
                    _ => false,
                });
        if !parsed {
            return Err(BadSha256(s.chars().take(80).collect()));
        }
        Ok(Sha256(out))
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_hex(|hex| f.write_str(hex))
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256({self})")
    }
}

impl Serialize for Sha256 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_hex(|hex| s.serialize_str(hex))
    }
}

impl<'de> Deserialize<'de> for Sha256 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_lowercase_hex_of_the_right_length() {
        let good = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        assert_eq!(good.parse::<Sha256>().unwrap(), Sha256::of(b""));
        let empty = Sha256::of(b"");
        assert_eq!((empty.hex(), empty.to_string()), (good.into(), good.into()));
        assert_eq!(
            serde_json::to_string(&empty).unwrap(),
            format!("\"{good}\"")
        );
        for bytes in [&b"x"[..], b"tessera", &[0xff; 100]] {
            let sha = Sha256::of(bytes);
            assert_eq!(sha.hex().parse::<Sha256>().unwrap(), sha);
        }
        for bad in [
            "",
            "E3B0",
            &good.to_uppercase(),
            &good[1..],
            &format!("{good}0"),
            &format!("{}g", &good[..63]),
            &format!("{}\u{e9}", &good[..62]),
        ] {
            assert!(bad.parse::<Sha256>().is_err(), "{bad:?} must be rejected");
        }
    }
}
