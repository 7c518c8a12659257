//! The TLS client settings of a prober: the trust (web PKI roots, a `ca_file`, or none with
//! `insecure_skip_verify`) and ALPN (`h2`, then `http/1.1`, for targets). The connector marks the
//! handshake's start itself, for the `tls` phase.

use super::{TlsOptions, TransportError};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use std::sync::{Arc, OnceLock};

/// TLS sessions a prober keeps for resumption. A prober talks to one target (and perhaps its
/// proxy); rustls's default makes room for 256 server names, about 14 KB of every prober's memory
/// (heaptrack, 100 jobs).
const SESSIONS: usize = 8;

/// The bundled web PKI roots, parsed once and shared by every client that adds no `ca_file`
/// (parsed per client, they took about 8.6 KB of every prober's memory).
fn web_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            Arc::new(roots)
        })
        .clone()
}

/// The client configuration for `o`; `alpn`: the protocols offered, in order of preference.
pub(super) fn config(
    o: &TlsOptions,
    alpn: &[&[u8]],
) -> Result<rustls::ClientConfig, TransportError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut cfg = if o.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCert(provider)))
            .with_no_client_auth()
    } else if o.ca_file.is_none() {
        builder
            .with_root_certificates(web_roots())
            .with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = &o.ca_file {
            let err = |reason: String| TransportError::CaFile {
                path: path.display().to_string(),
                reason,
            };
            let read;
            let pem = match o.ca_pem.get() {
                Some(pem) => pem,
                None => {
                    read = read_ca_file(path).map_err(|e| err(e.to_string()))?;
                    &read
                }
            };
            for c in ca_certificates(pem).map_err(err)? {
                roots.add(c).map_err(|e| err(e.to_string()))?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg.resumption = rustls::client::Resumption::in_memory_sessions(SESSIONS);
    Ok(cfg)
}

/// The largest `ca_file` read (a full public CA bundle is about 250 KB).
pub const MAX_CA_FILE_BYTES: u64 = 8 << 20;

/// Reads a `ca_file` as every file a config names is read ([`crate::files`]): a regular file of
/// at most [`MAX_CA_FILE_BYTES`], on a thread of its own, within [`crate::files::READ_TIMEOUT`].
fn read_ca_file(path: &std::path::Path) -> Result<Vec<u8>, crate::files::FileError> {
    crate::files::Read {
        what: "ca_file",
        max_bytes: MAX_CA_FILE_BYTES,
        timeout: crate::files::READ_TIMEOUT,
        pipes: false,
    }
    .run(path)
}

/// The certificates of a PEM bundle (at least one).
///
/// # Errors
/// Why they are not PEM certificates.
pub fn ca_certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in the file".into());
    }
    Ok(certs)
}

/// `insecure_skip_verify`: accepts any certificate (signatures are still checked for form).
#[derive(Debug)]
struct AcceptAnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            msg,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            msg,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
