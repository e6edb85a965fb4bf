//! Worker capability tokens and `wh-` handles.
//!
//! A token is `wt1.<payload>.<mac>` (both base64url without padding): the
//! payload is JSON `{task_id, attempt, role, verbs, exp}`, the MAC is
//! HMAC-SHA256 over the payload bytes with a secret kept in
//! `auth/token.secret` (mode 0600, created on first start as one line,
//! `tessera-token-secret-1 <secret hex> <sha256 of the secret, hex>`, so a
//! damaged or cut secret is refused rather than taken for another one; a
//! file of the bare 32 bytes, as older roots have, is read too), so
//! tokens survive a restart. A handle is `wh-` + 26 lowercase RFC 4648 base32
//! characters (`a`–`z`, `2`–`7`): 130 bits from the OS RNG, so guessing
//! one is hopeless even with many attempts live (and failed guesses are
//! throttled, `auth/throttle.rs`). The queue maps it to its (task, attempt). Whether the attempt is still
//! live is the queue's to say (`worker` checks it on every call).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::database::Database;
use crate::store::{self, Store};

/// The secret's file under `auth/`.
pub const SECRET_FILE: &str = "token.secret";

const PREFIX: &str = "wt1";

/// What a token grants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// The task (as its display id).
    pub task_id: String,
    /// The attempt.
    pub attempt: u32,
    /// Always `worker`.
    pub role: String,
    /// `prompt`, `artifact`, `submit`.
    pub verbs: Vec<String>,
    /// Unix seconds: the lease expiry when minted.
    pub exp: i64,
}

impl Claims {
    /// The claims of a worker token for one attempt.
    pub fn worker(task_id: String, attempt: u32, exp: Timestamp) -> Claims {
        Claims {
            task_id,
            attempt,
            role: "worker".into(),
            verbs: vec!["prompt".into(), "artifact".into(), "submit".into()],
            exp: exp.as_second(),
        }
    }

    /// Whether the token names `verb`.
    pub fn allows(&self, verb: &str) -> bool {
        self.role == "worker" && self.verbs.iter().any(|v| v == verb)
    }
}

/// Mints and verifies tokens. Cheap to clone.
#[derive(Clone)]
pub struct Minter {
    /// HMAC-SHA256 keyed with the secret once; cloned per token.
    keyed: Hmac<sha2::Sha256>,
}

impl std::fmt::Debug for Minter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Minter { secret: <hidden> }")
    }
}

/// A token that does not verify.
#[derive(Debug, thiserror::Error)]
#[error("invalid worker token")]
pub struct InvalidToken;

/// The first word of a `token.secret` file.
const SECRET_FORMAT: &str = "tessera-token-secret-1";

/// The secret a `token.secret` file holds: its line (see the module doc),
/// or (older roots) the bare 32 bytes; `Err` says why the file is not one.
pub fn parse_secret(bytes: &[u8]) -> Result<[u8; 32], String> {
    let Some(rest) = bytes.strip_prefix(SECRET_FORMAT.as_bytes()) else {
        return <[u8; 32]>::try_from(bytes).map_err(|_| {
            format!(
                "is not a token secret: it holds {} bytes, neither a `{SECRET_FORMAT}` line nor the 32 bytes of an older root's",
                bytes.len()
            )
        });
    };
    let text = std::str::from_utf8(rest).map_err(|_| "is not a token secret line".to_string())?;
    let words: Vec<&str> = text.split_whitespace().collect();
    let ([secret, sum], true) = (words.as_slice(), text.ends_with('\n')) else {
        return Err("is cut short: its line lacks the secret, its sha256 or its end".into());
    };
    let secret: [u8; 32] = hex::decode(secret)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or("holds a secret that is not 64 hex digits")?;
    if store::Sha256::of(&secret).hex() != *sum {
        return Err(
            "holds a secret that does not hash to the sha256 beside it: it was damaged".into(),
        );
    }
    Ok(secret)
}

/// A new secret from the OS RNG.
fn new_secret() -> [u8; 32] {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).expect("the OS random number generator is available");
    secret
}

/// A secret as the line a `token.secret` file holds.
fn secret_line(secret: &[u8; 32]) -> String {
    format!(
        "{SECRET_FORMAT} {} {}\n",
        hex::encode(secret),
        store::Sha256::of(secret).hex()
    )
}

impl Minter {
    /// Loads the secret, creating it on first start.
    pub fn open(store: &Store) -> Result<Minter, store::Error> {
        let auth = &store.root().auth;
        let secret = match auth.read(SECRET_FILE) {
            Ok(bytes) => parse_secret(&bytes).map_err(|message| store::Error::CorruptRef {
                path: format!("auth/{SECRET_FILE}"),
                message,
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let secret = new_secret();
                store
                    .writer()
                    .write_private(auth, SECRET_FILE, secret_line(&secret).as_bytes())?;
                secret
            }
            Err(e) => return Err(store::io_err(format!("reading auth/{SECRET_FILE}"), e)),
        };
        Ok(Minter::with_secret(&secret))
    }

    /// Loads the secret from the shared database (`--queue-url`), so a
    /// token minted on one daemon verifies on every other. A database
    /// with none yet takes this root's (its live tokens keep working) or
    /// a new one.
    pub async fn shared(db: &Database, store: &Store) -> Result<Minter, super::Error> {
        let fresh = match store.root().auth.read(SECRET_FILE) {
            Ok(bytes) if parse_secret(&bytes).is_ok() => bytes,
            _ => secret_line(&new_secret()).into_bytes(),
        };
        let line = super::shared::token_secret(db, &fresh).await?;
        let secret = parse_secret(&line).map_err(|why| {
            super::Error::KeysUnavailable(format!(
                "the worker-token secret in the shared database {why}"
            ))
        })?;
        Ok(Minter::with_secret(&secret))
    }

    fn with_secret(secret: &[u8; 32]) -> Minter {
        let keyed = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret)
            .expect("HMAC takes any key length");
        Minter { keyed }
    }

    fn mac(&self) -> Hmac<sha2::Sha256> {
        self.keyed.clone()
    }

    /// Mints a token.
    pub fn mint(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).expect("claims serialize");
        let mut mac = self.mac();
        mac.update(&payload);
        let tag = mac.finalize().into_bytes();
        let mut token =
            String::with_capacity(PREFIX.len() + 2 + (payload.len() + tag.len()) * 4 / 3 + 2);
        token.push_str(PREFIX);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(&payload, &mut token);
        token.push('.');
        URL_SAFE_NO_PAD.encode_string(tag, &mut token);
        token
    }

    /// Verifies a token's MAC (in constant time) and returns its claims.
    /// Expiry and liveness are the caller's to check.
    pub fn verify(&self, token: &str) -> Result<Claims, InvalidToken> {
        let mut parts = token.split('.');
        let (Some(PREFIX), Some(payload), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(InvalidToken);
        };
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| InvalidToken)?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| InvalidToken)?;
        let mut mac = self.mac();
        mac.update(&payload);
        mac.verify_slice(&tag).map_err(|_| InvalidToken)?;
        serde_json::from_slice(&payload).map_err(|_| InvalidToken)
    }
}

/// Whether a string looks like a token (as opposed to a handle or a key).
pub fn is_token(s: &str) -> bool {
    s.starts_with("wt1.")
}

/// Characters after `wh-` in a handle: 26 × 5 = 130 random bits.
pub const HANDLE_CHARS: usize = 26;

/// A fresh handle: `wh-` + 26 lowercase base32 characters of random bits.
pub fn new_handle() -> String {
    // 17 bytes encode to 28 characters; the first 26 carry the first 130
    // bits, each character uniform over the 32-letter alphabet.
    let mut buf = [0u8; 17];
    // The thread's CSPRNG (ChaCha, seeded and reseeded by the OS): no
    // system call per claim.
    rand::Rng::fill_bytes(&mut rand::rng(), &mut buf);
    let encoded = data_encoding::BASE32_NOPAD.encode(&buf);
    let mut handle = String::with_capacity(3 + HANDLE_CHARS);
    handle.push_str("wh-");
    handle.push_str(&encoded[..HANDLE_CHARS]);
    handle.make_ascii_lowercase();
    handle
}

/// Whether a string has the shape of a handle.
pub fn is_handle(s: &str) -> bool {
    s.len() == 3 + HANDLE_CHARS
        && s.starts_with("wh-")
        && s[3..]
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'2'..=b'7'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minter() -> Minter {
        Minter::with_secret(&[7; 32])
    }

    #[test]
    fn tokens_verify_and_any_tampering_fails() {
        let m = minter();
        let claims = Claims::worker(
            "t1".into(),
            2,
            Timestamp::from_second(2_000_000_000).unwrap(),
        );
        let token = m.mint(&claims);
        assert_eq!(m.verify(&token).unwrap(), claims);
        let other = Minter::with_secret(&[8; 32]);
        assert!(other.verify(&token).is_err(), "another secret");
        let forged = m.mint(&Claims::worker(
            "t2".into(),
            2,
            Timestamp::from_second(0).unwrap(),
        ));
        let (head, _) = token.rsplit_once('.').unwrap();
        let (_, forged_tag) = forged.rsplit_once('.').unwrap();
        assert!(
            m.verify(&format!("{head}.{forged_tag}")).is_err(),
            "a tag from another payload"
        );
        for i in 4..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            if let Ok(t) = String::from_utf8(bytes)
                && t != token
            {
                assert!(m.verify(&t).is_err(), "a changed byte at {i} verified");
            }
        }
        for junk in [
            "",
            "wt1",
            "wt1..",
            "wt1.a.b.c",
            "wt2.e30.AAAA",
            "wh-12345678",
        ] {
            assert!(m.verify(junk).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn handles_have_their_shape() {
        let h = new_handle();
        assert!(is_handle(&h), "{h}");
        assert_eq!(h.len(), 29);
        let good = format!("wh-{}", "a2".repeat(13));
        assert!(is_handle(&good));
        for bad in [
            "wh-12345678".to_string(),
            format!("wh-{}", "a".repeat(25)),
            format!("wh-{}", "a".repeat(27)),
            format!("wh-{}", "A".repeat(26)),
            format!("wh-{}", "1".repeat(26)),
            format!("wh-{}8", "a".repeat(25)),
            format!("xh-{}", "a".repeat(26)),
        ] {
            assert!(!is_handle(&bad), "{bad}");
        }
    }

    #[test]
    fn handles_use_every_letter_of_the_alphabet() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            seen.extend(new_handle()[3..].bytes());
        }
        assert_eq!(seen.len(), 32, "{seen:?}");
    }

    #[test]
    fn a_secret_file_is_its_line_or_an_older_roots_32_bytes_and_damage_is_refused() {
        let secret = [9u8; 32];
        let line = format!(
            "{SECRET_FORMAT} {} {}\n",
            hex::encode(secret),
            crate::store::Sha256::of(&secret).hex()
        );
        assert_eq!(parse_secret(line.as_bytes()), Ok(secret));
        assert_eq!(parse_secret(&secret), Ok(secret), "an older root's");
        let bytes = line.as_bytes();
        for cut in [32, bytes.len() / 2, bytes.len() - 1] {
            assert!(parse_secret(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for at in SECRET_FORMAT.len() + 1..bytes.len() - 1 {
            let mut bad = bytes.to_vec();
            bad[at] = if bad[at] == b'0' { b'1' } else { b'0' };
            assert!(parse_secret(&bad).is_err(), "changed at {at}");
        }
        assert!(parse_secret(&[0u8; 96]).is_err(), "zeros");
    }
}
