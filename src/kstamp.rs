//! Kernel receive timestamps of TCP reads (`SO_TIMESTAMPNS`, Linux): the instant the kernel
//! received the bytes a read returns, before the reader's own scheduling could delay reading them.
//!
//! Two readers use it. The simulator stamps each request's arrival, so a client's TTFT can be
//! compared with the server's from the packet's arrival rather than from the moment the simulator
//! got round to reading it. The prober reads every connection through a [`StampedStream`], so an
//! event's instant is when its bytes reached this machine, and the runtime's scheduling delay drops
//! out of it (docs/measurement.md, "Clock and instants"). Elsewhere, or where the socket option is
//! refused, reads are plain and carry no stamp; the reader then stamps as before.
//!
//! Writes are stamped too (`SO_TIMESTAMPING` with software transmit stamps and `OPT_ID`, read back
//! from the socket's error queue): the instant a write's last byte left for the network. The prober
//! takes from it when its request left (its send lag, and the wire's TTFT); the simulator logs when
//! each event left, so its log is the wire's truth rather than the moment its write returned.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Asks the kernel to stamp what `sock` receives (a listener: what the sockets it accepts
/// receive, from their first packet); false where it cannot.
pub(crate) fn enable(sock: &impl std::os::fd::AsFd) -> bool {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{setsockopt, sockopt::ReceiveTimestampns};
        setsockopt(sock, ReceiveTimestampns, &true).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = sock;
        false
    }
}

/// Asks the kernel to stamp the instant each write's last byte leaves a connected TCP socket
/// (software transmit stamps, numbered by byte with `OPT_ID`, without the packet); false where it
/// cannot. Numbering starts at the bytes written so far, so [`SendStamps`] counts from here.
pub(crate) fn enable_send(sock: &impl std::os::fd::AsFd) -> bool {
    #[cfg(target_os = "linux")]
    {
        use nix::sys::socket::{TimestampingFlag as F, setsockopt, sockopt::Timestamping};
        let flags = F::SOF_TIMESTAMPING_TX_SOFTWARE
            | F::SOF_TIMESTAMPING_SOFTWARE
            | F::SOF_TIMESTAMPING_OPT_ID
            | F::SOF_TIMESTAMPING_OPT_TSONLY;
        setsockopt(sock, Timestamping, &flags).is_ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = sock;
        false
    }
}

/// The most transmit stamps one [`SendStamps::drain`] takes from the error queue (it is bounded by
/// the socket's receive buffer anyway; this bounds one call's work).
const MAX_DRAIN: usize = 256;

/// The bytes written to a socket since [`enable_send`], so a write's transmit stamp (numbered by
/// its last byte) can be told from the others. `None`: the socket does not stamp its writes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SendStamps {
    written: Option<u64>,
}

impl SendStamps {
    /// Enables transmit stamps on `sock` (connected, nothing written yet since).
    pub(crate) fn enable(sock: &impl std::os::fd::AsFd) -> Self {
        SendStamps {
            written: enable_send(sock).then_some(0),
        }
    }

    /// Counts `n` bytes written; the stamp id of their last byte (`None` for none or when the
    /// socket does not stamp).
    pub(crate) fn wrote(&mut self, n: usize) -> Option<u32> {
        let w = self.written.as_mut()?;
        if n == 0 {
            return None;
        }
        *w = w.wrapping_add(n as u64);
        Some(w.wrapping_sub(1) as u32)
    }

    /// The stamp id of the last byte written so far.
    pub(crate) fn last_id(&self) -> Option<u32> {
        self.written
            .filter(|w| *w > 0)
            .map(|w| w.wrapping_sub(1) as u32)
    }

    /// Takes the transmit stamps queued on `sock`, each as (id of the write's last byte, the
    /// kernel's wall-clock instant), without blocking.
    pub(crate) fn drain(
        &self,
        sock: &impl std::os::fd::AsRawFd,
        mut f: impl FnMut(u32, SystemTime),
    ) {
        if self.written.is_none() {
            return;
        }
        #[cfg(target_os = "linux")]
        for _ in 0..MAX_DRAIN {
            match recv_sent(sock.as_raw_fd()) {
                Ok(Some((id, at))) => f(id, at),
                Ok(None) => {}
                Err(_) => break,
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (sock, &mut f);
    }
}

/// How long a write waits before it tries again when the send buffer is full and the runtime
/// cannot tell when it drains (see [`poll_write_stamped`]).
const FULL_BUFFER_RETRY: Duration = Duration::from_millis(1);

/// Writes what one write call takes of `bufs` to a socket that stamps its writes.
///
/// Why not tokio's own `poll_write`: a transmit stamp is queued on the socket's error queue, so
/// epoll reports `EPOLLERR` beside `EPOLLOUT`, which mio reads as "write closed" and tokio keeps
/// for good (closed states are never cleared). From then on the socket always looks writable, and
/// tokio's write loop spins on `WouldBlock` for as long as the send buffer stays full (a server
/// that does not read a large request, a client that does not read the simulator's events),
/// holding a runtime thread. Here a full buffer waits for write readiness when the runtime can
/// still wait for it, and otherwise retries after [`FULL_BUFFER_RETRY`] on a timer.
fn poll_write_stamped(
    tcp: &TcpStream,
    retry: &mut Option<Pin<Box<tokio::time::Sleep>>>,
    cx: &mut Context<'_>,
    bufs: &[io::IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    loop {
        if let Some(sleep) = retry.as_mut() {
            ready!(sleep.as_mut().poll(cx));
            *retry = None;
        }
        ready!(tcp.poll_write_ready(cx))?;
        match tcp.try_write_vectored(bufs) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Readiness was cleared (all but the "closed" part): if the runtime can wait
                // for the buffer to drain, it does; if the socket still looks writable, it is
                // the stuck "closed" state, and a timer waits instead.
                if tcp.poll_write_ready(cx).is_pending() {
                    return Poll::Pending;
                }
                *retry = Some(Box::pin(tokio::time::sleep(FULL_BUFFER_RETRY)));
            }
            other => return Poll::Ready(other),
        }
    }
}

/// Maps a kernel wall-clock stamp to the monotonic clock by reading both clocks now (`None` for a
/// stamp older than [`MAX_STAMP_AGE`]: the wall clock was stepped since).
fn to_instant(wall: SystemTime) -> Option<Instant> {
    let (now, wall_now) = clocks_now();
    to_instant_at(wall, now, wall_now)
}

/// A pair of clock reads at most this far apart is taken as one instant...
const CLOCK_PAIR_WIDTH: Duration = Duration::from_micros(20);

/// ...else the narrowest of this many tries.
const CLOCK_PAIR_TRIES: usize = 4;

/// The monotonic and the wall clock at one instant: the wall clock read between two reads of the
/// monotonic one, whose midpoint it is taken at. Reading the two one after the other would map a
/// stamp wrongly by however long the thread was preempted between them (a time slice, 1 to 4 ms
/// on a busy machine: the rare requests a millisecond or two off the wire); a pair wider than
/// [`CLOCK_PAIR_WIDTH`] is read again, up to [`CLOCK_PAIR_TRIES`] times, keeping the narrowest.
fn clocks_now() -> (Instant, SystemTime) {
    let mut best: Option<(Duration, Instant, SystemTime)> = None;
    for _ in 0..CLOCK_PAIR_TRIES {
        let before = Instant::now();
        let wall = SystemTime::now();
        let width = before.elapsed();
        if best.is_none_or(|(w, ..)| width < w) {
            best = Some((width, before + width / 2, wall));
        }
        if width <= CLOCK_PAIR_WIDTH {
            break;
        }
    }
    best.map_or_else(
        || (Instant::now(), SystemTime::now()),
        |(_, at, wall)| (at, wall),
    )
}

/// [`to_instant`] with both clocks already read (`now`, `wall_now`).
fn to_instant_at(wall: SystemTime, now: Instant, wall_now: SystemTime) -> Option<Instant> {
    let age = wall_now.duration_since(wall).unwrap_or(Duration::ZERO);
    (age <= MAX_STAMP_AGE)
        .then(|| now.checked_sub(age))
        .flatten()
}

/// Reads into `buf` (0 bytes: the peer closed); with the kernel's receive instant of the bytes
/// read when the socket stamps them (the last packet's, for bytes of several packets).
pub(crate) async fn read(
    stream: &TcpStream,
    buf: &mut [u8],
) -> io::Result<(usize, Option<SystemTime>)> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        use tokio::io::Interest;
        let fd = stream.as_raw_fd();
        let mut cmsg = read_cmsg_space();
        stream
            .async_io(Interest::READABLE, || recv_stamped(fd, buf, &mut cmsg))
            .await
    }
    #[cfg(not(target_os = "linux"))]
    {
        use tokio::io::AsyncReadExt;
        let mut s = stream;
        s.read(buf).await.map(|n| (n, None))
    }
}

/// The most a stamp may lie before the read that returned it: an older one (the wall clock was
/// stepped between the packet and the read) is not believed.
const MAX_STAMP_AGE: Duration = Duration::from_secs(10);

/// The latest read of a connection: the kernel's receive instant of its bytes on the monotonic
/// clock (`None`: the kernel did not stamp them) and the instant the read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// When the kernel received the bytes, mapped to [`Instant`].
    pub kernel: Option<Instant>,
    /// When the read returned them.
    pub user: Instant,
}

/// The latest stamped read of the connections of one client (one probe at a time uses them, so
/// the latest read is the current probe's), shared between the connections and the prober.
#[derive(Debug, Clone, Default)]
pub struct ReadStamps(Arc<Mutex<Reads>>);

/// What the reads since the last reset saw, and when the latest write left.
#[derive(Debug, Clone, Copy, Default)]
struct Reads {
    latest: Option<Stamp>,
    bytes: u64,
    /// The kernel's transmit instant of the last byte written so far, on the monotonic clock.
    sent: Option<Instant>,
}

impl ReadStamps {
    /// Forgets the reads so far (a new probe starts).
    pub fn reset(&self) {
        if let Ok(mut s) = self.0.lock() {
            *s = Reads::default();
        }
    }

    /// The latest read since the last reset.
    pub fn latest(&self) -> Option<Stamp> {
        self.0.lock().ok().and_then(|s| s.latest)
    }

    /// The bytes read since the last reset (TLS included).
    pub fn bytes(&self) -> u64 {
        self.0.lock().map_or(0, |s| s.bytes)
    }

    /// The kernel's transmit instant of the last byte written since the last reset, once a read
    /// has picked its stamp up (stamps are taken with the connection's reads, so when a response
    /// head has come, this is the request's last byte).
    pub fn sent(&self) -> Option<Instant> {
        self.0.lock().ok().and_then(|s| s.sent)
    }

    /// Records the transmit stamp of the last byte written so far.
    fn record_sent(&self, wall: SystemTime) {
        let at = to_instant(wall);
        if let Ok(mut s) = self.0.lock() {
            s.sent = at.or(s.sent);
        }
    }

    /// Records a read of `n` bytes that just returned, with the kernel's wall-clock stamp of its
    /// bytes. The stamp is mapped to the monotonic clock by reading both clocks now
    /// ([`clocks_now`]): the kernel instant is `now - (wall now - stamp)`, and that `now` is the
    /// read's own instant too (one pair of clock reads per stamped read, not three reads).
    fn record(&self, n: usize, wall: Option<SystemTime>) {
        let (user, kernel) = match wall {
            Some(w) => {
                let (now, wall_now) = clocks_now();
                (now, to_instant_at(w, now, wall_now).map(|k| k.min(now)))
            }
            None => (Instant::now(), None),
        };
        if let Ok(mut s) = self.0.lock() {
            s.latest = Some(Stamp { kernel, user });
            s.bytes = s.bytes.saturating_add(n as u64);
        }
    }
}

/// The most bytes one stamped read asks for.
const MAX_STAMPED_READ: usize = 64 * 1024;

thread_local! {
    /// Where this thread's stamped reads land before they are copied into the reader's buffer.
    /// `recvmsg` needs initialised memory, and a reader (hyper) offers its spare capacity
    /// uninitialised afresh at every read: zeroing it each time cost more than the read's bytes
    /// (8 KiB or more for an event of 200 bytes, 2.5% of a 1,000-stream bench's CPU), copying
    /// them costs their length. One buffer per thread, zeroed once, not one per connection:
    /// a read borrows it only while it runs, never across an await.
    static BOUNCE: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; MAX_STAMPED_READ]);
}

/// A TCP stream whose reads record their kernel receive instant into a [`ReadStamps`], and whose
/// writes are stamped as they leave (picked up by the next reads). Where stamping could not be
/// enabled, reads are plain and record no kernel instant.
#[derive(Debug)]
pub struct StampedStream {
    tcp: TcpStream,
    stamps: ReadStamps,
    on: bool,
    tx: SendStamps,
    /// The last write's transmit stamp has not been picked up yet.
    tx_pending: bool,
    /// A write waiting for a full send buffer to drain ([`poll_write_stamped`]).
    retry: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Room for a read's control messages, allocated once per connection.
    cmsg: Vec<u8>,
    /// The receive system calls made so far (tests count them).
    #[cfg(test)]
    recv_calls: u64,
}

impl StampedStream {
    /// Wraps a connected stream, asking the kernel to stamp what it receives and sends.
    pub fn new(tcp: TcpStream, stamps: ReadStamps) -> Self {
        let on = enable(&tcp);
        let tx = SendStamps::enable(&tcp);
        StampedStream {
            tcp,
            stamps,
            on,
            tx,
            tx_pending: false,
            retry: None,
            cmsg: read_cmsg_space(),
            #[cfg(test)]
            recv_calls: 0,
        }
    }

    /// Counts a write's bytes.
    fn wrote(&mut self, n: usize) {
        if self.tx.wrote(n).is_some() {
            self.tx_pending = true;
        }
    }

    /// Takes the queued transmit stamps; the last written byte's, when among them, is the
    /// connection's latest send instant.
    fn pick_up_sent(&mut self) {
        if !self.tx_pending {
            return;
        }
        let (last, stamps) = (self.tx.last_id(), &self.stamps);
        let mut found = false;
        self.tx.drain(&self.tcp, |id, at| {
            if Some(id) == last {
                stamps.record_sent(at);
                found = true;
            }
        });
        self.tx_pending = !found;
    }
}

impl AsyncRead for StampedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        #[cfg(target_os = "linux")]
        if this.on {
            use std::os::fd::AsRawFd;
            let fd = this.tcp.as_raw_fd();
            loop {
                ready!(this.tcp.poll_read_ready(cx))?;
                let want = buf.remaining().min(MAX_STAMPED_READ);
                // A read that did not fill its buffer emptied the socket: like tokio's own
                // `poll_read`, clear the readiness seen before the read (the closure reports
                // `WouldBlock` for it and hands the bytes over beside), so the next read waits
                // for the next packet instead of paying a system call that finds nothing. A
                // packet that came meanwhile is newer readiness, which this does not clear.
                let (cmsg, mut partial) = (&mut this.cmsg, None);
                #[cfg(test)]
                let calls = &mut this.recv_calls;
                let r = this.tcp.try_io(tokio::io::Interest::READABLE, || {
                    #[cfg(test)]
                    {
                        *calls += 1;
                    }
                    let (n, at) = BOUNCE.with_borrow_mut(|b| {
                        let got = recv_stamped(fd, &mut b[..want], cmsg);
                        if let Ok((n, _)) = got {
                            buf.put_slice(&b[..n]);
                        }
                        got
                    })?;
                    if 0 < n && n < want {
                        partial = Some((n, at));
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    Ok((n, at))
                });
                let (n, at) = match (r, partial) {
                    (_, Some(got)) | (Ok(got), None) => got,
                    (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    (Err(e), None) => return Poll::Ready(Err(e)),
                };
                this.pick_up_sent();
                if n > 0 {
                    this.stamps.record(n, at);
                }
                return Poll::Ready(Ok(()));
            }
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
        this.pick_up_sent();
        if buf.filled().len() > before {
            this.stamps.record(buf.filled().len() - before, None);
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for StampedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.tx.written.is_none() {
            return Pin::new(&mut this.tcp).poll_write_vectored(cx, bufs);
        }
        let n = ready!(poll_write_stamped(&this.tcp, &mut this.retry, cx, bufs))?;
        this.wrote(n);
        // On loopback and most links the stamp is queued while the write runs: taking it now
        // keeps the error queue (and so `EPOLLERR`) empty when the runtime next polls.
        this.pick_up_sent();
        Poll::Ready(Ok(n))
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// One transmit stamp from the error queue: `Ok(None)` for a queued message that is not one,
/// `Err` when the queue is empty.
#[cfg(target_os = "linux")]
fn recv_sent(fd: std::os::fd::RawFd) -> io::Result<Option<(u32, SystemTime)>> {
    use nix::libc;
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, Timestamps, recvmsg};
    use std::io::IoSliceMut;
    /// `SCM_TSTAMP_SND` (linux/errqueue.h): the stamp of a packet handed to the device.
    const SCM_TSTAMP_SND: u32 = 0;
    let mut cmsg = nix::cmsg_space!(Timestamps, libc::sock_extended_err, libc::sockaddr_in6);
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), flags).map_err(io::Error::from)?;
    let (mut id, mut at) = (None, None);
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmTimestampsns(ts) => at = wall(&ts.system),
                ControlMessageOwned::Ipv4RecvErr(e, _) | ControlMessageOwned::Ipv6RecvErr(e, _)
                    if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                        && e.ee_info == SCM_TSTAMP_SND =>
                {
                    id = Some(e.ee_data);
                }
                _ => {}
            }
        }
    }
    Ok(id.zip(at))
}

/// A kernel `timespec` as wall-clock time (`None` for an empty or negative one).
#[cfg(target_os = "linux")]
fn wall(ts: &nix::sys::time::TimeSpec) -> Option<SystemTime> {
    let ns = i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec());
    u64::try_from(ns)
        .ok()
        .filter(|ns| *ns > 0)
        .map(|ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns))
}

/// A server's TCP stream whose writes are counted so each write's transmit stamp can be matched
/// to it ([`SentStream::sent`]); reads pass through (a server stamps its reads with [`read`]).
#[derive(Debug)]
pub(crate) struct SentStream {
    tcp: TcpStream,
    tx: SendStamps,
    /// A write waiting for a full send buffer to drain ([`poll_write_stamped`]).
    retry: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl SentStream {
    /// Wraps an accepted stream, asking the kernel to stamp what it sends.
    pub(crate) fn new(tcp: TcpStream) -> Self {
        let tx = SendStamps::enable(&tcp);
        SentStream {
            tcp,
            tx,
            retry: None,
        }
    }

    /// The stream itself (for stamped reads).
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The stamp id of the last byte written so far (`None`: the socket does not stamp).
    pub(crate) fn last_id(&self) -> Option<u32> {
        self.tx.last_id()
    }

    /// Takes the transmit stamps queued so far, each as (id of a write's last byte, when it
    /// left).
    pub(crate) fn sent(&self, f: impl FnMut(u32, SystemTime)) {
        self.tx.drain(&self.tcp, f);
    }
}

impl AsyncRead for SentStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for SentStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.tx.written.is_none() {
            return Pin::new(&mut this.tcp).poll_write(cx, buf);
        }
        let bufs = [io::IoSlice::new(buf)];
        let n = ready!(poll_write_stamped(&this.tcp, &mut this.retry, cx, &bufs))?;
        this.tx.wrote(n);
        Poll::Ready(Ok(n))
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

/// Room for a stamped read's control messages: the `SO_TIMESTAMPNS` stamp, and the
/// `SCM_TIMESTAMPING` one a socket that stamps its writes also gets on reads (not used: the same
/// instant).
fn read_cmsg_space() -> Vec<u8> {
    #[cfg(target_os = "linux")]
    {
        nix::cmsg_space!(nix::sys::time::TimeSpec, nix::sys::socket::Timestamps)
    }
    #[cfg(not(target_os = "linux"))]
    Vec::new()
}

/// One read of `fd` into `buf`, with the kernel's receive instant of its bytes; `cmsg` (from
/// [`read_cmsg_space`]) takes the control messages.
#[cfg(target_os = "linux")]
fn recv_stamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    cmsg: &mut [u8],
) -> io::Result<(usize, Option<SystemTime>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::io::IoSliceMut;
    let mut iov = [IoSliceMut::new(buf)];
    let msg =
        recvmsg::<()>(fd, &mut iov, Some(cmsg), MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)?;
    let mut at = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                at = wall(&ts);
            }
        }
    }
    Ok((msg.bytes, at))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    /// The clock pair is one instant: its monotonic reading lies between reads taken before and
    /// after it, and so does its wall reading, in the same order.
    #[test]
    fn both_clocks_are_read_at_one_instant() {
        for _ in 0..1000 {
            let (m0, w0) = (Instant::now(), SystemTime::now());
            let (m, w) = clocks_now();
            let (m1, w1) = (Instant::now(), SystemTime::now());
            assert!(m0 <= m && m <= m1);
            assert!(w0 <= w && w <= w1);
        }
    }

    #[tokio::test]
    async fn a_stamped_read_carries_the_kernels_receive_instant() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        assert!(enable(&l));
        let addr = l.local_addr().unwrap();
        // The kernel switches receive stamping on for the whole system a moment after the first
        // socket asks (deferred work), so on a machine where nothing stamped yet the first
        // packets may carry none: try a few connections, each one's bytes sent before `accept`
        // (as a client's first request often is) and read 50 ms late on purpose.
        let mut tries = 0;
        let (c, s, buf, n, before, at, after_read) = loop {
            tries += 1;
            let before = SystemTime::now();
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(b"hello").await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let (s, _) = l.accept().await.unwrap();
            let mut buf = [0u8; 16];
            let (n, at) = read(&s, &mut buf).await.unwrap();
            let after_read = SystemTime::now();
            match at {
                Some(at) => break (c, s, buf, n, before, at, after_read),
                None => assert!(tries < 20, "no stamp in {tries} connections"),
            }
        };
        let (mut c, mut buf) = (c, buf);
        assert_eq!(&buf[..n], b"hello");
        assert!(at >= before, "{at:?} before the write {before:?}");
        let late = after_read.duration_since(at).unwrap();
        assert!(late >= std::time::Duration::from_millis(50), "{late:?}");
        c.shutdown().await.unwrap();
        let (n, _) = read(&s, &mut buf).await.unwrap();
        assert_eq!(n, 0);
    }

    #[tokio::test]
    async fn each_write_is_stamped_as_it_leaves_numbered_by_its_last_byte() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (_s, _) = l.accept().await.unwrap();
        let mut w = SentStream::new(c);
        assert_eq!(w.last_id(), None, "nothing written yet");
        let mut spans = Vec::new();
        for msg in [&b"hello"[..], b"a longer second write"] {
            let before = SystemTime::now();
            w.write_all(msg).await.unwrap();
            spans.push((w.last_id().unwrap(), before, SystemTime::now()));
        }
        assert_eq!(spans[0].0, 4);
        assert_eq!(spans[1].0, 4 + 21);
        let mut got = Vec::new();
        // On loopback the stamp is queued while the write runs; allow the softirq a moment.
        for _ in 0..100 {
            w.sent(|id, at| got.push((id, at)));
            if got.len() >= 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(got.len(), 2, "{got:?}");
        for ((id, at), (want, before, after)) in got.iter().zip(&spans) {
            assert_eq!(id, want);
            assert!(
                before <= at && at <= after,
                "{before:?} <= {at:?} <= {after:?}"
            );
        }
    }

    /// The calling thread's CPU time.
    fn thread_cpu() -> Duration {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    /// A stamping socket whose peer reads slowly: the writer waits for the send buffer to drain
    /// instead of spinning. (With tokio's own write, a transmit stamp's `EPOLLERR` left the socket
    /// looking writable for good and the write loop spun on `WouldBlock`: 310 ms of CPU in a
    /// 316 ms wait, measured with it.) Both stamping streams: the prober's and the simulator's.
    #[tokio::test(flavor = "current_thread")]
    async fn a_full_send_buffer_is_waited_for_not_spun_on() {
        slow_reader_costs_the_writer_no_cpu(|c| StampedStream::new(c, ReadStamps::default())).await;
        slow_reader_costs_the_writer_no_cpu(SentStream::new).await;
    }

    async fn slow_reader_costs_the_writer_no_cpu<W: AsyncWrite + Unpin>(
        wrap: impl FnOnce(TcpStream) -> W,
    ) {
        use nix::sys::socket::{setsockopt, sockopt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        setsockopt(&c, sockopt::SndBuf, &(32 * 1024)).unwrap();
        setsockopt(&s, sockopt::RcvBuf, &(32 * 1024)).unwrap();
        const TOTAL: usize = 2 << 20;
        // The peer reads 64 KiB every 5 ms on its own thread: about 160 ms for 2 MiB.
        let s = s.into_std().unwrap();
        s.set_nonblocking(false).unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let (mut s, mut got, mut buf) = (s, 0, vec![0u8; 64 * 1024]);
            while got < TOTAL {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "closed after {got}");
                got += n;
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        assert!(enable_send(&c), "this kernel stamps writes");
        let mut w = wrap(c);
        let (t0, cpu0) = (Instant::now(), thread_cpu());
        w.write_all(&vec![b'x'; TOTAL]).await.unwrap();
        let (wall, cpu) = (t0.elapsed(), thread_cpu() - cpu0);
        reader.join().unwrap();
        assert!(
            wall > Duration::from_millis(50),
            "the buffer never filled: {wall:?}"
        );
        assert!(
            cpu < wall / 3,
            "the writer spun: {cpu:?} of CPU in {wall:?}"
        );
    }

    #[tokio::test]
    async fn a_stamped_stream_knows_when_its_request_left_by_the_time_the_answer_is_read() {
        use tokio::io::AsyncReadExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let stamps = ReadStamps::default();
        let mut c = StampedStream::new(c, stamps.clone());
        let (before, mut got) = (Instant::now(), [0u8; 8]);
        c.write_all(b"request").await.unwrap();
        let after = Instant::now();
        s.read_exact(&mut got[..7]).await.unwrap();
        s.write_all(b"answer").await.unwrap();
        let n = c.read(&mut got).await.unwrap();
        assert_eq!(&got[..n], b"answer");
        let sent = stamps.sent().expect("the request's send stamp");
        // The wall-to-monotonic mapping reads two clocks: allow it a few microseconds.
        let slack = std::time::Duration::from_micros(50);
        assert!(
            before <= sent + slack && sent <= after + slack,
            "{before:?} {sent:?} {after:?}"
        );
        stamps.reset();
        assert_eq!(stamps.sent(), None);
    }

    /// A read that does not fill its buffer has emptied the socket: the next read waits for the
    /// next packet without a system call that would find nothing (one per event saved on a
    /// stream), and every packet that comes later still wakes it.
    #[tokio::test]
    async fn a_read_that_empties_the_socket_waits_for_the_next_packet_without_a_system_call() {
        use tokio::io::AsyncReadExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (mut s, _) = l.accept().await.unwrap();
        let mut c = StampedStream::new(c, ReadStamps::default());
        if !c.on {
            return; // not stamped here: plain reads, tokio's own
        }
        const EVENTS: usize = 50;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let writer = tokio::spawn(async move {
            for i in 0..EVENTS {
                s.write_all(format!("data: {i}\n\n").as_bytes())
                    .await
                    .unwrap();
                // The next event only once this one was read: each is its own read.
                if rx.recv().await.is_none() {
                    return;
                }
            }
        });
        let mut buf = [0u8; 4096];
        for i in 0..EVENTS {
            let read = tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf));
            let n = read.await.expect("a later packet woke the reader").unwrap();
            assert_eq!(&buf[..n], format!("data: {i}\n\n").as_bytes());
            let _ = tx.send(()).await;
        }
        writer.await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf))
            .await
            .expect("the end woke the reader")
            .unwrap();
        assert_eq!(n, 0);
        // One receive per event and one for the end: without clearing, each event costs a
        // second receive that returns `EAGAIN` (about 2 x EVENTS).
        assert!(
            c.recv_calls <= EVENTS as u64 + 3,
            "{} receive calls for {EVENTS} events",
            c.recv_calls
        );
    }
}
