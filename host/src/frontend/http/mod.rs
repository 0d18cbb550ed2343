//! The KServe v2 HTTP/REST frontend (HTTP/1.1 and h2c on one port, or both over TLS), on hyper.
pub mod codec;
mod compression;
mod router;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

pub use router::HttpOptions;

use crate::server::Server;

/// How long a client may take to finish its TLS handshake; a stalled one is dropped.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP on `listener` (over TLS when `options.tls` is set) until `shutdown` resolves; then
/// stops accepting and waits for every open connection's in-flight requests to finish.
pub async fn serve(
    listener: TcpListener,
    server: Arc<Server>,
    options: HttpOptions,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let options = Arc::new(options);
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // A client that never finishes its headers loses its connection.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(options.header_timeout);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (server, options) = (server.clone(), options.clone());
                let service = service_fn(move |req| {
                    let (server, options) = (server.clone(), options.clone());
                    async move { Ok::<_, Infallible>(router::handle(server, options, req).await) }
                });
                let (builder, watcher, acceptor) = (builder.clone(), graceful.watcher(), acceptor.clone());
                tokio::spawn(async move {
                    let ended = match acceptor {
                        None => watcher.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned()).await,
                        // The handshake runs in the connection's task, bounded, never in the accept loop.
                        Some(acceptor) => match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(tls)) => {
                                watcher.watch(builder.serve_connection(TokioIo::new(tls), service).into_owned()).await
                            }
                            Ok(Err(e)) => {
                                tracing::debug!("TLS handshake failed: {e}");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!("TLS handshake timed out");
                                return;
                            }
                        },
                    };
                    if let Err(e) = ended {
                        tracing::debug!("HTTP connection ended: {e}");
                    }
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    graceful.shutdown().await;
}
