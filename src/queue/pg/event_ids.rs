//! The ids readers resume the event stream by (`Last-Event-ID`): an
//! event's place in the stream, `(xid, id)`, enciphered as one AES-128
//! block with a key every daemon shares (the `event_ids` secret). An id
//! names the same event on every daemon and tells nothing of how many
//! came before it, and the table keeps no column or index for it.

use aes::Aes128;
use aes::cipher::{Array, BlockCipherDecrypt, BlockCipherEncrypt, KeyInit};

use super::events::Cursor;
use crate::database::{self, Database, Error};

/// The secret row holding the key.
const SECRET: &str = "event_ids";

/// The shared key, ready to encipher and decipher event positions.
#[derive(Clone)]
pub struct EventIds(Aes128);

impl std::fmt::Debug for EventIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventIds(..)")
    }
}

impl EventIds {
    /// The key the database holds, made now when it holds none (two
    /// daemons making one at once keep the first that lands).
    pub async fn load(db: &Database) -> Result<EventIds, Error> {
        let mut fresh = [0u8; 16];
        getrandom::fill(&mut fresh).expect("the OS random number generator is available");
        EventIds::from_key(&database::secret_or(db, SECRET, &fresh).await?)
    }

    /// What is wrong with the key the database holds, for `tessera
    /// fsck`: none when it is sound or not made yet.
    pub async fn audit(db: &Database) -> Result<Option<String>, Error> {
        let key = database::secret(&db.client().await?, SECRET).await?;
        Ok(key.and_then(|k| EventIds::from_key(&k).err().map(|e| e.to_string())))
    }

    /// The ids made with `key` (16 bytes).
    fn from_key(key: &[u8]) -> Result<EventIds, Error> {
        Aes128::new_from_slice(key).map(EventIds).map_err(|_| {
            Error::Corrupt(format!(
                "the secrets row {SECRET} holds {} bytes, not 16; \
                 delete the row and a new key is made: the event ids readers kept then \
                 resume as ones too old do",
                key.len()
            ))
        })
    }

    /// The id readers know the event at `at` by.
    pub fn id(&self, at: Cursor) -> u128 {
        let place = (u128::from(at.xid) << 64) | u128::from(at.id as u64);
        let mut block = Array(place.to_be_bytes());
        self.0.encrypt_block(&mut block);
        u128::from_be_bytes(block.0)
    }

    /// Where the event readers know by `id` is (or would be) in the stream.
    pub fn place(&self, id: u128) -> Cursor {
        let mut block = Array(id.to_be_bytes());
        self.0.decrypt_block(&mut block);
        let place = u128::from_be_bytes(block.0);
        Cursor {
            xid: (place >> 64) as u64,
            id: place as u64 as i64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_its_place_and_tells_nothing_of_its_neighbours() {
        let ids = EventIds::from_key(&[7; 16]).unwrap();
        let at = |xid, id| Cursor { xid, id };
        for c in [at(0, 0), at(1, 1), at(741, 9_000), at(u64::MAX, i64::MAX)] {
            assert_eq!(ids.place(ids.id(c)), c);
        }
        let (a, b) = (ids.id(at(741, 9_000)), ids.id(at(741, 9_001)));
        assert!(
            (a ^ b).count_ones() > 32,
            "neighbours' ids share no visible order"
        );
        let other = EventIds::from_key(&[8; 16]).unwrap();
        assert_ne!(other.id(at(741, 9_000)), a, "another key, another id");
        assert!(EventIds::from_key(&[1; 5]).is_err());
    }

    #[tokio::test]
    async fn a_damaged_key_is_named_and_one_deleted_is_made_again() {
        let url = crate::queue::pg::cluster::fresh_database().await;
        let db = Database::connect(&url).await.unwrap();
        crate::database::schema::migrate(&db).await.unwrap();
        let client = db.client().await.unwrap();
        client
            .execute(
                "INSERT INTO secrets (name, value) VALUES ($1, $2)",
                &[&SECRET, &&b"short"[..]],
            )
            .await
            .unwrap();
        let why = EventIds::load(&db).await.unwrap_err().to_string();
        assert!(
            why.contains("5 bytes, not 16") && why.contains("delete the row"),
            "{why}"
        );
        client
            .execute("DELETE FROM secrets WHERE name = $1", &[&SECRET])
            .await
            .unwrap();
        let made = EventIds::load(&db).await.unwrap();
        let again = EventIds::load(&db).await.unwrap();
        let at = Cursor { xid: 5, id: 6 };
        assert_eq!(made.id(at), again.id(at), "one key, kept");
    }
}
