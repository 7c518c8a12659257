//! A target's `tokenizer.json` (Hugging Face's `tokenizers`, an optional feature, on by default):
//! checked when the config is loaded (once per content of the file), and counting the filler's
//! tokens locally for the calibration (one request instead of three).

/// The largest `tokenizer.json` read (Llama 3's is 9 MB, Qwen's 7 MB).
pub const MAX_TOKENIZER_BYTES: u64 = 32 << 20;

/// A Hugging Face tokenizer (`tokenizer.json`, the `tokenizers` crate) counting filler tokens.
#[cfg(feature = "tokenizers")]
pub struct LocalTokenizer(tokenizers::Tokenizer);

/// Without the `tokenizers` feature there is no local counting: every tokenizer is refused, and
/// the server calibrates.
#[cfg(not(feature = "tokenizers"))]
pub struct LocalTokenizer(());

impl std::fmt::Debug for LocalTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LocalTokenizer")
    }
}

/// A `tokenizer.json`'s bytes, read bounded.
fn read_tokenizer(path: &std::path::Path) -> Result<Vec<u8>, String> {
    crate::files::Read {
        what: "tokenizer",
        max_bytes: MAX_TOKENIZER_BYTES,
        timeout: crate::files::READ_TIMEOUT,
        pipes: false,
    }
    .run(path)
    .map_err(|e| e.to_string())
}

/// Whether `path` is a `tokenizer.json` the local counting can use: it is read (bounded) and
/// parsed, once per content (parsing takes about ten times the file's size in memory, which a
/// reload of `serve` must not pay again for an unchanged file).
///
/// # Errors
/// What is wrong, naming the file.
pub fn check_tokenizer(path: &std::path::Path) -> Result<(), String> {
    use std::hash::{Hash as _, Hasher as _};
    /// A tokenizer file checked: its path, its content's digest, what the check said.
    type Checked = (std::path::PathBuf, u64, Result<(), String>);
    static CHECKED: std::sync::Mutex<Vec<Checked>> = std::sync::Mutex::new(Vec::new());
    let bytes = read_tokenizer(path)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    let digest = h.finish();
    if let Ok(seen) = CHECKED.lock()
        && let Some((_, _, r)) = seen.iter().find(|(p, d, _)| p == path && *d == digest)
    {
        return r.clone();
    }
    let r = LocalTokenizer::from_bytes(path, &bytes).map(drop);
    if let Ok(mut seen) = CHECKED.lock() {
        seen.retain(|(p, _, _)| p != path);
        seen.push((path.to_owned(), digest, r.clone()));
    }
    r
}

impl LocalTokenizer {
    /// Reads a `tokenizer.json` (at most [`MAX_TOKENIZER_BYTES`], as [`crate::files`] reads the
    /// files a config names).
    ///
    /// # Errors
    /// What is wrong, naming the file.
    pub fn load(path: &std::path::Path) -> Result<LocalTokenizer, String> {
        let bytes = read_tokenizer(path)?;
        Self::from_bytes(path, &bytes)
    }

    #[cfg(feature = "tokenizers")]
    fn from_bytes(path: &std::path::Path, bytes: &[u8]) -> Result<LocalTokenizer, String> {
        tokenizers::Tokenizer::from_bytes(bytes)
            .map(LocalTokenizer)
            .map_err(|e| format!("{} is not a tokenizer.json: {e}", path.display()))
    }

    #[cfg(not(feature = "tokenizers"))]
    fn from_bytes(path: &std::path::Path, _: &[u8]) -> Result<LocalTokenizer, String> {
        Err(format!(
            "{}: this tokenprobe was built without the `tokenizers` feature, so it cannot count tokens itself (leave `tokenizer:` out: the server calibrates)",
            path.display()
        ))
    }

    /// The tokens of `text`, without special tokens.
    ///
    /// # Errors
    /// The tokenizer's own error.
    #[cfg(feature = "tokenizers")]
    pub fn count(&self, text: &str) -> Result<usize, String> {
        self.0
            .encode(text, false)
            .map(|e| e.len())
            .map_err(|e| format!("the tokenizer failed: {e}"))
    }

    /// Never called: no tokenizer loads in this build.
    ///
    /// # Errors
    /// Always.
    #[cfg(not(feature = "tokenizers"))]
    pub fn count(&self, _: &str) -> Result<usize, String> {
        let () = self.0;
        Err("no tokenizer in this build".into())
    }
}
