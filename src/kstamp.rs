//! Kernel receive timestamps of TCP reads (`SO_TIMESTAMPNS`, Linux): the instant the kernel
//! received the bytes a read returns, before the reader's own scheduling could delay reading them.
//!
//! Two readers use it. The simulator stamps each request's arrival, so a client's TTFT can be
//! compared with the server's from the packet's arrival rather than from the moment the simulator
//! got round to reading it. The prober reads every connection through a [`StampedStream`], so an
//! event's instant is when its bytes reached this machine, and the runtime's scheduling delay drops
//! out of it (docs/measurement.md, "Clock and instants"). Elsewhere, or where the socket option is
//! refused, reads are plain and carry no stamp; the reader then stamps as before.

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
        stream
            .async_io(Interest::READABLE, || recv_stamped(fd, buf))
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

/// What the reads since the last reset saw.
#[derive(Debug, Clone, Copy, Default)]
struct Reads {
    latest: Option<Stamp>,
    bytes: u64,
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

    /// Records a read of `n` bytes that just returned, with the kernel's wall-clock stamp of its
    /// bytes. The stamp is mapped to the monotonic clock by reading both clocks now: the kernel
    /// instant is `now - (wall now - stamp)`.
    fn record(&self, n: usize, wall: Option<SystemTime>) {
        let (user, wall_now) = (Instant::now(), SystemTime::now());
        let kernel = wall.and_then(|w| {
            let age = wall_now.duration_since(w).unwrap_or(Duration::ZERO);
            (age <= MAX_STAMP_AGE)
                .then(|| user.checked_sub(age))
                .flatten()
        });
        if let Ok(mut s) = self.0.lock() {
            s.latest = Some(Stamp { kernel, user });
            s.bytes = s.bytes.saturating_add(n as u64);
        }
    }
}

/// How much later than the kernel received them a probe's bytes were read: the scheduling delay
/// that kernel stamps take out of its instants (reported per bench level as the kernel-vs-user
/// difference).
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct ReadLag {
    /// At the first token-bearing event: how much earlier than the read its TTFT ends, seconds.
    pub first_token_s: Option<f64>,
    /// The largest over the probe's reads, seconds.
    pub max_s: f64,
    /// Reads of the response (head and body).
    pub reads: u64,
    /// Of them, reads the kernel did not stamp: their instant is the read's own.
    pub unstamped_reads: u64,
}

/// The most bytes one stamped read asks for (the buffer must be initialised for `recvmsg`, so a
/// read does not zero a reader's whole spare capacity each time).
const MAX_STAMPED_READ: usize = 64 * 1024;

/// A TCP stream whose reads record their kernel receive instant into a [`ReadStamps`]; writes
/// pass through. Where stamping could not be enabled, reads are plain and record no kernel
/// instant.
#[derive(Debug)]
pub struct StampedStream {
    tcp: TcpStream,
    stamps: ReadStamps,
    on: bool,
}

impl StampedStream {
    /// Wraps a connected stream, asking the kernel to stamp what it receives.
    pub fn new(tcp: TcpStream, stamps: ReadStamps) -> Self {
        let on = enable(&tcp);
        StampedStream { tcp, stamps, on }
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
                let dst = buf.initialize_unfilled_to(want);
                match this
                    .tcp
                    .try_io(tokio::io::Interest::READABLE, || recv_stamped(fd, dst))
                {
                    Ok((n, at)) => {
                        buf.advance(n);
                        if n > 0 {
                            this.stamps.record(n, at);
                        }
                        return Poll::Ready(Ok(()));
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.tcp).poll_read(cx, buf))?;
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
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
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

#[cfg(target_os = "linux")]
fn recv_stamped(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use nix::sys::time::TimeSpec;
    use std::io::IoSliceMut;
    let mut cmsg = nix::cmsg_space!(TimeSpec);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_DONTWAIT)
        .map_err(io::Error::from)?;
    let mut at = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(ts) = c {
                let ns = i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec());
                at = u64::try_from(ns)
                    .ok()
                    .map(|ns| SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(ns));
            }
        }
    }
    Ok((msg.bytes, at))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

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
}
