//! TLS for the frontends, with rustls (ring): a server certificate chain and key from PEM files,
//! and optionally a CA whose certificates clients must present (mutual TLS).
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{self, RootCertStore, ServerConfig};

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

/// The PEM bytes of a server identity and client CA, checked to parse.
pub struct Pem {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub client_ca: Option<Vec<u8>>,
}

impl TlsFiles {
    /// The PEM files as PEM bytes, for tonic's TLS settings.
    pub fn read(&self) -> Result<Pem, String> {
        let read = |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        // Parse once here too, so a bad file is reported the same way for both frontends.
        certificates(&self.cert)?;
        PrivateKeyDer::from_pem_file(&self.key)
            .map_err(|e| format!("cannot read a private key from {}: {e}", self.key.display()))?;
        let ca = match &self.client_ca {
            Some(p) => {
                certificates(p)?;
                Some(read(p)?)
            }
            None => None,
        };
        Ok(Pem { cert: read(&self.cert)?, key: read(&self.key)?, client_ca: ca })
    }

    /// A rustls server configuration (HTTP/1.1 and HTTP/2 by ALPN).
    pub fn server_config(&self) -> Result<Arc<ServerConfig>, String> {
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
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
