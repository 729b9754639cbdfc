//! TLS for PostgreSQL connections, with rustls (the TLS library the server already uses).
//!
//! `sslmode` keeps libpq's meaning: `disable` never encrypts; `prefer` (the default) and `require`
//! encrypt without checking the server's certificate (`prefer` falls back to plain when the server
//! offers no TLS); `verify-ca` and `verify-full` check the certificate against the roots in
//! `sslrootcert` (or the system's) and the host name (both modes check the name here).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::Socket;
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use tokio_rustls::rustls::crypto::{CryptoProvider, aws_lc_rs, verify_tls12_signature, verify_tls13_signature};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_rustls::rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// Where system roots are usually kept (Debian first).
const SYSTEM_ROOTS: [&str; 3] =
    ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"];

/// How connections are encrypted: `None` for plain only. With verification, the file of roots
/// the certificate is checked against, to name it when a server is refused.
#[derive(Clone, Default)]
pub(crate) struct TlsSetup(Option<Arc<ClientConfig>>, Option<Arc<str>>);

impl TlsSetup {
    /// Plain connections only (`sslmode=disable`).
    pub fn plain() -> TlsSetup {
        TlsSetup(None, None)
    }

    /// Encrypts without checking the certificate (`prefer`, `require`).
    pub fn unverified() -> Result<TlsSetup, String> {
        let provider = Arc::new(aws_lc_rs::default_provider());
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth();
        Ok(TlsSetup(Some(Arc::new(config)), None))
    }

    /// Checks the certificate against `roots` (a PEM file) or the system's roots.
    pub fn verified(roots: Option<&Path>) -> Result<TlsSetup, String> {
        let files: Vec<PathBuf> = match roots {
            Some(p) => vec![p.to_path_buf()],
            None => std::env::var_os("SSL_CERT_FILE")
                .map(PathBuf::from)
                .into_iter()
                .chain(SYSTEM_ROOTS.iter().map(PathBuf::from))
                .filter(|p| p.exists())
                .take(1)
                .collect(),
        };
        let Some(file) = files.first() else {
            return Err("no root certificates found: name a PEM file with sslrootcert=PATH".into());
        };
        let mut store = RootCertStore::empty();
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
            .and_then(|it| it.collect::<Result<_, _>>())
            .map_err(|e| format!("sslrootcert {}: {e}", file.display()))?;
        let (added, _) = store.add_parsable_certificates(certs);
        if added == 0 {
            return Err(format!("sslrootcert {}: no usable certificate in the file", file.display()));
        }
        let config = ClientConfig::builder_with_provider(Arc::new(aws_lc_rs::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(store)
            .with_no_client_auth();
        Ok(TlsSetup(Some(Arc::new(config)), Some(file.display().to_string().into())))
    }
}

/// Accepts any certificate (libpq's `require`), still checking the handshake's signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, tokio_rustls::rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, tokio_rustls::rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

impl MakeTlsConnect<Socket> for TlsSetup {
    type Stream = TlsStream;
    type TlsConnect = TlsConnectOne;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn make_tls_connect(&mut self, domain: &str) -> Result<TlsConnectOne, Self::Error> {
        let Some(config) = &self.0 else { return Err("TLS is disabled (sslmode=disable)".into()) };
        let name = ServerName::try_from(domain.to_string())?;
        Ok(TlsConnectOne { connector: TlsConnector::from(config.clone()), name, roots: self.1.clone() })
    }
}

/// One connection's handshake.
pub(crate) struct TlsConnectOne {
    connector: TlsConnector,
    name: ServerName<'static>,
    roots: Option<Arc<str>>,
}

/// Says in the operator's terms why a verified handshake refused the server (rustls' own words
/// are `UnknownIssuer` and the like), keeping its detail.
fn explain(e: io::Error, name: &ServerName<'_>, roots: Option<&str>) -> io::Error {
    use tokio_rustls::rustls::{CertificateError, Error};
    let Some(Error::InvalidCertificate(cert)) = e.get_ref().and_then(|inner| inner.downcast_ref::<Error>()) else {
        return e;
    };
    let roots = roots.unwrap_or("the system's roots");
    let host = name.to_str();
    let why = match cert {
        CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
            "the server's certificate is not signed by a certificate authority in {roots} (sslrootcert): \
             refusing {host}, which may not be the database you meant ({cert:?})"
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => format!(
            "the server's certificate does not match the host name {host:?} (sslmode=verify-full checks it): {cert}"
        ),
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
            format!("the server's certificate has expired: {cert}")
        }
        other => format!("the server's certificate was refused: {other}"),
    };
    io::Error::new(io::ErrorKind::InvalidData, why)
}

impl TlsConnect<Socket> for TlsConnectOne {
    type Stream = TlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        Box::pin(async move {
            let (name, roots) = (self.name.clone(), self.roots);
            match self.connector.connect(self.name, stream).await {
                Ok(s) => Ok(TlsStream(s)),
                Err(e) => Err(explain(e, &name, roots.as_deref())),
            }
        })
    }
}

/// An encrypted connection.
pub(crate) struct TlsStream(tokio_rustls::client::TlsStream<Socket>);

impl tokio_postgres::tls::TlsStream for TlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for TlsStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}
