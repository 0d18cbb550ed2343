//! TLS for the frontends, with rustls (ring): a server certificate chain and key from PEM files,
//! and optionally a CA whose certificates clients must present (mutual TLS).
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;

/// How long a client may take to finish its TLS handshake; a stalled one is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An accepted connection's TLS handshake, bounded in time and given up once `stop` turns true (a
/// shutdown need not wait out a stalled client: no request has started on it); `None` (logged at
/// debug level, with the `frontend`'s name) when it fails, stalls or is given up. Run in the
/// connection's task, never in the accept loop, so that a stalled client holds up no other.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    frontend: &str,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<TlsStream<TcpStream>> {
    let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
    tokio::select! {
        done = handshake => match done {
            Ok(Ok(tls)) => Some(tls),
            Ok(Err(e)) => {
                tracing::debug!("{frontend} TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!("{frontend} TLS handshake timed out");
                None
            }
        },
        _ = stop.wait_for(|stopping| *stopping) => {
            tracing::debug!("{frontend} TLS handshake given up: the server is shutting down");
            None
        }
    }
}

/// Where a frontend's certificate, key and (for mutual TLS) client CA come from.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// Clients must present a certificate this CA signed.
    pub client_ca: Option<PathBuf>,
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificates from {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{} holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The application protocols a frontend offers in the TLS handshake (ALPN), in its preference.
#[derive(Clone, Copy, Debug)]
pub enum Alpn {
    /// HTTP/2, then HTTP/1.1: the HTTP frontend serves both.
    Http,
    /// HTTP/2 only: gRPC.
    Grpc,
}

impl TlsFiles {
    /// A rustls server configuration offering `alpn`'s protocols.
    pub fn server_config(&self, alpn: Alpn) -> Result<Arc<ServerConfig>, String> {
        let chain = certificates(&self.cert)?;
        let key = PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| format!("cannot read a private key from {}: {e}", self.key.display()))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(ca)? {
                    roots.add(cert).map_err(|e| format!("{}: {e}", ca.display()))?;
                }
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                    .build()
                    .map_err(|e| format!("{}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            format!("{} and {} do not make a usable identity: {e}", self.cert.display(), self.key.display())
        })?;
        config.alpn_protocols = match alpn {
            Alpn::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            Alpn::Grpc => vec![b"h2".to_vec()],
        };
        Ok(Arc::new(config))
    }
}
