//! The gRPC frontend's connections: accepted here and served as HTTP/2 by hyper, with tonic's
//! services (and the layers in front of them) answering the calls.
//!
//! Why not tonic's own `Server`: it puts a `GrpcTimeout` layer in front of every service, which
//! answers a call still running at its `grpc-timeout` with CANCELLED "Timeout expired", where gRPC
//! core's server (tritonserver's) answers DEADLINE_EXCEEDED "Deadline Exceeded", as the client's
//! own timer does. The two timers race, so a client of tonic's server read either status; the
//! deadline is kept by [`super::deadline`] instead.
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::http::Request;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tower::ServiceExt;

use crate::frontend::connections::Connections;
use crate::frontend::io_threads::{Accepted, Handed};

/// The HTTP/2 settings of every connection.
pub struct Transport {
    /// `--grpc-keepalive-time`: how often to ping a connection.
    pub keepalive_time: Option<Duration>,
    /// `--grpc-keepalive-timeout`: how long to wait for the ping's answer (hyper's 20 s if unset).
    pub keepalive_timeout: Option<Duration>,
    /// TLS (ALPN `h2`); plain HTTP/2 when `None`.
    pub tls: Option<Arc<ServerConfig>>,
}

impl Transport {
    fn builder(&self) -> hyper::server::conn::http2::Builder<TokioExecutor> {
        let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        // Loopback latency halves with nodelay and larger HTTP/2 windows (toolchain facts).
        // Megabyte tensors want more: windows of 8 MiB a stream and 32 MiB a connection (a 64 MiB
        // request waits for fewer window updates) and frames of up to 1 MiB (64 frames for it, not
        // 4,096), the bare tonic ceiling's settings (bench/tensors). Measured 2026-12-03: windows 4x
        // larger gained nothing, and 256 KiB frames cost 21-62% of the throughput at 1-64 MiB. No
        // limit on the streams a connection opens, as tonic's server and gRPC core's.
        builder
            .timer(TokioTimer::new())
            .initial_stream_window_size(8 << 20)
            .initial_connection_window_size(32 << 20)
            .max_frame_size(1 << 20)
            .max_concurrent_streams(None)
            .keep_alive_interval(self.keepalive_time);
        if let Some(timeout) = self.keepalive_timeout {
            builder.keep_alive_timeout(timeout);
        }
        builder
    }
}

/// Serves `service` on every connection handed to this thread (`incoming`) until `shutdown`
/// resolves; then stops taking connections, tells every open connection to take no new calls
/// (HTTP/2 GOAWAY), and returns once they have all closed, their calls in flight answered.
/// `connections` counts the open connections.
pub async fn serve<S>(
    mut incoming: Handed,
    service: S,
    transport: Transport,
    connections: Connections,
    shutdown: impl Future<Output = ()>,
) where
    S: tower_service::Service<Request<tonic::body::Body>, Response = hyper::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let builder = transport.builder();
    let acceptor = transport.tls.map(TlsAcceptor::from);
    // Each connection's task watches this; it changes once, when the shutdown begins.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = incoming.next() => {
                let Some(Accepted { stream, open: on_thread }) = accepted else { break };
                let _ = stream.set_nodelay(true);
                let open = connections.open();
                let service = TowerToHyperService::new(
                    service.clone().map_request(|r: Request<Incoming>| r.map(tonic::body::Body::new)),
                );
                let (builder, acceptor, stop) = (builder.clone(), acceptor.clone(), stop.clone());
                tokio::spawn(async move {
                    let _open = (open, on_thread);
                    let ended = match acceptor {
                        None => until_stopped(builder.serve_connection(TokioIo::new(stream), service), stop).await,
                        Some(acceptor) => {
                            let Some(tls) = crate::frontend::tls::handshake(&acceptor, stream, "gRPC", stop.clone()).await
                            else {
                                return;
                            };
                            until_stopped(builder.serve_connection(TokioIo::new(tls), service), stop).await
                        }
                    };
                    if let Err(e) = ended {
                        tracing::debug!("gRPC connection ended: {e}");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(incoming);
    let _ = stopping.send(true);
    connections.all_closed().await;
}

/// Serves a connection until it ends; once `stop` turns true, it takes no new calls (GOAWAY) and
/// ends when those in flight have been answered.
async fn until_stopped<C: GracefulConnection>(
    connection: C,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), C::Error> {
    tokio::pin!(connection);
    tokio::select! {
        ended = connection.as_mut() => return ended,
        _ = stop.wait_for(|stopping| *stopping) => {}
    }
    connection.as_mut().graceful_shutdown();
    connection.await
}
