//! `ozone sh key put|get|cat|ls|info|delete|cp|rename` (Ozone's `ozone sh
//! key`, with `BUCKET/KEY` where Ozone writes `/volume/bucket/key`). `cargo
//! xtask key …` runs these same functions.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use ec_client::{BucketOptions, Client, ClientError, KeyInfo, ReplicaIndex, ReplicationConfig};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::output;

/// Files at least this large get a progress bar (on a terminal).
const PROGRESS_FROM: u64 = 8 << 20;

/// Bytes moved per read or write call.
const PIECE: usize = 4 << 20;

/// Keys asked of the om per page of `ls`.
const LS_PAGE: u32 = 1000;

/// Key commands.
#[derive(Debug, Subcommand)]
pub enum KeyCommand {
    /// Write FILE as BUCKET/KEY.
    Put {
        /// BUCKET/KEY.
        target: String,
        /// File to upload.
        file: PathBuf,
        /// Replication: rs-D-P-SIZEk (e.g. rs-3-2-1024k), xor-D-1-SIZEk, ONE
        /// or THREE. Default: the bucket's.
        #[arg(long, value_name = "CONFIG")]
        replication: Option<ReplicationConfig>,
        /// Create the bucket (with --replication as its default) if missing.
        #[arg(long)]
        create_bucket: bool,
    },
    /// Read BUCKET/KEY into OUT (`-`: stdout). A file is written under a
    /// temporary name and renamed when complete: a failed read leaves none.
    Get {
        /// BUCKET/KEY.
        target: String,
        /// Output file, or `-` for stdout.
        out: String,
        /// First byte to read.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Bytes to read (default: to the end).
        #[arg(long)]
        length: Option<u64>,
    },
    /// Write BUCKET/KEY to stdout.
    Cat {
        /// BUCKET/KEY.
        target: String,
    },
    /// List the keys of BUCKET.
    Ls {
        /// Bucket.
        bucket: String,
        /// Only keys starting with this prefix.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Show BUCKET/KEY: length, replication, block groups and, for each
    /// replica, the length its datanode holds.
    Info {
        /// BUCKET/KEY.
        target: String,
    },
    /// Delete BUCKET/KEY (its blocks are freed on the datanodes by the om's
    /// block deleting service).
    Delete {
        /// BUCKET/KEY.
        target: String,
    },
    /// Copy BUCKET/KEY to BUCKET2/KEY2 (bytes streamed through this client;
    /// the copy takes the destination bucket's replication).
    Cp {
        /// Source BUCKET/KEY.
        from: String,
        /// Destination BUCKET/KEY.
        to: String,
    },
    /// Rename BUCKET/KEY to NEW_KEY in the same bucket: one om transaction,
    /// no data copied; a key already named NEW_KEY is replaced.
    Rename {
        /// BUCKET/KEY.
        target: String,
        /// The new key name.
        new_key: String,
    },
}

/// Splits `BUCKET/KEY`.
///
/// # Errors
/// When either part is empty or there is no `/`.
pub fn split(target: &str) -> anyhow::Result<(&str, &str)> {
    match target.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() => Ok((b, k)),
        _ => bail!("expected BUCKET/KEY, got `{target}`"),
    }
}

/// A progress bar over `len` bytes, shown on a terminal for large transfers.
fn progress(len: u64, what: &str) -> ProgressBar {
    if len < PROGRESS_FROM {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_message(what.to_string());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Uploads `file` as `target`; with `create_bucket`, creates a missing
/// bucket first (its default replication `replication`). Returns the key.
///
/// # Errors
/// An unreadable file (a directory is named as such), client errors.
pub async fn put(
    client: &Client,
    target: &str,
    file: &Path,
    replication: Option<ReplicationConfig>,
    create_bucket: bool,
) -> anyhow::Result<KeyInfo> {
    let (bucket, key) = split(target)?;
    let meta = tokio::fs::metadata(file)
        .await
        .with_context(|| format!("reading {}", file.display()))?;
    if meta.is_dir() {
        bail!("{} is a directory; put takes a file", file.display());
    }
    if create_bucket {
        match client.bucket(bucket).await {
            Ok(_) => {}
            Err(ClientError::BucketNotFound(_)) => {
                client
                    .create_bucket(
                        bucket,
                        BucketOptions {
                            replication,
                            block_size: None,
                            ..Default::default()
                        },
                    )
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut f = tokio::fs::File::open(file)
        .await
        .with_context(|| format!("opening {}", file.display()))?;
    let w = client.create_key(bucket, key, replication).await?;
    let bar = progress(meta.len(), target);
    fill_key(&mut f, w, &bar, |e| {
        anyhow::Error::new(e).context(format!("reading {}", file.display()))
    })
    .await
}

/// Copies `source` into the new key `w` a piece ([`PIECE`] bytes) at a time,
/// advancing `bar`, and commits it. A failed read (described by
/// `read_error`) or write leaves the key uncommitted, its om session aborted
/// before this returns.
///
/// # Errors
/// `read_error`'s error; client errors writing or committing.
async fn fill_key(
    source: &mut (impl tokio::io::AsyncRead + Unpin),
    mut w: ec_client::KeyOutputStream,
    bar: &ProgressBar,
    read_error: impl Fn(std::io::Error) -> anyhow::Error,
) -> anyhow::Result<KeyInfo> {
    let mut buf = vec![0u8; PIECE];
    let copied = async {
        loop {
            let n = source.read(&mut buf).await.map_err(&read_error)?;
            if n == 0 {
                return Ok::<_, anyhow::Error>(());
            }
            w.write(&buf[..n]).await?;
            bar.inc(n as u64);
        }
    }
    .await;
    if let Err(e) = copied {
        // Aborted here and now: a drop would leave it to a task that the
        // process's exit cuts short, so the om would hold the session until
        // its lease ran out.
        let _ = w.abort().await;
        bar.abandon();
        return Err(e);
    }
    match w.close().await {
        Ok(info) => {
            bar.finish_and_clear();
            Ok(info)
        }
        Err(e) => {
            bar.abandon();
            Err(e.into())
        }
    }
}

/// The bytes `offset..offset+length` (to the end without `length`) of
/// `target` into `out` (`-`: stdout). A file is written as `OUT.partial`
/// and renamed to `OUT` once complete; on failure it is removed.
///
/// # Errors
/// A range outside the key, client errors, file errors.
pub async fn get(
    client: &Client,
    target: &str,
    out: &str,
    offset: u64,
    length: Option<u64>,
) -> anyhow::Result<u64> {
    let (bucket, key) = split(target)?;
    let stream = client.open_key(bucket, key).await?;
    let len = stream.len();
    if offset > len {
        bail!("offset {offset} is past the end of {target} ({len} bytes)");
    }
    let end = match length {
        Some(l) => offset
            .checked_add(l)
            .filter(|e| *e <= len)
            .with_context(|| {
                format!("range {offset}+{l} ends past the end of {target} ({len} bytes)")
            })?,
        None => len,
    };
    if out == "-" {
        let mut sink = tokio::io::stdout();
        match copy_range(&stream, offset, end, &mut sink, &ProgressBar::hidden()).await {
            Ok(()) => return Ok(end - offset),
            Err(CopyError::Read(e)) => return Err(e),
            Err(CopyError::Write(e)) => return Err(output::OutputError::from(e).into()),
        }
    }
    let final_path = PathBuf::from(out);
    let partial = PathBuf::from(format!("{out}.partial"));
    let written = async {
        let mut f = tokio::fs::File::create(&partial)
            .await
            .with_context(|| format!("creating {}", partial.display()))?;
        let bar = progress(end - offset, target);
        copy_range(&stream, offset, end, &mut f, &bar)
            .await
            .map_err(|e| match e {
                CopyError::Read(e) => e,
                CopyError::Write(e) => {
                    anyhow::Error::new(e).context(format!("writing {}", partial.display()))
                }
            })?;
        f.sync_all()
            .await
            .with_context(|| format!("syncing {}", partial.display()))?;
        bar.finish_and_clear();
        tokio::fs::rename(&partial, &final_path)
            .await
            .with_context(|| format!("renaming {} to {out}", partial.display()))
    }
    .await;
    if let Err(e) = written {
        // Best effort: the partial file is ours, and the error is what matters.
        let _ = tokio::fs::remove_file(&partial).await;
        return Err(e);
    }
    Ok(end - offset)
}

/// Copies `start..end` of `stream` into `sink` in [`PIECE`]s.
async fn copy_range(
    stream: &ec_client::KeyInputStream,
    start: u64,
    end: u64,
    sink: &mut (impl tokio::io::AsyncWrite + Unpin),
    bar: &ProgressBar,
) -> Result<(), CopyError> {
    let mut at = start;
    while at < end {
        let n = (end - at).min(PIECE as u64);
        let bytes = stream
            .read_range(at, n)
            .await
            .map_err(|e| CopyError::Read(e.into()))?;
        if bytes.is_empty() {
            return Err(CopyError::Read(anyhow::anyhow!(
                "the key ended early, at byte {at}"
            )));
        }
        sink.write_all(&bytes).await.map_err(CopyError::Write)?;
        at += bytes.len() as u64;
        bar.inc(bytes.len() as u64);
    }
    sink.flush().await.map_err(CopyError::Write)?;
    Ok(())
}

/// Why [`copy_range`] stopped: reading the key, or writing where it goes
/// (kept apart so that only a closed stdout counts as a quiet end).
enum CopyError {
    Read(anyhow::Error),
    Write(std::io::Error),
}

/// The key, its groups and each replica's stored length (asked of its
/// datanode with GetCommittedBlockLength; an error in its place when the
/// datanode does not answer), as JSON.
///
/// # Errors
/// Client errors.
pub async fn info_json(client: &Client, target: &str) -> anyhow::Result<serde_json::Value> {
    let (bucket, key) = split(target)?;
    let info = client.key_info(bucket, key).await?;
    let mut groups = Vec::new();
    for g in &info.block_groups {
        let mut replicas = Vec::new();
        for loc in &g.pipeline.locations {
            let length = match block_stream::XceiverClientManager::direct_with(
                &loc.datanode.address,
                client.config().xceiver.clone(),
            ) {
                Ok(dn) => match dn
                    .with_fixed_token(g.token.as_ref())
                    .get_committed_block_length(g.block_id(loc.replica_index))
                    .await
                {
                    Ok(l) => json!(l),
                    Err(e) => json!({ "error": e.to_string() }),
                },
                Err(e) => json!({ "error": e.to_string() }),
            };
            replicas.push(json!({
                "index": ReplicaIndex::to_wire(loc.replica_index),
                "datanode": loc.datanode.uuid.as_str(),
                "address": loc.datanode.address,
                "length": length,
            }));
        }
        groups.push(json!({
            "container_id": g.container_id,
            "local_id": g.local_id,
            "length": g.length,
            "replicas": replicas,
        }));
    }
    Ok(json!({
        "bucket": info.bucket,
        "name": info.name,
        "length": info.length,
        "replication": info.replication.to_string(),
        "created_unix_ms": info.created_unix_ms,
        "generation": info.generation,
        "metadata": info.metadata,
        "block_groups": groups,
    }))
}

/// The text form of [`info_json`]: one line per group, one per replica.
fn info_text(doc: &serde_json::Value) -> String {
    let mut out = format!(
        "{}/{}: {} bytes, {}, generation {}\n",
        doc["bucket"].as_str().unwrap_or_default(),
        doc["name"].as_str().unwrap_or_default(),
        doc["length"],
        doc["replication"].as_str().unwrap_or_default(),
        doc["generation"],
    );
    for (i, g) in doc["block_groups"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        out.push_str(&format!(
            "  block group {i}: container {} local id {}, {} bytes\n",
            g["container_id"], g["local_id"], g["length"]
        ));
        for r in g["replicas"].as_array().into_iter().flatten() {
            let index = match r["index"].as_u64() {
                Some(0) | None => "replica".to_string(),
                Some(n) => format!("index {n}"),
            };
            let held = match &r["length"] {
                serde_json::Value::Number(n) => format!("holds {n} bytes"),
                other => format!("unreadable: {}", other["error"].as_str().unwrap_or("?")),
            };
            out.push_str(&format!(
                "    {index} on datanode {} ({}): {held}\n",
                r["datanode"].as_str().unwrap_or_default(),
                r["address"].as_str().unwrap_or_default(),
            ));
        }
    }
    out.trim_end().to_string()
}

/// Runs a key command; `as_json` prints JSON instead of text where a command
/// prints a result.
///
/// # Errors
/// Client errors (a missing key is `ClientError::KeyNotFound`), file and
/// output errors.
pub async fn run(client: &Client, cmd: KeyCommand, as_json: bool) -> anyhow::Result<()> {
    match cmd {
        KeyCommand::Put {
            target,
            file,
            replication,
            create_bucket,
        } => {
            let info = put(client, &target, &file, replication, create_bucket).await?;
            if as_json {
                output::json(&json!({
                    "bucket": info.bucket, "name": info.name, "length": info.length,
                    "replication": info.replication.to_string(), "generation": info.generation,
                }))?;
            } else {
                output::status(format_args!(
                    "put {target}: {} bytes, {}",
                    info.length, info.replication
                ));
            }
        }
        KeyCommand::Get {
            target,
            out,
            offset,
            length,
        } => {
            let n = get(client, &target, &out, offset, length).await?;
            if out != "-" {
                output::status(format_args!("got {target}: {n} bytes into {out}"));
            }
        }
        KeyCommand::Cat { target } => {
            get(client, &target, "-", 0, None).await?;
        }
        KeyCommand::Ls { bucket, prefix } => {
            // Page by page, printed as it comes: a bucket of any size lists
            // in bounded memory (and within the om's message limit).
            let mut after = String::new();
            let mut first = true;
            if as_json {
                output::raw("[")?;
            }
            loop {
                let keys = client.list_keys(&bucket, &prefix, &after, LS_PAGE).await?;
                for k in &keys {
                    if as_json {
                        let entry = json!({
                            "name": k.name, "length": k.length,
                            "replication": k.replication.to_string(),
                            "created_unix_ms": k.created_unix_ms, "generation": k.generation,
                        });
                        let sep = if first { "\n  " } else { ",\n  " };
                        output::raw(&format!("{sep}{entry}"))?;
                    } else {
                        output::line(format_args!(
                            "{:>14}  {:<14}  {}",
                            k.length,
                            k.replication.to_string(),
                            k.name
                        ))?;
                    }
                    first = false;
                }
                match keys.last() {
                    Some(last) if keys.len() == LS_PAGE as usize => after.clone_from(&last.name),
                    _ => break,
                }
            }
            if as_json {
                output::line(if first { "]" } else { "\n]" })?;
            }
        }
        KeyCommand::Info { target } => {
            let doc = info_json(client, &target).await?;
            if as_json {
                output::json(&doc)?;
            } else {
                output::line(info_text(&doc))?;
            }
        }
        KeyCommand::Delete { target } => {
            let (bucket, key) = split(&target)?;
            client.delete_key(bucket, key).await?;
            output::status(format_args!("deleted {target}"));
        }
        KeyCommand::Cp { from, to } => {
            let (fb, fk) = split(&from)?;
            let (tb, tk) = split(&to)?;
            let mut r = client.open_key(fb, fk).await?;
            let bar = progress(r.len(), &to);
            let w = client.create_key(tb, tk, None).await?;
            // The source's errors come back through AsyncRead: recover the ClientError.
            let info = fill_key(&mut r, w, &bar, |e| match ClientError::from_io(e) {
                Ok(c) => anyhow::Error::from(c),
                Err(io) => anyhow::Error::from(io),
            })
            .await?;
            output::status(format_args!(
                "copied {from} to {to}: {} bytes, {}",
                info.length, info.replication
            ));
        }
        KeyCommand::Rename { target, new_key } => {
            let (bucket, key) = split(&target)?;
            client.rename_key(bucket, key, &new_key).await?;
            output::status(format_args!("renamed {target} to {bucket}/{new_key}"));
        }
    }
    Ok(())
}
