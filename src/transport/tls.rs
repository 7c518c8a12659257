//! The TLS client settings of a prober: the trust (web PKI roots, a `ca_file`, or none with
//! `insecure_skip_verify`) and ALPN (`h2`, then `http/1.1`, for targets). The connector marks the
//! handshake's start itself, for the `tls` phase.

use super::TransportError;
use crate::config::TlsOptions;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use std::sync::Arc;

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
    } else {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = &o.ca_file {
            let err = |reason: String| TransportError::CaFile {
                path: path.display().to_string(),
                reason,
            };
            let pem = read_ca_file(path).map_err(err)?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<_, _>>()
                .map_err(|e| err(e.to_string()))?;
            if certs.is_empty() {
                return Err(err("no PEM certificate in the file".into()));
            }
            for c in certs {
                roots.add(c).map_err(|e| err(e.to_string()))?;
            }
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// The largest `ca_file` read (a full public CA bundle is about 250 KB).
const MAX_CA_FILE_BYTES: u64 = 8 << 20;

/// Reads a `ca_file`: a regular file (a device such as `/dev/zero` never ends, and a FIFO blocks
/// its opener) of at most [`MAX_CA_FILE_BYTES`].
fn read_ca_file(path: &std::path::Path) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut pem))
        .map_err(|e| e.to_string())?;
    if pem.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(format!(
            "larger than {} MiB: not a CA bundle",
            MAX_CA_FILE_BYTES >> 20
        ));
    }
    Ok(pem)
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
