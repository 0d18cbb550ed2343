//! TLS on both frontends (rustls), with certificates generated here: a CA, a server certificate
//! for localhost, and a client certificate. HTTP and gRPC serve over TLS, refuse plain-text
//! clients, and with mutual TLS refuse clients without a certificate from the configured CA.
use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;

use common::*;
use nereus::proto::inference as pb;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// PEM files of a test PKI, in a temporary folder.
struct Pki {
    _dir: TempDir,
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    ca_pem: String,
    client_cert_pem: String,
    client_key_pem: String,
}

fn pki() -> Pki {
    let dir = TempDir::new("tls");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "nereus test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut client_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params.distinguished_name.push(DnType::CommonName, "nereus test client");
    let client = client_params.signed_by(&client_key, &ca).unwrap();
    let write = |name: &str, pem: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).unwrap();
        path
    };
    Pki {
        ca: write("ca.pem", &ca.pem()),
        cert: write("server.pem", &server.pem()),
        key: write("server.key", &server_key.serialize_pem()),
        ca_pem: ca.pem(),
        client_cert_pem: client.pem(),
        client_key_pem: client_key.serialize_pem(),
        _dir: dir,
    }
}

/// A rustls client trusting the test CA, with the client certificate when `identify`.
fn client_config(pki: &Pki, identify: bool) -> Arc<ClientConfig> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = RootCertStore::empty();
    roots.add(rustls_pki_types::CertificateDer::from_pem_slice(pki.ca_pem.as_bytes()).unwrap()).unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(if identify {
        let chain = vec![rustls_pki_types::CertificateDer::from_pem_slice(pki.client_cert_pem.as_bytes()).unwrap()];
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(pki.client_key_pem.as_bytes()).unwrap();
        builder.with_client_auth_cert(chain, key).unwrap()
    } else {
        builder.with_no_client_auth()
    })
}

/// One HTTPS request (HTTP/1.1, `Connection: close`); the raw response, or the TLS error.
fn https(port: u16, config: Arc<ClientConfig>, method: &str, path: &str, body: &str) -> Result<String, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(WAIT)).unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without close_notify after answering is fine for this test.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

fn tls_args(pki: &Pki) -> Vec<String> {
    let p = |p: &PathBuf| p.to_string_lossy().into_owned();
    vec![
        "--http-ssl-cert".into(),
        p(&pki.cert),
        "--http-ssl-key".into(),
        p(&pki.key),
        "--grpc-use-ssl=true".into(),
        "--grpc-server-cert".into(),
        p(&pki.cert),
        "--grpc-server-key".into(),
        p(&pki.key),
    ]
}

fn grpc_live(port: u16, tls: Option<tonic::transport::ClientTlsConfig>) -> Result<bool, String> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://localhost:{port}"))
            .unwrap()
            .timeout(WAIT)
            .connect_timeout(WAIT);
        if let Some(tls) = tls {
            endpoint = endpoint.tls_config(tls).unwrap();
        }
        let channel = endpoint.connect().await.map_err(|e| format!("{e:?}"))?;
        let mut c = pb::grpc_inference_service_client::GrpcInferenceServiceClient::new(channel);
        c.server_live(pb::ServerLiveRequest {}).await.map(|r| r.into_inner().live).map_err(|e| e.to_string())
    })
}

#[test]
fn both_frontends_serve_over_tls_and_refuse_plain_text() {
    let pki = pki();
    let repo = Repo::new();
    repo.example("simple");
    let args = tls_args(&pki);
    let s = Server::start(repo.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());

    let ready = https(s.port, client_config(&pki, false), "GET", "/v2/health/ready", "").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let infer =
        https(s.port, client_config(&pki, false), "POST", "/v2/models/simple/infer", &simple_request(4).to_string());
    let infer = infer.unwrap();
    assert!(infer.starts_with("HTTP/1.1 200") && infer.contains("\"OUTPUT0\""), "{infer}");
    // Plain HTTP to the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    plain.set_read_timeout(Some(WAIT)).unwrap();
    plain.write_all(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = plain.read_to_end(&mut raw);
    assert!(!String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));

    let ca = tonic::transport::Certificate::from_pem(pki.ca_pem.clone());
    let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(ca).domain_name("localhost");
    assert_eq!(grpc_live(s.grpc_port, Some(tls)), Ok(true));
    assert!(grpc_live(s.grpc_port, None).is_err(), "plain-text gRPC is refused");
}

/// A shutdown gives up the TLS handshakes still going (no request has started on them) instead of
/// waiting out their timeout, on both frontends. Each stalled connection is opened before a full
/// TLS call on the same port: the listener's backlog hands connections out in order, so the call's
/// answer means the stalled one was accepted and its handshake is waiting.
#[test]
fn a_shutdown_gives_up_the_tls_handshakes_still_going() {
    let pki = pki();
    let repo = Repo::new();
    repo.example("simple");
    let args = tls_args(&pki);
    let mut s = Server::start(repo.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());
    // Through the logging API: the tests' NEREUS_LOG would override --log-verbose.
    let verbose = https(s.port, client_config(&pki, false), "POST", "/v2/logging", r#"{"log_verbose_level": 1}"#);
    assert!(verbose.as_deref().is_ok_and(|r| r.starts_with("HTTP/1.1 200")), "{verbose:?}");
    let stalled_http = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    let ready = https(s.port, client_config(&pki, false), "GET", "/v2/health/ready", "").unwrap();
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    let stalled_grpc = TcpStream::connect(("127.0.0.1", s.grpc_port)).unwrap();
    let ca = tonic::transport::Certificate::from_pem(pki.ca_pem.clone());
    let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(ca).domain_name("localhost");
    assert_eq!(grpc_live(s.grpc_port, Some(tls)), Ok(true));

    s.terminate();
    let log = s.log();
    for frontend in ["HTTP", "gRPC"] {
        let line = format!("{frontend} TLS handshake given up: the server is shutting down");
        assert!(log.contains(&line), "{line}\n{log}");
    }
    drop((stalled_http, stalled_grpc));
}

#[test]
fn mutual_tls_needs_a_client_certificate_from_the_ca() {
    let pki = pki();
    let repo = Repo::new();
    repo.example("simple");
    let mut args = tls_args(&pki);
    let ca = pki.ca.to_string_lossy().into_owned();
    args.extend(["--http-ssl-client-ca".into(), ca.clone(), "--grpc-use-ssl-mutual=true".into()]);
    args.extend(["--grpc-root-cert".into(), ca]);
    let s = Server::start(repo.path(), &args.iter().map(String::as_str).collect::<Vec<_>>());

    let with = https(s.port, client_config(&pki, true), "GET", "/v2/health/ready", "").unwrap();
    assert!(with.starts_with("HTTP/1.1 200"), "{with}");
    assert!(https(s.port, client_config(&pki, false), "GET", "/v2/health/ready", "").is_err(), "no client certificate");

    let server_ca = tonic::transport::Certificate::from_pem(pki.ca_pem.clone());
    let tls = tonic::transport::ClientTlsConfig::new().ca_certificate(server_ca).domain_name("localhost");
    let identity = tonic::transport::Identity::from_pem(pki.client_cert_pem.clone(), pki.client_key_pem.clone());
    assert_eq!(grpc_live(s.grpc_port, Some(tls.clone().identity(identity))), Ok(true));
    assert!(grpc_live(s.grpc_port, Some(tls)).is_err(), "no client certificate");
}

#[test]
fn incomplete_tls_settings_stop_the_server_before_it_serves() {
    let pki = pki();
    let repo = Repo::new();
    let cert = pki.cert.to_string_lossy().into_owned();
    for (args, message) in [
        (vec!["--http-ssl-cert", cert.as_str()], "needs both --http-ssl-cert and --http-ssl-key"),
        (vec!["--grpc-use-ssl=true"], "--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key"),
        (vec!["--http-ssl-cert", cert.as_str(), "--http-ssl-key", cert.as_str()], "cannot read a private key"),
    ] {
        let stderr = refused_start(repo.path(), &args);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
