//! The KServe v2 HTTP/REST frontend (HTTP/1.1 and h2c on one port, or both over TLS), on hyper.
mod body;
pub mod codec;
mod compression;
mod generate;
mod non_finite;
mod request_body;
mod router;
mod watchdog;

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::header::{CONNECTION, HeaderValue};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;

pub use router::HttpOptions;

use super::connections::Connections;
use super::io_threads::{Accepted, Handed};
use crate::server::{Phase, Server};
use watchdog::Activity;

/// Serves HTTP on the connections handed to this thread (`incoming`; over TLS when `options.tls`
/// is set) until `shutdown` resolves; then stops taking connections, as tritonserver, and returns
/// when every open connection has closed. Those connections are served meanwhile; an HTTP/1.1
/// answer given once a shutdown has begun says `Connection: close`, so a client with a keep-alive
/// connection takes its next request elsewhere. `connections` counts the open connections.
pub async fn serve(
    mut incoming: Handed,
    server: Arc<Server>,
    options: HttpOptions,
    connections: Connections,
    shutdown: impl Future<Output = ()>,
) {
    let acceptor = options.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let options = Arc::new(options);
    let routes = Arc::new(router::Routes::default());
    // No per-request header timer: a connection's watchdog closes it once its client goes quiet.
    let builder = auto::Builder::new(TokioExecutor::new());
    // Turns true once, when the shutdown begins: TLS handshakes still going are then given up.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = incoming.next() => {
                let Some(Accepted { stream, open: on_thread }) = accepted else { break };
                let _ = stream.set_nodelay(true);
                let open = connections.open();
                // What each request of the connection needs, behind one `Arc` (one clone a request).
                let connection = Arc::new(Connection {
                    server: server.clone(),
                    options: options.clone(),
                    routes: routes.clone(),
                    activity: Arc::new(Activity::default()),
                });
                let quiet_period = options.header_timeout;
                let shared = connection.clone();
                let service = service_fn(move |req| {
                    let connection = shared.clone();
                    async move {
                        let _in_flight = connection.activity.begin();
                        tracing::debug!("HTTP request: {} {}", evhtp_method(req.method()), req.uri().path());
                        let Connection { server, options, routes, .. } = &*connection;
                        let http11 = req.version() == hyper::Version::HTTP_11;
                        let mut response = router::handle(server, options, routes, req).await;
                        response.body_mut().watch(&connection.activity);
                        if http11 && server.phase() >= Phase::Draining {
                            response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
                        }
                        Ok::<_, Infallible>(response)
                    }
                });
                let (builder, acceptor, stop) = (builder.clone(), acceptor.clone(), stop.clone());
                tokio::spawn(async move {
                    let _open = (open, on_thread);
                    let ended = match acceptor {
                        None => {
                            let served = builder.serve_connection(TokioIo::new(stream), service);
                            until_quiet(served, &connection.activity, quiet_period).await
                        }
                        Some(acceptor) => {
                            let Some(tls) = super::tls::handshake(&acceptor, stream, "HTTP", stop).await else {
                                return;
                            };
                            let served = builder.serve_connection(TokioIo::new(tls), service);
                            until_quiet(served, &connection.activity, quiet_period).await
                        }
                    };
                    if let Err(e) = ended {
                        tracing::debug!("HTTP connection ended: {e}");
                    }
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(incoming);
    let _ = stopping.send(true);
    connections.all_closed().await;
}

/// One connection's share of the server, and what its watchdog watches.
struct Connection {
    server: Arc<Server>,
    options: Arc<HttpOptions>,
    routes: Arc<router::Routes>,
    /// Shared with the connection's streamed answers, which report their progress to it.
    activity: Arc<Activity>,
}

/// Serves a connection until it ends, or until its client has been quiet for `period` (see
/// `watchdog`): then the connection is dropped, which closes it.
async fn until_quiet<E: std::fmt::Display>(
    served: impl Future<Output = Result<(), E>>,
    activity: &Activity,
    period: Duration,
) -> Result<(), String> {
    tokio::select! {
        biased;
        ended = served => ended.map_err(|e| e.to_string()),
        () = activity.quiet_for(period) => {
            tracing::debug!("closing an HTTP connection with no request for {} ms", period.as_millis());
            Ok(())
        }
    }
}

/// A method as libevhtp numbers it, which tritonserver's verbose "HTTP request:" line prints.
fn evhtp_method(method: &hyper::Method) -> u8 {
    match method.as_str() {
        "GET" => 0,
        "HEAD" => 1,
        "POST" => 2,
        "PUT" => 3,
        "DELETE" => 4,
        "OPTIONS" => 8,
        "TRACE" => 13,
        "CONNECT" => 14,
        "PATCH" => 15,
        _ => 16,
    }
}
