//! What a failure before any response was: the connection set-up's own kind, or an answer that
//! is not HTTP. Only the transport knows its connector's and its HTTP client's error types.

use super::{ConnectError, ConnectKind};
use crate::outcome::{ErrorType, error_chain};

/// Classifies a failure before any response: the connection set-up's own kind (connect timeout,
/// DNS/TCP, proxy, TLS), an answer that is not HTTP (`malformed`: the target spoke, badly), or the
/// connection lost before the head (`connect`).
pub(crate) fn classify_transport(
    e: &(dyn std::error::Error + 'static),
    proxy: Option<&str>,
) -> (ErrorType, String) {
    let found = find_in_chain::<ConnectError>(e);
    // A failed set-up says what failed itself; the client's wrapper adds nothing.
    let chain = match found {
        Some(c) => error_chain(c),
        None => error_chain(e),
    };
    let setup = found.map(|c| c.kind);
    let kind = match setup {
        Some(ConnectKind::Timeout) => ErrorType::TimeoutConnect,
        Some(ConnectKind::Tls) => ErrorType::Tls,
        // The connector knows the route it took: reaching a proxy fails as `Proxy`.
        Some(ConnectKind::Proxy) => ErrorType::Proxy,
        Some(ConnectKind::Connect) => ErrorType::Connect,
        // The target answered, but not in HTTP (no status line, a head too large, too many
        // headers): that is its answer's fault, not the network's.
        None if not_http(e) => ErrorType::Malformed,
        None => ErrorType::Connect,
    };
    let detail = match (kind, proxy) {
        (ErrorType::Proxy, Some(p)) => format!("via proxy {p}: {chain}"),
        _ => chain,
    };
    (kind, detail)
}

/// The first error of type `T` in `e`'s chain.
fn find_in_chain<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut cur = Some(e);
    while let Some(c) = cur {
        if let Some(t) = c.downcast_ref::<T>() {
            return Some(t);
        }
        cur = c.source();
    }
    None
}

/// True when the HTTP client could not parse the response head (hyper's parse errors).
fn not_http(e: &(dyn std::error::Error + 'static)) -> bool {
    find_in_chain::<hyper::Error>(e)
        .is_some_and(|h| h.is_parse() || h.is_parse_too_large() || h.is_parse_status())
        // HTTP/2: the client's own library found the peer breaking the protocol (a head that
        // never ends, a SETTINGS flood, a frame too large) and ended the connection for it.
        || find_in_chain::<h2::Error>(e).is_some_and(h2::Error::is_library)
}
