//! What a run shows on stderr while it sends: a bar when stderr is a terminal, a line every few
//! seconds when it is not (a log, a CI job), nothing with `--no-progress`; the run's own lines
//! (the start, each level's end) printed above the bar. The counters are shared by every request
//! of the run: a request is counted sent, then done (and failed, by type), never before it is.

use crate::measure::ProbeResult;
use crate::outcome::ErrorType;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How progress inside a level is shown on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A bar (stderr is a terminal).
    Bar,
    /// A line every [`PROGRESS_LINE_EVERY`] (stderr is not a terminal: a log, a CI job).
    Lines,
    /// Nothing (`--no-progress`).
    Off,
}

/// How often a level's progress line is written when stderr is not a terminal.
pub const PROGRESS_LINE_EVERY: Duration = Duration::from_secs(5);

/// How often the bar is redrawn, and the line's clock looked at.
const TICK: Duration = Duration::from_millis(200);

/// Shared progress counters and the bar (on stderr when it is a terminal), or the line every
/// few seconds (when it is not).
#[derive(Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
    lines: bool,
    started: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    /// Failures by type, in [`ErrorType::ALL`]'s order.
    by_type: Arc<[AtomicU64; ErrorType::ALL.len()]>,
}

/// The bar's look: elapsed time, the bar, the message (the counts are in the message only).
fn style_bar(b: &ProgressBar) {
    if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}") {
        b.set_style(style.progress_chars("=> "));
    }
}

/// One update. The message goes first: each call redraws, and a bar drawn with its new
/// position beside the previous message showed more progress than the "done" count (the old
/// `{pos}` beside "N done" read as a started count running ahead).
fn show(bar: &ProgressBar, pos: u64, msg: String) {
    bar.set_message(msg);
    bar.set_position(pos);
}

/// The bar's message for one level: finished requests against the level's amount (count mode)
/// or its clock (duration mode), and the sent-but-unfinished ones named as in flight, so no
/// number on the line counts a request before it is done.
fn progress_message(
    label: &str,
    (started, done, failed): (u64, u64, u64),
    amount: Option<u64>,
    clock: Option<(u64, u64)>,
) -> String {
    let in_flight = started.saturating_sub(done);
    let head = match (amount, clock) {
        (_, Some((elapsed, total))) => format!("{elapsed}/{total} s, {done} done"),
        (Some(n), None) => format!("{done}/{n} done"),
        (None, None) => format!("{done} done"),
    };
    format!("{label}: {head}, {in_flight} in flight, {failed} failed")
}

/// The line written every [`PROGRESS_LINE_EVERY`] without a terminal: the bar's message, the
/// failures by type, and the level's time so far.
fn progress_line(message: &str, types: &[(ErrorType, u64)], elapsed: Duration) -> String {
    let types: Vec<String> = types
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(e, n)| format!("{e} {n}"))
        .collect();
    let types = if types.is_empty() {
        String::new()
    } else {
        format!(" ({})", types.join(", "))
    };
    format!("bench: {message}{types}, {} s", elapsed.as_secs())
}

/// The counters at one instant: sent, done, failed, and the failures by type.
#[derive(Debug, Clone, PartialEq)]
struct Counts {
    started: u64,
    done: u64,
    failed: u64,
    by_type: Vec<(ErrorType, u64)>,
}

impl Counts {
    /// What was counted since `earlier`.
    fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            started: self.started - earlier.started,
            done: self.done - earlier.done,
            failed: self.failed - earlier.failed,
            by_type: self
                .by_type
                .iter()
                .zip(&earlier.by_type)
                .map(|((e, n), (_, n0))| (*e, n - n0))
                .collect(),
        }
    }
}

impl Progress {
    /// A progress display over `total` units (requests, or seconds in duration mode), shown as
    /// `mode` says.
    pub fn new(total: u64, mode: ProgressMode) -> Progress {
        let bar = (mode == ProgressMode::Bar).then(|| {
            let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            style_bar(&b);
            b
        });
        Progress {
            bar,
            lines: mode == ProgressMode::Lines,
            started: Arc::new(AtomicU64::new(0)),
            done: Arc::new(AtomicU64::new(0)),
            failed: Arc::new(AtomicU64::new(0)),
            by_type: Arc::new(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }

    /// The same counters, shown nowhere (a warm-up, `--cross-check`'s requests).
    pub fn quiet(&self) -> Progress {
        Progress {
            bar: None,
            lines: false,
            ..self.clone()
        }
    }

    /// The counters now. `done` is read before `started`: a request is counted as sent before
    /// it is counted done, so the in-flight count is never negative.
    fn counts(&self) -> Counts {
        let done = self.done.load(Ordering::Relaxed);
        let failed = self.failed.load(Ordering::Relaxed);
        let by_type = ErrorType::ALL
            .iter()
            .zip(self.by_type.iter())
            .map(|(e, n)| (*e, n.load(Ordering::Relaxed)))
            .collect();
        Counts {
            started: self.started.load(Ordering::Relaxed),
            done,
            failed,
            by_type,
        }
    }

    /// Requests sent so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// A request was sent.
    pub fn sent(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }

    /// A request ended with `r`.
    pub fn record(&self, r: &ProbeResult) {
        self.done.fetch_add(1, Ordering::Relaxed);
        if !r.success() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(i) = r
            .error_type
            .and_then(|e| ErrorType::ALL.iter().position(|x| *x == e))
        {
            self.by_type[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Prints a line above the bar (or plainly on stderr without a bar).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => crate::output::print_stderr_line(line),
        }
    }

    /// Ends the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }

    /// Keeps the display current while a level runs, until [`Ticker::end`]: `base` units done
    /// before it; a level of `duration` is shown by its clock (the bar's position too), else by
    /// its finished requests of `requests` (never the sent ones). On a terminal the bar is
    /// redrawn five times a second; without one a line is written every [`PROGRESS_LINE_EVERY`].
    pub fn ticker(
        &self,
        label: String,
        base: u64,
        duration: Option<Duration>,
        requests: Option<u64>,
    ) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        if self.bar.is_none() && !self.lines {
            return Ticker { stop, task: None };
        }
        let (p, s) = (self.clone(), stop.clone());
        let from = p.counts();
        let start = Instant::now();
        let task = tokio::spawn(async move {
            let mut next_line = start + PROGRESS_LINE_EVERY;
            loop {
                // The bar is drawn once more after the level's end; a line only while it runs.
                let ending = s.load(Ordering::Relaxed);
                let line_due = p.bar.is_none() && !ending && Instant::now() >= next_line;
                if p.bar.is_some() || line_due {
                    let c = p.counts().since(&from);
                    let clock = duration.map(|d| (start.elapsed().min(d).as_secs(), d.as_secs()));
                    let message =
                        progress_message(&label, (c.started, c.done, c.failed), requests, clock);
                    match &p.bar {
                        Some(bar) => show(bar, base + clock.map_or(c.done, |(e, _)| e), message),
                        None => {
                            next_line += PROGRESS_LINE_EVERY;
                            crate::output::print_stderr_line(&progress_line(
                                &message,
                                &c.by_type,
                                start.elapsed(),
                            ));
                        }
                    }
                }
                if ending {
                    break;
                }
                tokio::time::sleep(TICK).await;
            }
        });
        Ticker {
            stop,
            task: Some(task),
        }
    }
}

/// A level's display, kept current until [`Ticker::end`].
pub struct Ticker {
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Ticker {
    /// Stops it (the bar drawn once more with the level's last counts).
    pub async fn end(self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task {
            let _ = t.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Every frame drawn, as text.
    #[derive(Debug, Clone, Default)]
    struct Frames(Arc<Mutex<Vec<String>>>);

    impl indicatif::TermLike for Frames {
        fn width(&self) -> u16 {
            200
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.write_str(s)
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            if let Ok(mut v) = self.0.lock()
                && !s.is_empty()
            {
                v.push(s.to_owned());
            }
            Ok(())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn no_frame_shows_the_bar_ahead_of_the_done_count() {
        let frames = Frames::default();
        let bar = ProgressBar::with_draw_target(
            Some(20),
            ProgressDrawTarget::term_like(Box::new(frames.clone())),
        );
        style_bar(&bar);
        for (sent, done) in [(4, 0), (8, 4), (12, 8), (20, 16), (20, 20)] {
            show(
                &bar,
                done,
                progress_message("m @ 4", (sent, done, 0), Some(20), None),
            );
        }
        let frames = frames.0.lock().unwrap().clone();
        let re = regex::Regex::new(r"\[([=> ]{30})\] m @ 4: (\d+)/20 done").unwrap();
        let mut seen = 0;
        for f in &frames {
            let Some(c) = re.captures(f) else { continue };
            seen += 1;
            let filled = c[1].chars().filter(|ch| *ch == '=').count() as u64;
            let done: u64 = c[2].parse().unwrap();
            // 30 cells for 20 requests: `done` requests fill floor(done * 30 / 20) cells.
            assert!(filled <= done * 30 / 20, "bar ahead of the count: {f:?}");
        }
        assert!(seen >= 5, "frames: {frames:?}");
    }

    #[test]
    fn progress_counts_only_finished_requests_as_done() {
        // 7 sent, 4 finished (1 failed) of a 10-request level.
        assert_eq!(
            progress_message("m @ 5", (7, 4, 1), Some(10), None),
            "m @ 5: 4/10 done, 3 in flight, 1 failed"
        );
        // Duration mode: the clock, in seconds, and the finished requests.
        assert_eq!(
            progress_message("m @ 2/s", (9, 8, 0), None, Some((3, 10))),
            "m @ 2/s: 3/10 s, 8 done, 1 in flight, 0 failed"
        );
    }

    /// The line written every few seconds without a terminal: the counts, the failures by type,
    /// the time.
    #[test]
    fn a_progress_line_names_the_failures_by_type() {
        let msg = progress_message("m @ 4", (40, 37, 12), Some(100), None);
        let line = progress_line(
            &msg,
            &[
                (ErrorType::Auth, 10),
                (ErrorType::Connect, 0),
                (ErrorType::ServerError, 2),
            ],
            Duration::from_millis(15_400),
        );
        assert_eq!(
            line,
            "bench: m @ 4: 37/100 done, 3 in flight, 12 failed (auth 10, server_error 2), 15 s"
        );
        assert_eq!(
            progress_line(&msg, &[], Duration::from_secs(5)),
            "bench: m @ 4: 37/100 done, 3 in flight, 12 failed, 5 s"
        );
    }
}
