//! `nereus`: serve a model repository. See `nereus --help`.
use std::sync::Arc;

use clap::Parser;
use nereus::cli::{Cli, Command, ServeArgs};
use nereus::frontend::grpc::{self, GrpcOptions};
use nereus::frontend::http::{self, HttpOptions};
use nereus::frontend::io_threads;
use nereus::frontend::restricted::Restrictions;
use nereus::frontend::tls::{Alpn, TlsFiles};
use nereus::large_pages::LargePages;
use nereus::server::Server;
use nereus::shutdown::{self, OpenConnections, Outcome};

/// glibc's malloc, with transparent huge pages for megabyte buffers (tensors): see large_pages.rs.
#[global_allocator]
static ALLOCATOR: LargePages = LargePages;

fn main() -> anyhow::Result<()> {
    // One TLS crypto provider for the whole process (ring, which the endpoints' TLS uses): the
    // object-store client is built without one of its own.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => *args,
        Some(Command::Plugin(command)) => {
            let ok = nereus::plugin::run(command)?;
            std::process::exit(if ok { 0 } else { 1 });
        }
        None => cli.serve,
    };
    nereus::logging::init(&nereus::logging::LogOptions {
        verbose: args.log_verbose,
        info: args.log_info,
        warning: args.log_warning,
        error: args.log_error,
        format: args.log_format.clone(),
        file: args.log_file.clone(),
    })
    .map_err(|e| anyhow::anyhow!("--log-file: {e}"))?;
    if args.model_repository.is_empty() {
        anyhow::bail!("--model-repository is required");
    }
    serve(args)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Option errors first, before any model loads.
    let http_restricted = Arc::new(
        Restrictions::parse(&args.http_restricted_api, "", "api")
            .map_err(|e| anyhow::anyhow!("--http-restricted-api: {e}"))?,
    );
    let grpc_restricted = Arc::new(
        Restrictions::parse(&args.grpc_restricted_protocol, "triton-grpc-protocol-", "protocol")
            .map_err(|e| anyhow::anyhow!("--grpc-restricted-protocol: {e}"))?,
    );
    let (http_tls, grpc_tls) = tls_settings(&args)?;
    // The I/O threads first: the server's models are told how many there are (inline execution).
    let http_threads = if args.allow_http { io_thread_count(args.http_thread_count, 1) } else { 0 };
    let grpc_threads = if args.allow_grpc { io_thread_count(args.grpc_io_threads, 2) } else { 0 };
    let (options, warnings) = args.server_options(http_threads + grpc_threads)?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let server = Server::start(options)?;
    // The rest of the server's work (metrics, loading, shutdown) runs here; the endpoints' I/O
    // threads have runtimes of their own (frontend/io_threads.rs).
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("nereus-main").build()?;
    runtime.block_on(async {
        // Freed megabyte buffers kept for reuse go back to the kernel once idle (large_pages.rs).
        tokio::spawn(async {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                nereus::large_pages::release_idle(nereus::large_pages::IDLE);
            }
        });
        // The listeners stop when a shutdown begins; the metrics endpoint serves until the end.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (_stop_metrics, stop_metrics_rx) = tokio::sync::watch::channel(false);
        let connections = OpenConnections::default();
        let mut http_addr = None;
        if args.allow_http {
            let listener = bind("HTTP", &args.http_address, args.http_port).await?;
            tracing::info!("Started HTTPService at {}", listener.local_addr()?);
            http_addr = Some(listener.local_addr()?);
            let options = HttpOptions {
                max_input_size: args.http_max_input_size,
                restricted: http_restricted.clone(),
                tls: http_tls.clone(),
                header_timeout: std::time::Duration::from_millis(args.http_header_timeout_ms.max(1)),
                body_timeout: std::time::Duration::from_millis(args.http_body_timeout_ms.max(1)),
                forward_headers: args.http_header_forward_pattern.clone(),
            };
            let (server, connections) = (server.clone(), connections.http.clone());
            let parks = before_io_thread_parks(&server);
            io_threads::start(
                "HTTP",
                "http",
                http_threads,
                listener,
                stop_rx.clone(),
                move |handed, mut stop| {
                    http::serve(handed, server.clone(), options.clone(), connections.clone(), async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                },
                parks,
            )?;
        }
        if args.allow_grpc {
            let listener = bind("GRPC", &args.grpc_address, args.grpc_port).await?;
            tracing::info!("Started GRPCInferenceService at {}", listener.local_addr()?);
            let options = GrpcOptions {
                max_message_size: args.grpc_max_message_size,
                keepalive_time: args.grpc_keepalive_time.map(std::time::Duration::from_millis),
                keepalive_timeout: args.grpc_keepalive_timeout.map(std::time::Duration::from_millis),
                restricted: grpc_restricted.clone(),
                tls: grpc_tls.clone(),
                response_compression: args.grpc_infer_response_compression_level,
                stream_stall_timeout: (args.grpc_stream_stall_timeout_ms > 0)
                    .then(|| std::time::Duration::from_millis(args.grpc_stream_stall_timeout_ms)),
                forward_headers: args.grpc_header_forward_pattern.clone(),
            };
            let (server, connections) = (server.clone(), connections.grpc.clone());
            let parks = before_io_thread_parks(&server);
            io_threads::start(
                "gRPC",
                "grpc",
                grpc_threads,
                listener,
                stop_rx.clone(),
                move |handed, mut stop| {
                    grpc::serve(handed, server.clone(), options.clone(), connections.clone(), async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                },
                parks,
            )?;
        }
        if args.allow_metrics {
            let address = args.metrics_address.as_deref().unwrap_or(args.http_address.as_str());
            let listener = bind("Metrics", address, args.metrics_port).await?;
            tracing::info!("Started Metrics Service at {}", listener.local_addr()?);
            let mut stop = stop_metrics_rx.clone();
            tokio::spawn(nereus::frontend::metrics::serve(listener, server.clone(), async move {
                let _ = stop.wait_for(|s| *s).await;
            }));
        }
        // The start-up models load while the endpoints listen: live, not ready until they have
        // (a plugin that hangs in its initialisation holds only its own model, to its deadline).
        let loading = tokio::task::spawn_blocking({
            let server = server.clone();
            move || server.load_startup_models()
        });
        tokio::select! {
            loaded = loading => {
                loaded.map_err(|e| anyhow::anyhow!("loading the models failed: {e}"))??;
                nereus::startup_summary::log(&server);
                announce_ready(&server, http_addr);
                shutdown_signal().await;
            }
            // A shutdown during start-up waits for the loads under way (the unload needs them
            // done) within the same exit timeout.
            () = shutdown_signal() => tracing::info!("a shutdown began while the models were loading"),
        }
        let timeout = std::time::Duration::from_secs(args.exit_timeout_secs);
        let stop_listeners = move || {
            let _ = stop_tx.send(true);
        };
        // The shutdown ends when it has drained, at the exit timeout, or at a second signal.
        tokio::select! {
            outcome = shutdown::run(server.clone(), &connections, stop_listeners, timeout) => {
                if outcome == Outcome::Drained {
                    tracing::info!("stopped");
                    return anyhow::Ok(());
                }
            }
            _ = shutdown_signal() => shutdown::log_cut_off(&server, "Signal received again. Exiting immediately."),
        }
        std::process::exit(1)
    })
}

/// What an I/O thread runs before it sleeps (see [`nereus::scheduler::inline::IoThreads::before_park`]).
fn before_io_thread_parks(server: &Server) -> impl Fn() + Clone + Send + Sync + 'static {
    let io_threads = server.io_threads();
    move || io_threads.before_park()
}

/// Binds an endpoint's listener. A socket that cannot be bound stops the start, as in
/// tritonserver, whose log line says which (`failed to start GRPC service: Unavailable - Socket
/// '0.0.0.0:8001' already in use`); the error returned does not repeat it.
async fn bind(service: &str, address: &str, port: u16) -> anyhow::Result<tokio::net::TcpListener> {
    match tokio::net::TcpListener::bind((address, port)).await {
        Ok(listener) => Ok(listener),
        Err(e) => {
            let why = match e.kind() {
                std::io::ErrorKind::AddrInUse => "already in use".to_string(),
                _ => format!("cannot be bound: {e}"),
            };
            tracing::error!("failed to start {service} service: Unavailable - Socket '{address}:{port}' {why}");
            anyhow::bail!("the {service} endpoint could not start (see the log)")
        }
    }
}

/// One line for whoever started the server by hand: how many models are ready, and a request to
/// try on one of them.
fn announce_ready(server: &Server, http: Option<std::net::SocketAddr>) {
    let index = server.index(false);
    let models: std::collections::BTreeSet<&str> = index.iter().map(|m| m.name.as_str()).collect();
    let ready: std::collections::BTreeSet<&str> =
        index.iter().filter(|m| m.state == "READY").map(|m| m.name.as_str()).collect();
    let try_it = match (http, ready.iter().next()) {
        (Some(addr), Some(model)) => {
            let host = if addr.ip().is_unspecified() { "localhost".to_string() } else { addr.ip().to_string() };
            let host = if addr.is_ipv6() && host != "localhost" { format!("[{host}]") } else { host };
            format!("; try: curl -s {host}:{}/v2/models/{model}", addr.port())
        }
        _ => String::new(),
    };
    tracing::info!("Nereus is ready: {} of {} models READY{try_it}", ready.len(), models.len());
}

/// How many I/O threads an endpoint gets: its flag (`--http-thread-count`, `--grpc-io-threads`),
/// or when 0 one per `cpus_each` CPUs, at least one: HTTP one per CPU, gRPC one per two.
///
/// Each runs its own single-threaded runtime (frontend/io_threads.rs), so a connection, its
/// requests (for gRPC, its HTTP/2 streams) and their answers stay on one thread: on a
/// multi-threaded runtime handing those between threads cost a quarter of gRPC's throughput on 2
/// cores and left HTTP's workers half idle at 256 connections (bench/README.md).
fn io_thread_count(flag: usize, cpus_each: usize) -> usize {
    if flag > 0 {
        return flag;
    }
    std::thread::available_parallelism().map_or(1, |n| (n.get() / cpus_each).max(1))
}

/// A frontend's TLS settings; `None`: plain TCP.
type Tls = Option<Arc<tokio_rustls::rustls::ServerConfig>>;

/// The frontends' TLS settings from the flags (HTTP's, gRPC's), checked before any model loads.
fn tls_settings(args: &ServeArgs) -> anyhow::Result<(Tls, Tls)> {
    let http = match (&args.http_ssl_cert, &args.http_ssl_key) {
        (None, None) if args.http_ssl_client_ca.is_none() => None,
        (Some(cert), Some(key)) => Some(
            TlsFiles { cert: cert.clone(), key: key.clone(), client_ca: args.http_ssl_client_ca.clone() }
                .server_config(Alpn::Http)
                .map_err(|e| anyhow::anyhow!("HTTP TLS: {e}"))?,
        ),
        _ => anyhow::bail!("HTTP TLS needs both --http-ssl-cert and --http-ssl-key"),
    };
    let grpc = if args.grpc_use_ssl || args.grpc_use_ssl_mutual {
        let (Some(cert), Some(key)) = (&args.grpc_server_cert, &args.grpc_server_key) else {
            anyhow::bail!("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key");
        };
        if args.grpc_use_ssl_mutual && args.grpc_root_cert.is_none() {
            anyhow::bail!("--grpc-use-ssl-mutual needs --grpc-root-cert (the CA of client certificates)");
        }
        let client_ca = args.grpc_root_cert.clone().filter(|_| args.grpc_use_ssl_mutual);
        let tls = TlsFiles { cert: cert.clone(), key: key.clone(), client_ca }
            .server_config(Alpn::Grpc)
            .map_err(|e| anyhow::anyhow!("gRPC TLS: {e}"))?;
        Some(tls)
    } else {
        None
    };
    Ok((http, grpc))
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(t) => t,
            Err(_) => return ctrl_c.await.unwrap_or(()),
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
