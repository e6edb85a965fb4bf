//! `tessera noun get|put|versions`: thin clients of the noun routes.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use base64::Engine;
use clap::{Args, Subcommand};

use super::remote::RemoteArgs;
use crate::paths;
use crate::store::{NounRef, Visibility};
use crate::wire::{PutNoun, PutNounReply};

/// Noun subcommands.
#[derive(Debug, Subcommand)]
pub enum NounCommand {
    /// Print a noun's bytes (the latest version, or --version N).
    Get {
        /// The noun, as NAMESPACE/STORE/KEY.
        noun: String,
        /// A version number.
        #[arg(long)]
        version: Option<u64>,
        /// Check the version's sha256 (a pin); a mismatch fails.
        #[arg(long)]
        sha256: Option<String>,
        /// Write the bytes to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Write a new version of a noun from a file.
    Put(PutArgs),
    /// List a noun's versions.
    Versions {
        /// The noun, as NAMESPACE/STORE/KEY.
        noun: String,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Arguments of `noun put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// The noun, as NAMESPACE/STORE/KEY.
    noun: String,
    /// The body file (`-` for stdin). Parsed as JSON unless --raw.
    #[arg(long)]
    file: PathBuf,
    /// Store the file's bytes exactly instead of as canonical JSON.
    #[arg(long)]
    raw: bool,
    /// The version this write follows (0 to create).
    #[arg(long)]
    expected_version: Option<u64>,
    /// The noun's type, such as noun.skill_pack.
    #[arg(long = "type")]
    noun_type: Option<String>,
    /// The media type.
    #[arg(long)]
    media_type: Option<String>,
    /// private, surface_only, allowlist_surfaces or public.
    #[arg(long, value_parser = parse_visibility)]
    visibility: Option<Visibility>,
    /// The producer surface of a new noun.
    #[arg(long)]
    producer_surface: Option<String>,
    /// Surfaces allowed to read (with allowlist_surfaces); repeatable.
    #[arg(long = "allowed-surface")]
    allowed_surfaces: Vec<String>,
    /// Write nothing when the latest version has the same bytes.
    #[arg(long)]
    skip_unchanged: bool,
    /// Report what would happen; write nothing.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    remote: RemoteArgs,
}

fn parse_visibility(s: &str) -> Result<Visibility, String> {
    serde_json::from_value(serde_json::Value::String(s.into()))
        .map_err(|_| "expected private, surface_only, allowlist_surfaces or public".to_string())
}

fn noun_path(noun: &str) -> anyhow::Result<String> {
    let parts: Vec<&str> = noun.split('/').collect();
    let [ns, store, key] = parts.as_slice() else {
        bail!("name the noun as NAMESPACE/STORE/KEY, not {noun:?}");
    };
    Ok(paths::NOUN_GET.at(&[ns, store, key]))
}

/// Runs a noun subcommand.
pub async fn run(cmd: NounCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        NounCommand::Get {
            noun,
            version,
            sha256,
            output,
            remote,
        } => {
            let mut query = Vec::new();
            if let Some(v) = version {
                query.push(format!("version={v}"));
            }
            if let Some(s) = sha256 {
                query.push(format!("sha256={s}"));
            }
            let mut path = noun_path(&noun)?;
            if !query.is_empty() {
                path = format!("{path}?{}", query.join("&"));
            }
            let reply = remote.client()?.get(&path).await?.success()?;
            eprintln!(
                "{noun} version {} sha256 {} ({} bytes)",
                reply.header("x-tessera-version").unwrap_or("?"),
                reply.header("x-tessera-sha256").unwrap_or("?"),
                reply.body.len()
            );
            match output {
                Some(file) => std::fs::write(&file, &reply.body)
                    .with_context(|| format!("writing {}", file.display()))?,
                None => std::io::stdout().write_all(&reply.body)?,
            }
        }
        NounCommand::Put(args) => {
            let bytes = if args.file.as_os_str() == "-" {
                let mut buf = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)?;
                buf
            } else {
                std::fs::read(&args.file)
                    .with_context(|| format!("reading {}", args.file.display()))?
            };
            let mut env = PutNoun {
                expected_version: args.expected_version,
                noun_type: args.noun_type,
                media_type: args.media_type,
                visibility: args.visibility,
                producer_surface: args.producer_surface,
                allowed_surfaces: (!args.allowed_surfaces.is_empty())
                    .then_some(args.allowed_surfaces),
                skip_unchanged: args.skip_unchanged,
                dry_run: args.dry_run,
                ..PutNoun::default()
            };
            if args.raw {
                env.body_base64 = Some(base64::engine::general_purpose::STANDARD.encode(&bytes));
            } else {
                env.body = Some(serde_json::from_slice(&bytes).with_context(|| {
                    format!(
                        "{} is not JSON; pass --raw to store its bytes exactly",
                        args.file.display()
                    )
                })?);
            }
            let reply: PutNounReply = args
                .remote
                .client()?
                .put_json(&noun_path(&args.noun)?, &env)
                .await?
                .success()?
                .json()?;
            println!(
                "{}: {} version {} sha256 {} ({} bytes){}",
                args.noun,
                reply.outcome,
                reply.version.map_or("-".into(), |v| v.to_string()),
                reply.sha256,
                reply.size,
                if reply.dry_run {
                    " [dry run: nothing written]"
                } else {
                    ""
                }
            );
        }
        NounCommand::Versions { noun, remote } => {
            let path = format!("{}/versions", noun_path(&noun)?);
            let reply: NounRef = remote.client()?.get(&path).await?.success()?.json()?;
            println!(
                "{:>7}  {:64}  {:>9}  {:20}  created_by",
                "version", "sha256", "size", "created_at"
            );
            for v in &reply.versions {
                println!(
                    "{:>7}  {}  {:>9}  {:20}  {}{}",
                    v.version,
                    v.sha256,
                    v.size,
                    v.created_at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    v.created_by,
                    if v.quarantined { "  [quarantined]" } else { "" }
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
