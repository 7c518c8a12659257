//! Writing a command's output: to stdout or stderr, flushed, and never a panic when the reader
//! went away (`tokenprobe probe | head`).

/// Writes `text` to stdout and flushes it. A reader that went away (`tokenprobe probe | head`)
/// drops the rest of the output; it is not a panic (as `print!` makes it) and does not change the
/// command's exit code. Every command's stdout output goes through here.
pub fn print_stdout(text: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// [`print_stdout`] for stderr, with a line end added.
pub fn print_stderr_line(line: &str) {
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}").and_then(|()| err.flush());
}
