//! Configuration: the YAML file parsed once into validated types.
//!
//! [`Config::parse`] is pure: text in, a validated [`Config`] or every problem out, each with its
//! key path and `line:column`. [`Config::load`] reads the file and adds the checks that touch the
//! filesystem (`api_key_file`, `ca_file`), reported with the rest, in file order. The rest of the
//! program never sees raw YAML. Environment references `${VAR}` in `api_key` and `base_url` are
//! expanded here; `api_key_file` is read at each probe, so a rotated secret is picked up without a
//! restart.
//!
//! - `raw`: the serde shapes of the YAML as written, with the values' places.
//! - `types`: the validated types and the errors.
//! - `validate`: the rules, one validator per section, writing into one list of problems.

mod flags;
mod raw;
pub mod schema;
mod types;
mod validate;

pub use flags::FlagTarget;
pub use types::{
    AuditCount, AuthStyle, Buckets, Config, ConfigError, ConnectionMode, Expect, GpuHourPrice,
    HistogramFamily, Histograms, Issue, Job, KEY_FILE_MAX_BYTES, KEY_FILE_TIMEOUT, KeySource,
    MismatchAction, NumberCheck, Price, Prompt, ProxySetting, Schedule, Secret, SyntaxError,
    Target, Timeouts, TlsOptions, UsageAuditSettings,
};
pub use validate::{
    MAX_BUCKETS, MAX_INTERVAL, MAX_LOCATION_CHARS, MAX_TIMEOUT, MIN_INTERVAL, check_location,
    header_set_by_tokenprobe, parse_timeout, userinfo_conflict,
};

use std::path::Path;
use validate::{Checked, FileKind, FileRef};

/// The largest config, bench or baseline file read (a config of 20,000 targets is about 2 MB;
/// a read at this cap must fit well inside the Helm chart's 64 Mi memory limit).
pub const MAX_INPUT_FILE_BYTES: u64 = 8 << 20;

/// Reads a text input file (config, bench file, baseline), at most [`MAX_INPUT_FILE_BYTES`]: a
/// file that never ends (`/dev/zero`) or is far too large is an error, not an unbounded read, and
/// a FIFO without a writer or a hung mount fails within [`crate::files::READ_TIMEOUT`]. A pipe
/// (`--config.file <(envsubst < c.yml)`) is read like a file.
///
/// # Errors
/// The I/O error, or `InvalidData` for a file past the limit or not UTF-8.
pub fn read_input_file(path: &Path) -> std::io::Result<String> {
    let bytes = crate::files::Read {
        what: "file",
        max_bytes: MAX_INPUT_FILE_BYTES,
        timeout: crate::files::READ_TIMEOUT,
        pipes: true,
    }
    .run(path)
    .map_err(|e| match e {
        crate::files::FileError::Io { reason, .. } => std::io::Error::other(reason),
        crate::files::FileError::TooLarge { limit, .. } => std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {limit}"),
        ),
        other => std::io::Error::other(other.to_string()),
    })?;
    text(bytes)
}

/// UTF-8 text of a file, a byte-order mark at its start dropped.
fn text(bytes: Vec<u8>) -> std::io::Result<String> {
    let mut s = String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })?;
    if s.starts_with('\u{feff}') {
        s.drain(..'\u{feff}'.len_utf8());
    }
    Ok(s)
}

/// A bounded read of a file the config names (regular files only).
fn named_file(what: &str, max_bytes: u64) -> crate::files::Read<'_> {
    crate::files::Read {
        what,
        max_bytes,
        timeout: crate::files::READ_TIMEOUT,
        pipes: false,
    }
}

impl Config {
    /// Reads and validates a config file, checking the files it names too.
    ///
    /// # Errors
    /// [`ConfigError::Io`], [`ConfigError::Syntax`] (with the YAML location) or
    /// [`ConfigError::Invalid`] listing every problem with its key path and `line:column`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_input_file(path).map_err(|reason| ConfigError::Io {
            path: path.to_owned(),
            reason,
        })?;
        let mut checked = check(&text).map_err(|e| match e {
            ConfigError::Syntax(mut s) => {
                s.file = Some(path.display().to_string());
                ConfigError::Syntax(s)
            }
            other => other,
        })?;
        let problems: Vec<Issue> = checked.files.iter().filter_map(file_problem).collect();
        checked.issues.extend(problems);
        checked.finish()
    }

    /// Parses and validates config text (see [`Config::load`]), without touching the filesystem:
    /// the files a target names are not checked.
    ///
    /// # Errors
    /// As [`Config::load`], without `Io`.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        check(text)?.finish()
    }
}

/// The raw YAML, then every rule but the files'.
fn check(text: &str) -> Result<Checked, ConfigError> {
    // serde-saphyr's own snippet would quote the file verbatim (secrets included): the error is
    // rendered here, with the key path and a redacted snippet.
    let mut at = String::new();
    let opts = serde_saphyr::options! { with_snippet: false };
    let raw: raw::RawConfig =
        serde_saphyr::with_deserializer_from_str_with_options(text, opts, |de| {
            serde_path_to_error::deserialize(de).map_err(|e| {
                at = e.path().to_string();
                e.into_inner()
            })
        })
        .map_err(|e| ConfigError::Syntax(Box::new(SyntaxError::from_yaml(&e, &at, text))))?;
    Ok(validate::config(&raw))
}

/// What is wrong with a file the config names, if anything. Every file is read as
/// [`crate::files`] reads them (regular files only, bounded in time and size), and what it holds is
/// checked: a dataset parsed, a tokenizer parsed once per version of the file, a CA bundle's
/// certificates, a key file's text.
fn file_problem(f: &FileRef) -> Option<Issue> {
    let p = &f.file;
    let message = match &f.kind {
        FileKind::Tokenizer => crate::tokenizer::check_tokenizer(p).err()?,
        FileKind::Dataset { format, entries } => {
            let parsed = named_file("dataset", MAX_INPUT_FILE_BYTES)
                .run(p)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    text(bytes).map_err(|e| format!("cannot read dataset {}: {e}", p.display()))
                })
                .and_then(|text| {
                    crate::workload::dataset::parse(&text, *format)
                        .map_err(|e| format!("dataset {}: {e}", p.display()))
                });
            match parsed {
                Ok(v) => {
                    let _ = entries.set(v);
                    return None;
                }
                Err(e) => e,
            }
        }
        FileKind::Trace {
            format,
            model,
            window,
            recording,
        } => {
            use crate::workload::trace;
            let parsed = named_file("trace", trace::MAX_FILE_BYTES)
                .run(p)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    text(bytes).map_err(|e| format!("cannot read trace {}: {e}", p.display()))
                })
                .and_then(|text| {
                    trace::parse(&text, *format, model.as_deref())
                        .and_then(|rec| {
                            let (start, length) = window;
                            trace::window(rec, start.as_secs_f64(), length.map(|d| d.as_secs_f64()))
                        })
                        .map_err(|e| format!("trace {}: {e}", p.display()))
                });
            match parsed {
                Ok(v) => {
                    let _ = recording.set(v);
                    return None;
                }
                Err(e) => e,
            }
        }
        FileKind::SessionTrace { recording } => {
            use crate::workload::{session::replay, trace};
            let parsed = named_file("session trace", trace::MAX_FILE_BYTES)
                .run(p)
                .map_err(|e| e.to_string())
                .and_then(|bytes| {
                    text(bytes)
                        .map_err(|e| format!("cannot read session trace {}: {e}", p.display()))
                })
                .and_then(|text| {
                    replay::parse(&text).map_err(|e| format!("session trace {}: {e}", p.display()))
                });
            match parsed {
                Ok(v) => {
                    let _ = recording.set(v);
                    return None;
                }
                Err(e) => e,
            }
        }
        FileKind::ApiKey => match named_file("api_key_file", KEY_FILE_MAX_BYTES).run(p) {
            Ok(_) => return None,
            Err(crate::files::FileError::NotRegular {
                kind: "directory", ..
            }) => format!("{} is a directory, not a key file", p.display()),
            Err(e) => e.to_string(),
        },
        FileKind::Ca { pem } => {
            match named_file("ca_file", crate::transport::MAX_CA_FILE_BYTES).run(p) {
                Err(e) => e.to_string(),
                Ok(bytes) => match crate::transport::ca_certificates(&bytes) {
                    Err(e) => format!("cannot load ca_file {}: {e}", p.display()),
                    Ok(_) => {
                        let _ = pem.set(bytes);
                        return None;
                    }
                },
            }
        }
    };
    Some(Issue {
        path: f.key.clone(),
        line: f.line,
        column: f.column,
        message,
    })
}

#[cfg(test)]
mod tests;
