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
mod types;
mod validate;

pub use flags::FlagTarget;
pub use types::{
    AuthStyle, Buckets, Config, ConfigError, ConnectionMode, Expect, Issue, Job,
    KEY_FILE_MAX_BYTES, KEY_FILE_TIMEOUT, KeySource, Price, Prompt, ProxySetting, Schedule, Secret,
    SyntaxError, Target, Timeouts, TlsOptions,
};
pub use validate::{
    MAX_BUCKETS, MAX_INTERVAL, MAX_LOCATION_CHARS, MAX_TIMEOUT, MIN_INTERVAL, check_location,
    header_set_by_tokenprobe, parse_timeout, userinfo_conflict,
};

use std::path::Path;
use std::time::Duration;
use validate::{Checked, FileKind, FileRef};

/// The largest config, bench or baseline file read (a config of 20,000 targets is about 2 MB;
/// a read at this cap must fit well inside the Helm chart's 64 Mi memory limit).
pub const MAX_INPUT_FILE_BYTES: u64 = 8 << 20;

/// Reads a text input file (config, bench file, baseline), at most [`MAX_INPUT_FILE_BYTES`]: a
/// file that never ends (`/dev/zero`) or is far too large is an error, not an unbounded read.
/// A pipe (`--config.file <(envsubst < c.yml)`) is read like a file.
///
/// # Errors
/// The I/O error, or `InvalidData` for a file past the limit or not UTF-8.
pub fn read_input_file(path: &Path) -> std::io::Result<String> {
    read_text_file(path, MAX_INPUT_FILE_BYTES)
}

/// [`read_input_file`] with the limit `max_bytes`.
fn read_text_file(path: &Path, max_bytes: u64) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", max_bytes >> 20),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
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

/// What is wrong with a file the config names, if anything.
fn file_problem(f: &FileRef) -> Option<Issue> {
    let p = &f.file;
    let message = match &f.kind {
        // Only looked at here: parsing a tokenizer.json takes about ten times its size in
        // memory, which a reload of `serve` must not cost; calibration reads it.
        FileKind::Tokenizer => match std::fs::metadata(p) {
            Err(e) => format!("cannot read tokenizer {}: {e}", p.display()),
            Ok(m) if !m.is_file() => format!("tokenizer {} is not a file", p.display()),
            Ok(m) if m.len() > crate::probe::MAX_TOKENIZER_BYTES => format!(
                "tokenizer {} is larger than {} MiB",
                p.display(),
                crate::probe::MAX_TOKENIZER_BYTES >> 20
            ),
            Ok(_) => return None,
        },
        FileKind::Dataset { format, entries } => {
            let parsed = read_input_file(p)
                .map_err(|e| format!("cannot read dataset {}: {e}", p.display()))
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
        FileKind::ApiKey => match std::fs::metadata(p) {
            Err(e) => format!("cannot read {}: {e}", p.display()),
            Ok(m) if m.is_dir() => format!("{} is a directory, not a key file", p.display()),
            Ok(_) => return None,
        },
        FileKind::Ca => {
            // The same loading `serve` does (the transport owns how a CA file is read).
            let opts = crate::transport::ClientOptions {
                proxy: ProxySetting::Disabled,
                tls: TlsOptions {
                    ca_file: Some(p.clone()),
                    insecure_skip_verify: false,
                },
                connection: ConnectionMode::New,
            };
            crate::transport::Transport::new(&opts, Duration::from_secs(1))
                .err()?
                .to_string()
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
