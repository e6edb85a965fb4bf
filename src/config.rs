//! The daemon's configuration: defaults, an optional TOML file
//! (`--config`), then command-line flags, in that order of precedence.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::auth::throttle::Budget;

/// Default root directory, relative to the working directory.
pub const DEFAULT_ROOT: &str = "./tessera-root";
/// Default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7700";

/// Everything `serve` needs.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The root directory.
    pub root: PathBuf,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// Request limits.
    pub limits: Limits,
    /// Queue bounds.
    pub queue: QueueLimits,
    /// Where noun objects go when several daemons share their nouns.
    pub objects: Objects,
}

/// `[objects]`: noun objects in an S3-compatible bucket (and noun refs in
/// the queue's database), for daemons that share their nouns. Every key
/// but its own two is an S3 setting, checked by name when the bucket is
/// opened (serde's `deny_unknown_fields` would refuse them all: it does
/// not combine with a flattened map).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Objects {
    /// The bucket, `s3://BUCKET`; `serve --objects-url` and
    /// `TESSERA_OBJECTS_URL` set it too. Needs `[queue] url`.
    pub url: Option<String>,
    /// Seconds an object no write has counted on (and nothing names) is
    /// kept before the garbage collector deletes it [default: 86400].
    pub garbage_grace_s: Option<u64>,
    /// S3 settings by name (`endpoint`, `region`, `access_key_id`,
    /// `secret_access_key`, `allow_http`, …), over the `AWS_*`
    /// environment variables.
    #[serde(flatten)]
    pub settings: std::collections::BTreeMap<String, toml::Value>,
}

impl Objects {
    /// How long an object nothing names is kept.
    pub fn garbage_grace(&self) -> std::time::Duration {
        self.garbage_grace_s
            .map_or(crate::store::bucket::GRACE, std::time::Duration::from_secs)
    }

    /// The S3 settings as text (`allow_http = true` as `"true"`).
    pub fn settings(&self) -> std::collections::BTreeMap<String, String> {
        self.settings
            .iter()
            .map(|(k, v)| match v {
                toml::Value::String(s) => (k.clone(), s.clone()),
                other => (k.clone(), other.to_string()),
            })
            .collect()
    }
}

/// Bounds on splits, and the journal's segment size.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueLimits {
    /// Deepest child level (top-level tasks are depth 0).
    pub max_split_depth: u32,
    /// Most children one task may have.
    pub max_children: usize,
    /// Space preallocated for each segment of the task journal and of the
    /// noun log, in MiB (at least 1): changes are refused (`507`) only
    /// when a new segment cannot be preallocated.
    pub journal_segment_mib: u64,
    /// Closed journal segments after the snapshot, in MiB (at least 1),
    /// past which (and past half the snapshot's size) the daemon folds
    /// them into a new snapshot in the background (also past 8
    /// segments): a start replays at most about that much plus the open
    /// segment.
    pub fold_journal_mib: u64,
    /// The PostgreSQL database that holds the queue instead of the root's
    /// journal (`postgres://USER@HOST:PORT/DATABASE`), shared by every
    /// daemon given the same one; `serve --queue-url` and
    /// `TESSERA_QUEUE_URL` set it too.
    pub url: Option<String>,
}

impl Default for QueueLimits {
    fn default() -> QueueLimits {
        QueueLimits {
            max_split_depth: 4,
            max_children: 64,
            journal_segment_mib: crate::store::log::segment::SEGMENT_BYTES >> 20,
            fold_journal_mib: crate::queue::FoldAfter::default().bytes >> 20,
            url: None,
        }
    }
}

impl QueueLimits {
    /// The journal's segment size in bytes.
    pub fn segment_bytes(&self) -> u64 {
        self.journal_segment_mib.max(1) << 20
    }

    /// When the journal is folded into a new snapshot.
    pub fn fold_after(&self) -> crate::queue::FoldAfter {
        crate::queue::FoldAfter {
            bytes: self.fold_journal_mib.max(1) << 20,
            ..crate::queue::FoldAfter::default()
        }
    }

    /// As the queue's split limits.
    pub fn split_limits(&self) -> crate::queue::SplitLimits {
        crate::queue::SplitLimits {
            max_depth: self.max_split_depth,
            max_children: self.max_children,
        }
    }
}

/// Request limits: connections, body sizes and the failed worker
/// credential budgets.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest request body on the general API, in bytes.
    pub max_body_bytes: usize,
    /// Largest worker body (final submit, staged part, `@file:` target).
    pub worker_body_bytes: usize,
    /// Bytes of request bodies all requests together may hold at once;
    /// past it a request answers `503 busy` with `Retry-After`.
    pub max_body_bytes_in_flight: usize,
    /// Open connections at most; lowered at start to fit the process's
    /// open-file limit.
    pub max_connections: usize,
    /// How long a client may take to send a request head, and how long a
    /// kept-alive connection may wait for its next one, in milliseconds.
    /// A request body that pauses this long is refused too.
    pub header_timeout_ms: u64,
    /// Failed worker credentials one peer (IPv4 address, IPv6 /64) may
    /// send before its worker calls are refused with `429`.
    pub worker_failures_per_peer: Budget,
    /// Failed worker credentials all peers together may send.
    pub worker_failures_overall: Budget,
    /// Events a `/v1/events` reader may fall behind before it is cut off
    /// (told where to resume).
    pub events_backlog: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            root: PathBuf::from(DEFAULT_ROOT),
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            limits: Limits::default(),
            queue: QueueLimits::default(),
            objects: Objects::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_body_bytes: 8 * 1024 * 1024,
            worker_body_bytes: 2 * 1024 * 1024,
            max_body_bytes_in_flight: 256 * 1024 * 1024,
            max_connections: 10_000,
            header_timeout_ms: 10_000,
            worker_failures_per_peer: Budget {
                burst: 20,
                per_second: 5,
            },
            worker_failures_overall: Budget {
                burst: 1_000,
                per_second: 200,
            },
            events_backlog: crate::events::BACKLOG,
        }
    }
}

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Unreadable file.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Invalid TOML or an unknown field.
    #[error("config file {path} is invalid: {message}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        message: String,
    },
}

impl Config {
    /// Loads a TOML config file over the defaults. A relative `root` in
    /// the file is relative to the file's folder, wherever the daemon is
    /// started from (the default root stays relative to the working
    /// directory, and so does a `--root` flag).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, path.parent().unwrap_or(Path::new(""))).map_err(|message| {
            ConfigError::Parse {
                path: path.display().to_string(),
                message,
            }
        })
    }

    /// Parses a config file's text; a relative `root` it names is joined
    /// to `folder`, the file's folder.
    fn parse(text: &str, folder: &Path) -> Result<Config, String> {
        let mut config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        let names_root = text
            .parse::<toml::Table>()
            .is_ok_and(|t| t.contains_key("root"));
        if names_root && config.root.is_relative() {
            config.root = folder.join(&config.root);
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relative_root_in_the_file_is_relative_to_the_files_folder() {
        let etc = Path::new("/etc/tessera");
        let cases = [
            ("root = \"data\"\n", "/etc/tessera/data"),
            ("root = \"../srv/root\"\n", "/etc/tessera/../srv/root"),
            ("root = \"/var/lib/tessera\"\n", "/var/lib/tessera"),
            ("", DEFAULT_ROOT),
        ];
        for (text, want) in cases {
            let c = Config::parse(text, etc).unwrap();
            assert_eq!(c.root, Path::new(want), "{text:?}");
        }
    }

    #[test]
    fn failure_budgets_are_set_in_the_limits_table() {
        let c: Config = toml::from_str(
            "[limits.worker_failures_per_peer]\nburst = 3\nper_second = 1\n\
             [limits.worker_failures_overall]\nburst = 50\nper_second = 10\n",
        )
        .unwrap();
        assert_eq!(
            (
                c.limits.worker_failures_per_peer,
                c.limits.worker_failures_overall
            ),
            (
                Budget {
                    burst: 3,
                    per_second: 1
                },
                Budget {
                    burst: 50,
                    per_second: 10
                }
            )
        );
        assert_eq!(
            c.limits.worker_body_bytes,
            Limits::default().worker_body_bytes
        );
        assert!(toml::from_str::<Config>("[limits.worker_failures_overall]\nburst = 1\n").is_err());
    }

    #[test]
    fn the_objects_table_takes_s3_settings_by_name() {
        let c: Config = toml::from_str(
            "[objects]\nurl = \"s3://b\"\ngarbage_grace_s = 60\n\
             endpoint = \"http://127.0.0.1:9000\"\nallow_http = true\n",
        )
        .unwrap();
        assert_eq!(c.objects.url.as_deref(), Some("s3://b"));
        assert_eq!(
            c.objects.garbage_grace(),
            std::time::Duration::from_secs(60)
        );
        assert_eq!(
            c.objects.settings(),
            [
                ("allow_http".to_string(), "true".to_string()),
                ("endpoint".to_string(), "http://127.0.0.1:9000".to_string())
            ]
            .into()
        );
    }

    #[test]
    fn connection_bounds_are_set_in_the_limits_table() {
        let d = Limits::default();
        assert_eq!(
            (
                d.max_connections,
                d.header_timeout_ms,
                d.max_body_bytes_in_flight
            ),
            (10_000, 10_000, 256 * 1024 * 1024)
        );
        let c: Config = toml::from_str(
            "[limits]\nmax_connections = 500\nheader_timeout_ms = 300\n\
             max_body_bytes_in_flight = 1048576\n",
        )
        .unwrap();
        assert_eq!(
            (
                c.limits.max_connections,
                c.limits.header_timeout_ms,
                c.limits.max_body_bytes_in_flight
            ),
            (500, 300, 1_048_576)
        );
    }
}
