//! `tessera key issue|list|revoke`: thin clients of the key routes.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::exit::Usage;
use super::remote::RemoteArgs;
use crate::auth::{EffectClass, Grants, Scope};
use crate::paths;
use crate::store::Name;
use crate::wire::{IssueKey, IssuedKey, KeyList, KeyView};

/// Key subcommands (need an admin key).
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Issue a key; its secret is shown once.
    Issue(IssueArgs),
    /// List keys (never their secrets).
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Revoke a key: its next request is refused.
    Revoke {
        /// The key id.
        key_id: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Arguments of `key issue`; each grant flag repeats.
#[derive(Debug, Args)]
pub struct IssueArgs {
    /// A display label (grants nothing).
    #[arg(long)]
    label: String,
    /// Account id, for audit.
    #[arg(long)]
    account_id: Option<String>,
    /// Owner, for audit.
    #[arg(long)]
    owner: Option<String>,
    /// A queue the key may use.
    #[arg(long = "queue", value_parser = parse_name)]
    queues: Vec<Name>,
    /// A task kind the key may use.
    #[arg(long = "kind", value_parser = parse_name)]
    kinds: Vec<Name>,
    /// An effect class: read, write-internal, write-repo, public.
    #[arg(long = "effect-class", value_parser = parse_effect)]
    effect_classes: Vec<EffectClass>,
    /// A scope: namespace:X, surface:X, nouns:read, cas:write, verbs:claim, verbs:submit, verbs:enqueue, admin.
    #[arg(long = "scope", value_parser = parse_scope)]
    scopes: Vec<Scope>,
    /// Expiry, RFC 3339 (e.g. 2027-01-01T00:00:00Z).
    #[arg(long)]
    expires_at: Option<jiff::Timestamp>,
    /// Write the secret to this new file (mode 0600) instead of stdout.
    #[arg(long)]
    secret_file: Option<PathBuf>,
    #[command(flatten)]
    remote: RemoteArgs,
}

/// A name argument (queue, kind), checked by the name rule.
pub(super) fn parse_name(s: &str) -> Result<Name, String> {
    Name::parse("name", s).map_err(|e| e.to_string())
}

fn parse_scope(s: &str) -> Result<Scope, String> {
    s.parse()
        .map_err(|e: crate::auth::scope::UnknownScope| e.to_string())
}

fn parse_effect(s: &str) -> Result<EffectClass, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "expected read, write-internal, write-repo or public".to_string())
}

fn print_key(k: &KeyView) {
    let list = |v: Vec<String>| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(",")
        }
    };
    println!(
        "{}  {:<16} {}  scopes={} queues={} kinds={} effects={}{}{}",
        k.key_id,
        k.label,
        serde_json::to_value(k.principal_kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        list(k.grants.scopes.iter().map(ToString::to_string).collect()),
        list(k.grants.queues.iter().map(ToString::to_string).collect()),
        list(k.grants.kinds.iter().map(ToString::to_string).collect()),
        list(
            k.grants
                .effect_classes
                .iter()
                .map(|e| format!("{e:?}"))
                .collect()
        ),
        k.expires_at
            .map_or(String::new(), |t| format!("  expires {t}")),
        k.revoked_at
            .map_or(String::new(), |t| format!("  REVOKED {t}")),
    );
}

/// Issues a key. With `--secret-file`, the file is created (and must not
/// exist) before the key is issued, so a refused file never leaves a live
/// key whose secret is lost; if writing the secret fails after issuing,
/// the key is revoked.
async fn issue(a: IssueArgs) -> anyhow::Result<()> {
    let client = a.remote.client()?;
    let file = match &a.secret_file {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(|e| {
                    Usage(format!(
                        "cannot create the secret file {}: {e}; name a file that does not exist yet (no key was issued)",
                        path.display()
                    ))
                })?,
        ),
        None => None,
    };
    let body = IssueKey {
        label: a.label,
        account_id: a.account_id,
        owner: a.owner,
        grants: Grants {
            queues: a.queues,
            kinds: a.kinds,
            effect_classes: a.effect_classes,
            scopes: a.scopes,
        }
        .into(),
        expires_at: a.expires_at,
    };
    let issued = async {
        Ok::<IssuedKey, anyhow::Error>(
            client
                .post_json(&paths::KEY_ISSUE.at(&[]), &body)
                .await?
                .success()?
                .json()?,
        )
    }
    .await;
    let (issued, mut f, path) = match (issued, file, a.secret_file) {
        (Ok(issued), Some(f), Some(path)) => (issued, f, path),
        (Ok(issued), _, _) => {
            print_key(&issued.key);
            println!("{}", issued.secret);
            return Ok(());
        }
        (Err(e), _, path) => {
            if let Some(path) = path {
                let _ = std::fs::remove_file(&path);
            }
            return Err(e);
        }
    };
    print_key(&issued.key);
    let written = writeln!(f, "{}", issued.secret).and_then(|()| f.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&path);
        let revoked = client.delete(&key_path(&issued.key.key_id)).await;
        let revoked = revoked
            .map_err(anyhow::Error::from)
            .and_then(|r| Ok(r.success()?));
        return Err(match revoked {
            Ok(_) => anyhow::anyhow!(
                "writing the secret to {} failed ({e}); key {} was revoked, so no key is live without its secret: fix the file's folder and issue again",
                path.display(),
                issued.key.key_id
            ),
            Err(r) => anyhow::anyhow!(
                "writing the secret to {} failed ({e}) and revoking key {} failed too ({r:#}): revoke it with `tessera key revoke {}`",
                path.display(),
                issued.key.key_id,
                issued.key.key_id
            ),
        });
    }
    println!(
        "secret written to {} (mode 0600); it is not shown again",
        path.display()
    );
    Ok(())
}

fn key_path(key_id: &str) -> String {
    paths::KEY_REVOKE.at(&[key_id])
}

/// Runs a key subcommand.
pub async fn run(cmd: KeyCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        KeyCommand::Issue(a) => issue(a).await?,
        KeyCommand::List { remote } => {
            let list: KeyList = remote
                .client()?
                .get(&paths::KEY_LIST.at(&[]))
                .await?
                .success()?
                .json()?;
            for k in &list.keys {
                print_key(k);
            }
        }
        KeyCommand::Revoke { key_id, remote } => {
            let k: KeyView = remote
                .client()?
                .delete(&key_path(&key_id))
                .await?
                .success()?
                .json()?;
            print_key(&k);
        }
    }
    Ok(ExitCode::SUCCESS)
}
