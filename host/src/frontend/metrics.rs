//! The Prometheus metrics endpoint: `GET /metrics` on `--metrics-port`, as tritonserver serves it
//! (the text exposition format, version 0.0.4). Plain HTTP/1.1, a scrape per request; the text is
//! built from the server's metrics when asked (`Server::metrics_text`).
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use crate::server::Server;

/// How long a scraper may take to send its request.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the metrics endpoint on `listener` until `shutdown` resolves.
pub async fn serve(listener: TcpListener, server: Arc<Server>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        super::accept::after_error("metrics", &e).await;
                        continue;
                    }
                };
                let server = server.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let server = server.clone();
                        async move { Ok::<_, Infallible>(answer(&server, &req)) }
                    });
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
                    let _ = builder.serve_connection(TokioIo::new(stream), service).await;
                });
            }
            _ = &mut shutdown => return,
        }
    }
}

fn answer(server: &Server, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, content_type: &'static str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
        response
    };
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => match server.metrics_text() {
            Some(text) => reply(StatusCode::OK, "text/plain; version=0.0.4; charset=utf-8", text),
            None => reply(StatusCode::NOT_FOUND, "text/plain", "metrics are off (--allow-metrics=false)\n".into()),
        },
        (_, "/metrics") => reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "use GET\n".into()),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "Not Found\n".into()),
    }
}
