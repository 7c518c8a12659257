//! Deadlines for event writes.
//!
//! Tokio's timer wheel has a 1 ms tick (deadlines are rounded up to the next tick) and parks in
//! `epoll_wait` with a timeout rounded up to whole milliseconds, so `tokio::time::sleep_until`
//! fires 0–2 ms after its deadline (about 1 ms on average). The `precise` timer (Linux) keeps the
//! deadlines in a heap and arms one `timerfd` (nanosecond resolution, no timer slack) for the
//! earliest; the timerfd is registered in tokio's own I/O driver, so its expiry wakes the runtime
//! like a readable socket and the due tasks run at once, on the runtime's threads. One driver
//! task per server pops and wakes every due deadline at each expiry, so deadlines that fall
//! together cost one wake-up. Each wake-up costs context switches, so under load deadlines are
//! rounded up to a grid ([`Slack`]) to share wake-ups. Either way the deadline is absolute and a
//! future is ready only once `Instant::now()` has reached it: never early.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Which clock source waits for deadlines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TimerKind {
    /// A timerfd in tokio's I/O driver: 0.05-0.3 ms late (Linux; elsewhere `tokio`).
    Precise,
    /// `tokio::time::sleep_until`: 0–2 ms late (the runtime's 1 ms tick).
    Tokio,
}

/// How much later than its deadline the precise timer may fire, so that nearby deadlines share
/// one wake-up (each wake-up costs context switches; tokio's timer batches per millisecond).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slack {
    /// No grid while fewer than 2,000 deadlines a second are registered (events go out tens of
    /// microseconds late); above that, a 500 µs grid, which bounds the wake-ups to 2,000 a second
    /// and keeps the CPU cost near tokio's timer at a third of its lateness.
    Auto,
    /// Deadlines are rounded up to this grid; zero for none.
    Fixed(Duration),
}

impl std::str::FromStr for Slack {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s.trim().eq_ignore_ascii_case("auto") {
            return Ok(Slack::Auto);
        }
        humantime::parse_duration(s.trim())
            .map(Slack::Fixed)
            .map_err(|e| format!("{s:?} is neither `auto` nor a duration: {e}"))
    }
}

/// Registrations per second above which `Slack::Auto` coarsens deadlines (and below 3/4 of which
/// it stops).
const AUTO_RATE: f64 = 2000.0;
/// The grid `Slack::Auto` uses above `AUTO_RATE`.
const AUTO_GRID_NS: u64 = 500_000;
/// How often `Slack::Auto` re-measures the rate.
const AUTO_WINDOW: Duration = Duration::from_millis(250);

/// The grid for a measured registration rate, with hysteresis around [`AUTO_RATE`].
fn auto_grid(rate_per_s: f64, current_ns: u64) -> u64 {
    if rate_per_s >= AUTO_RATE {
        AUTO_GRID_NS
    } else if rate_per_s < AUTO_RATE * 0.75 {
        0
    } else {
        current_ns
    }
}

/// The deadline source shared by all connections.
pub(crate) enum Timer {
    /// Tokio's own timer.
    Tokio,
    /// A timerfd-driven heap.
    #[cfg(target_os = "linux")]
    Precise(std::sync::Arc<precise::Driver>),
}

impl Timer {
    /// A timer of the given kind; the precise one starts its driver task on the current runtime,
    /// and falls back to tokio's timer when it cannot.
    pub(crate) fn start(kind: TimerKind, slack: Slack) -> Timer {
        match kind {
            TimerKind::Tokio => Timer::Tokio,
            #[cfg(target_os = "linux")]
            TimerKind::Precise => match precise::Driver::start(slack) {
                Ok(d) => Timer::Precise(d),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot create a timerfd; using tokio's 1 ms timer");
                    Timer::Tokio
                }
            },
            #[cfg(not(target_os = "linux"))]
            TimerKind::Precise => {
                let _ = slack;
                Timer::Tokio
            }
        }
    }

    /// Completes once `Instant::now() >= deadline`.
    pub(crate) fn sleep_until(&self, deadline: Instant) -> Sleep {
        match self {
            Timer::Tokio => Sleep::Tokio(Box::pin(tokio::time::sleep_until(deadline.into()))),
            #[cfg(target_os = "linux")]
            Timer::Precise(d) => Sleep::Precise(precise::Sleep {
                driver: d.clone(),
                deadline,
                slot: None,
            }),
        }
    }
}

/// The future of [`Timer::sleep_until`].
pub(crate) enum Sleep {
    /// Tokio's timer entry.
    Tokio(Pin<Box<tokio::time::Sleep>>),
    /// A heap entry of the precise timer.
    #[cfg(target_os = "linux")]
    Precise(precise::Sleep),
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.get_mut() {
            Sleep::Tokio(s) => s.as_mut().poll(cx),
            #[cfg(target_os = "linux")]
            Sleep::Precise(s) => Pin::new(s).poll(cx),
        }
    }
}

#[cfg(target_os = "linux")]
mod precise {
    use super::{AUTO_WINDOW, Context, Duration, Future, Instant, Pin, Poll, Slack, auto_grid};
    use futures_util::task::AtomicWaker;
    use rustix::time::{
        Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
        timerfd_settime,
    };
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    use std::os::fd::OwnedFd;
    use std::sync::{Arc, Mutex};
    use tokio::io::Interest;
    use tokio::io::unix::AsyncFd;

    /// A registered deadline: the task to wake.
    struct Entry {
        deadline: Instant,
        waker: Arc<AtomicWaker>,
    }

    impl PartialEq for Entry {
        fn eq(&self, o: &Self) -> bool {
            self.deadline == o.deadline
        }
    }
    impl Eq for Entry {}
    impl PartialOrd for Entry {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Entry {
        /// Reversed: `BinaryHeap` is a max-heap and we want the earliest on top.
        fn cmp(&self, o: &Self) -> Ordering {
            o.deadline.cmp(&self.deadline)
        }
    }

    struct State {
        heap: BinaryHeap<Entry>,
        /// The deadline the timerfd is armed for.
        armed: Option<Instant>,
        /// Deadlines are rounded up to this grid (from `Driver::origin`) so that close ones
        /// share a wake-up; zero for none.
        grid_ns: u64,
        /// `Slack::Auto`: registrations since `window_start`.
        window_count: u64,
        window_start: Instant,
    }

    /// The heap and its timerfd.
    pub(crate) struct Driver {
        state: Mutex<State>,
        fd: AsyncFd<OwnedFd>,
        /// The grid adapts to the registration rate (`Slack::Auto`).
        auto: bool,
        origin: Instant,
    }

    impl Driver {
        /// Creates the timerfd, registers it with the current runtime and spawns the driver task.
        pub(crate) fn start(slack: Slack) -> std::io::Result<Arc<Driver>> {
            let fd = timerfd_create(
                TimerfdClockId::Monotonic,
                TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
            )?;
            // SAFETY: the AsyncFd owns the OwnedFd for its whole life and never hands out a
            // mutable reference to it (`get_mut` is not used), so the descriptor stays open and
            // the same (tokio#8587's requirement).
            let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?;
            let now = Instant::now();
            let d = Arc::new(Driver {
                state: Mutex::new(State {
                    heap: BinaryHeap::new(),
                    armed: None,
                    grid_ns: match slack {
                        Slack::Auto => 0,
                        Slack::Fixed(g) => u64::try_from(g.as_nanos()).unwrap_or(u64::MAX),
                    },
                    window_count: 0,
                    window_start: now,
                }),
                fd,
                auto: slack == Slack::Auto,
                origin: now,
            });
            tokio::spawn(drive(d.clone()));
            Ok(d)
        }

        /// The instant at which a deadline fires: rounded up to the grid.
        fn fire_at(&self, grid_ns: u64, deadline: Instant) -> Instant {
            if grid_ns == 0 {
                return deadline;
            }
            let g = u128::from(grid_ns);
            let since = deadline.saturating_duration_since(self.origin).as_nanos();
            let extra = u64::try_from(since.div_ceil(g) * g - since).unwrap_or(0);
            deadline + Duration::from_nanos(extra)
        }

        /// Adds a deadline; re-arms the timerfd when it is the earliest.
        fn register(&self, deadline: Instant, waker: Arc<AtomicWaker>) {
            let Ok(mut st) = self.state.lock() else {
                // A poisoned lock means a panic elsewhere; wake at once rather than hang.
                waker.wake();
                return;
            };
            st.window_count += 1;
            let deadline = self.fire_at(st.grid_ns, deadline);
            st.heap.push(Entry { deadline, waker });
            if st.armed.is_none_or(|a| deadline < a) {
                self.arm(&mut st, deadline);
            }
        }

        fn arm(&self, st: &mut State, deadline: Instant) {
            let d = deadline.saturating_duration_since(Instant::now());
            // A zero it_value disarms the timer; one nanosecond fires at once.
            let ns = if d.is_zero() {
                1
            } else {
                i64::from(d.subsec_nanos())
            };
            let spec = Itimerspec {
                it_interval: Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
                it_value: Timespec {
                    tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    tv_nsec: ns as _,
                },
            };
            match timerfd_settime(self.fd.get_ref(), TimerfdTimerFlags::empty(), &spec) {
                Ok(_) => st.armed = Some(deadline),
                Err(e) => tracing::warn!(error = %e, "timerfd_settime failed"),
            }
        }

        /// Pops every due deadline (re-arming for the next) and returns their wakers.
        fn due(&self, out: &mut Vec<Arc<AtomicWaker>>) {
            let Ok(mut st) = self.state.lock() else {
                return;
            };
            let now = Instant::now();
            st.armed = None;
            if self.auto {
                let window = now.saturating_duration_since(st.window_start);
                if window >= AUTO_WINDOW {
                    let rate = st.window_count as f64 / window.as_secs_f64();
                    st.grid_ns = auto_grid(rate, st.grid_ns);
                    st.window_count = 0;
                    st.window_start = now;
                }
            }
            while st.heap.peek().is_some_and(|e| e.deadline <= now) {
                if let Some(e) = st.heap.pop() {
                    out.push(e.waker);
                }
            }
            if let Some(next) = st.heap.peek().map(|e| e.deadline) {
                self.arm(&mut st, next);
            }
        }
    }

    /// Waits for timerfd expiries and wakes the due tasks (until the runtime shuts down).
    async fn drive(driver: Arc<Driver>) {
        let mut wake = Vec::new();
        let mut buf = [0u8; 8];
        loop {
            let mut guard = match driver.fd.readable().await {
                Ok(g) => g,
                Err(e) => {
                    tracing::error!(error = %e, "timerfd is not readable");
                    return;
                }
            };
            // Read the expiry count (a one-shot timer: one read empties it), then clear the
            // readiness without a second, EAGAIN-returning read. Tokio clears only the readiness
            // this guard saw, so an expiry armed meanwhile by `register` is not lost.
            match rustix::io::read(driver.fd.get_ref(), &mut buf) {
                Ok(_) => guard.clear_ready(),
                Err(rustix::io::Errno::AGAIN) => {
                    guard.clear_ready();
                    continue;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the timerfd");
                    return;
                }
            }
            driver.due(&mut wake);
            for w in wake.drain(..) {
                w.wake();
            }
        }
    }

    /// The future of [`Timer::sleep_until`] on the precise timer.
    pub(crate) struct Sleep {
        pub(crate) driver: Arc<Driver>,
        pub(crate) deadline: Instant,
        pub(crate) slot: Option<Arc<AtomicWaker>>,
    }

    impl Future for Sleep {
        type Output = ();

        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if Instant::now() >= self.deadline {
                return Poll::Ready(());
            }
            match &self.slot {
                Some(w) => w.register(cx.waker()),
                None => {
                    let w = Arc::new(AtomicWaker::new());
                    w.register(cx.waker());
                    self.driver.register(self.deadline, w.clone());
                    self.slot = Some(w);
                }
            }
            // The deadline may have passed while registering; the driver wakes us then anyway.
            Poll::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn precise_sleeps_are_never_early_and_rarely_late() {
        let t = Timer::start(TimerKind::Precise, Slack::Fixed(Duration::ZERO));
        let mut late = Vec::new();
        for i in 0..50u64 {
            let deadline = Instant::now() + Duration::from_micros(1500 + 137 * i);
            t.sleep_until(deadline).await;
            let now = Instant::now();
            assert!(now >= deadline);
            late.push(now - deadline);
        }
        // Many deadlines at once, out of order.
        let base = Instant::now() + Duration::from_millis(5);
        let tasks: Vec<_> = (0..100u64)
            .map(|i| {
                let d = base + Duration::from_micros((i * 7919) % 3000);
                let t = &t;
                async move {
                    t.sleep_until(d).await;
                    assert!(Instant::now() >= d);
                }
            })
            .collect();
        futures_util::future::join_all(tasks).await;
        late.sort();
        #[cfg(target_os = "linux")]
        assert!(
            late[late.len() / 2] < Duration::from_millis(1),
            "median lateness {:?}",
            late[late.len() / 2]
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn gridded_and_auto_sleeps_are_never_early() {
        for slack in [Slack::Fixed(Duration::from_micros(300)), Slack::Auto] {
            let t = Timer::start(TimerKind::Precise, slack);
            for i in 0..20u64 {
                let d = Instant::now() + Duration::from_micros(700 + 53 * i);
                t.sleep_until(d).await;
                assert!(Instant::now() >= d);
            }
        }
    }

    #[test]
    fn auto_grid_has_hysteresis() {
        assert_eq!(auto_grid(100.0, 0), 0);
        assert_eq!(auto_grid(5000.0, 0), AUTO_GRID_NS);
        assert_eq!(auto_grid(1800.0, AUTO_GRID_NS), AUTO_GRID_NS);
        assert_eq!(auto_grid(1800.0, 0), 0);
        assert_eq!(auto_grid(1000.0, AUTO_GRID_NS), 0);
        assert_eq!("auto".parse::<Slack>(), Ok(Slack::Auto));
        assert_eq!(
            "250us".parse::<Slack>(),
            Ok(Slack::Fixed(Duration::from_micros(250)))
        );
        assert!("soon".parse::<Slack>().is_err());
    }

    #[tokio::test]
    async fn tokio_timer_works_too() {
        let t = Timer::start(TimerKind::Tokio, Slack::Auto);
        let d = Instant::now() + Duration::from_millis(2);
        t.sleep_until(d).await;
        assert!(Instant::now() >= d);
    }
}
