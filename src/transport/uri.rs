//! The URI a request names: a `user:password` in a URL becomes Basic credentials (as curl does)
//! and is taken out of the URL, so it never reaches a `Host` header, a proxy or a log.

use hyper::header::HeaderValue;

/// `url` as the URI to request, and the `Authorization: Basic` value of its userinfo (marked
/// sensitive, so the HTTP library never logs it).
///
/// # Errors
/// Why the URL cannot be requested (the parser's reason; the URL itself is not repeated).
pub fn request_uri(url: &str) -> Result<(hyper::Uri, Option<HeaderValue>), String> {
    let mut u = url::Url::parse(url).map_err(|e| e.to_string())?;
    let basic = if !u.username().is_empty() || u.password().is_some() {
        use crate::redact::percent_decode;
        use base64::Engine as _;
        let (user, pass) = (u.username(), u.password().unwrap_or(""));
        let pair = format!("{}:{}", percent_decode(user), percent_decode(pass));
        let mut v = HeaderValue::from_str(&format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        ))
        .map_err(|_| "the URL's credentials are not a valid header value".to_owned())?;
        v.set_sensitive(true);
        Some(v)
    } else {
        None
    };
    let _ = u.set_username("");
    let _ = u.set_password(None);
    let uri = u
        .as_str()
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
    Ok((uri, basic))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_becomes_basic_and_leaves_the_uri() {
        let (uri, basic) = request_uri("http://us%40er:p%3Ass@127.0.0.1:9/metrics?x=1").unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:9/metrics?x=1");
        let b = basic.unwrap();
        assert!(b.is_sensitive());
        // base64("us@er:p:ss")
        assert_eq!(b.to_str().unwrap(), "Basic dXNAZXI6cDpzcw==");
        let (uri, basic) = request_uri("https://h/v1").unwrap();
        assert_eq!((uri.to_string().as_str(), basic), ("https://h/v1", None));
        assert!(request_uri("not a url").is_err());
    }
}
