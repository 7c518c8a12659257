//! Kernel receive timestamps of the simulator's request reads (`SO_TIMESTAMPNS`, Linux): the
//! instant the kernel received the bytes that completed a request, before the simulator's own
//! scheduling could delay reading them. The event log carries it beside the user-space arrival, so
//! a client's TTFT can be compared with the server's from the packet's arrival (what the server's
//! own lag belongs to) rather than from the moment the simulator got round to reading it.
//! Elsewhere, or where the socket option is refused, reads are plain and carry no stamp.

use std::io;
use std::time::SystemTime;
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
