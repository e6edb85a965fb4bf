//! Objects in an S3-compatible bucket (`--objects-url s3://BUCKET`), for
//! daemons that share their nouns: the keys keep the root's layout
//! (`objects/sha256/ab/cdef…`), a put is create-only (`If-None-Match: *`,
//! an existing object counts as written: same name, same bytes), and every
//! read re-hashes what the bucket returned. Bodies past [`MULTIPART_FROM`]
//! go up in parts, after a `HEAD` finds no object there yet.
//!
//! The store's calls are blocking (they run on the runtime's blocking
//! pool); each call here waits for its request on the daemon's runtime
//! ([`wait`]).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload, RetryConfig, WriteMultipart};
use tokio::runtime::Handle;

use super::object::object_path;
use super::{Error, Sha256};

/// Bodies from this size up are uploaded in parts of this size.
pub const MULTIPART_FROM: usize = 8 << 20;

/// How long one request may take before it is retried.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request and its retries may take in all before the caller
/// is answered that the bucket does not answer.
const RETRY_TIMEOUT: Duration = Duration::from_secs(10);

/// The bucket that holds the objects, and the runtime its requests run on.
#[derive(Clone, Debug)]
pub struct Bucket {
    s3: Arc<AmazonS3>,
    handle: Handle,
    /// `s3://BUCKET`, for messages.
    url: String,
    /// Where its writes are counted, for its garbage collector.
    ledger: Option<Arc<dyn Ledger>>,
    /// How long an object no write counts on is kept.
    grace: Duration,
}

/// Where the writes to a bucket are counted (the shared database's
/// `objects` table), so that its garbage collector never deletes an
/// object a write counts on: a put that finds an object there relies on
/// it, and the collector deletes one only under its row's lock, when no
/// write has counted on it for its grace period.
pub trait Ledger: Send + Sync + std::fmt::Debug {
    /// Counts a write of the object `sha` now (durably, before the write
    /// goes to the bucket).
    fn count(&self, sha: &Sha256) -> Result<(), Error>;
}

/// How long an object nothing names is kept by default: long enough for
/// any write whose object went up first to name it.
pub const GRACE: Duration = Duration::from_secs(24 * 3600);

/// What can be wrong with `--objects-url` or `[objects]`.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadConfig(String);

impl Bucket {
    /// The bucket at `url` (`s3://BUCKET`), its endpoint, region and
    /// credentials from the `AWS_*` environment variables, then from
    /// `options` (the config file's `[objects]`: any S3 setting of the
    /// `object_store` crate by name, such as `endpoint`, `region`,
    /// `access_key_id`, `secret_access_key`, `allow_http`). Requests run
    /// on `handle`'s runtime. Nothing is sent yet ([`Bucket::check`]).
    pub fn open(
        url: &str,
        options: &BTreeMap<String, String>,
        handle: Handle,
    ) -> Result<Bucket, BadConfig> {
        if !url.starts_with("s3://") || url.len() <= "s3://".len() {
            return Err(BadConfig(format!(
                "--objects-url {url:?} is not an S3 URL: write it as s3://BUCKET (the endpoint, region and keys come from AWS_* variables or the config file's [objects])"
            )));
        }
        install_crypto();
        let retry = RetryConfig {
            max_retries: 3,
            retry_timeout: RETRY_TIMEOUT,
            ..RetryConfig::default()
        };
        // The timeout as a setting, not as client options: those would
        // replace the environment's `AWS_ALLOW_HTTP`.
        let mut builder = AmazonS3Builder::from_env()
            .with_config(
                AmazonS3ConfigKey::Client(object_store::ClientConfigKey::Timeout),
                format!("{}s", REQUEST_TIMEOUT.as_secs()),
            )
            .with_retry(retry);
        for (name, value) in options {
            let key: AmazonS3ConfigKey = name.to_ascii_lowercase().parse().map_err(|_| {
                BadConfig(format!(
                    "[objects] {name} is not an S3 setting; use endpoint, region, access_key_id, secret_access_key, allow_http or another object_store S3 key"
                ))
            })?;
            builder = builder.with_config(key, value);
        }
        let s3 = builder
            .with_url(url)
            .build()
            .map_err(|e| BadConfig(format!("--objects-url {url}: {e}")))?;
        Ok(Bucket {
            s3: Arc::new(s3),
            handle,
            url: url.to_string(),
            ledger: None,
            grace: GRACE,
        })
    }

    /// The bucket with its writes counted in `ledger`, and objects no
    /// write counts on kept for `grace` before the collector may delete
    /// them.
    pub fn counted(mut self, ledger: Arc<dyn Ledger>, grace: Duration) -> Bucket {
        self.ledger = Some(ledger);
        self.grace = grace;
        self
    }

    /// How long an object no write counts on is kept.
    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// Asks the bucket for an object that is never there: an answer
    /// (found or not) shows the endpoint, bucket and credentials work.
    pub async fn check(&self) -> Result<(), Error> {
        match self.s3.head(&Key::from("objects/.tessera-check")).await {
            Ok(_) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unavailable("reaching the bucket", e)),
        }
    }

    /// Stores `bytes` as the object `sha` (their sha256): create-only, so
    /// an object already there (same name, same bytes) is left as it is;
    /// counted in the ledger, when there is one.
    pub fn put(&self, sha: &Sha256, bytes: &[u8]) -> Result<(), Error> {
        self.count(sha)?;
        wait(&self.handle, self.send(sha, bytes.to_vec()))
    }

    /// Counts on the object `sha` in the ledger, when there is one: from
    /// now until the grace period has passed, the collector leaves it.
    /// Comes before its [`Bucket::send`].
    pub fn count(&self, sha: &Sha256) -> Result<(), Error> {
        match &self.ledger {
            Some(ledger) => ledger.count(sha),
            None => Ok(()),
        }
    }

    /// Stores `bytes` as the object `sha`, create-only, without counting
    /// on it: the second half of [`Bucket::put`], for a caller on the
    /// bucket's runtime that counted first.
    pub async fn send(&self, sha: &Sha256, bytes: Vec<u8>) -> Result<(), Error> {
        let key = key(sha);
        async {
            if bytes.len() < MULTIPART_FROM {
                let payload = PutPayload::from(bytes);
                return match self
                    .s3
                    .put_opts(&key, payload, PutMode::Create.into())
                    .await
                {
                    Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
                    Err(e) => Err(e),
                };
            }
            match self.s3.head(&key).await {
                Ok(_) => return Ok(()),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
            let upload = self.s3.put_multipart(&key).await?;
            let mut parts = WriteMultipart::new_with_chunk_size(upload, MULTIPART_FROM);
            parts.write(&bytes);
            parts.finish().await.map(|_| ())
        }
        .await
        .map_err(|e| self.unavailable("writing an object to the bucket", e))
    }

    /// The object `sha`, re-hashed: `None` when the bucket has none.
    pub fn get(&self, sha: &Sha256) -> Result<Option<Vec<u8>>, Error> {
        let key = key(sha);
        let got = wait(&self.handle, async {
            match self.s3.get(&key).await {
                Ok(found) => found.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .map_err(|e| self.unavailable("reading an object from the bucket", e))?;
        let Some(bytes) = got else {
            return Ok(None);
        };
        if Sha256::of(&bytes) != *sha {
            return Err(Error::CorruptObject {
                path: format!("{}/{}", self.url, object_path(sha)),
            });
        }
        Ok(Some(bytes.to_vec()))
    }

    /// Deletes the object `sha` (the garbage collector's).
    pub fn delete(&self, sha: &Sha256) -> Result<(), Error> {
        let key = key(sha);
        wait(&self.handle, self.s3.delete(&key))
            .map_err(|e| self.unavailable("deleting an object from the bucket", e))
    }

    fn unavailable(&self, what: &str, e: object_store::Error) -> Error {
        Error::Unavailable {
            what: format!("{what} {}", self.url),
            cause: e.to_string(),
        }
    }
}

/// The bucket key of the object `sha`: the root's layout.
fn key(sha: &Sha256) -> Key {
    Key::from(object_path(sha))
}

/// Runs `fut` to its end on `handle`'s runtime from blocking code: on a
/// blocking-pool thread, or on one of the runtime's own workers (which
/// then lets its other tasks move to another worker while it waits).
pub fn wait<F: Future>(handle: &Handle, fut: F) -> F::Output {
    match Handle::try_current() {
        Ok(current) if current.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(fut))
        }
        _ => handle.block_on(fut),
    }
}

/// The TLS provider for HTTPS endpoints (ring, as the build selects):
/// set once per process before a client is built, which panics otherwise.
#[expect(
    deprecated,
    reason = "ring's provider has no post-quantum key exchange; aws-lc-rs, which has, needs a C++ toolchain and minutes of build"
)]
fn install_crypto() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
