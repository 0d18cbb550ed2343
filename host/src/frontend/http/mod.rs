//! The KServe v2 HTTP/REST frontend (HTTP/1.1 and h2c on one port), on hyper.
mod codec;
mod compression;
mod router;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

pub use router::HttpOptions;

use crate::server::Server;

/// Serves HTTP on `listener` until `shutdown` resolves; then stops accepting and waits for every
/// open connection's in-flight requests to finish.
pub async fn serve(
    listener: TcpListener,
    server: Arc<Server>,
    options: HttpOptions,
    shutdown: impl Future<Output = ()>,
) {
    let options = Arc::new(options);
    let graceful = GracefulShutdown::new();
    let builder = auto::Builder::new(TokioExecutor::new());
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
                let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
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
