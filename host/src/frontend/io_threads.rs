//! The endpoints' I/O threads: each runs a single-threaded runtime of its own and serves the
//! connections handed to it, and one accept loop hands each new connection to one of them.
//!
//! Why a runtime a thread rather than one multi-threaded runtime: a connection, its requests and
//! their answers then stay on the thread that took it. On a multi-threaded runtime an idle worker
//! steals ready connections and wakes a peer for each task it queues (a futex wake and a context
//! switch), and an answer completed on another thread wakes its connection there: at 256 HTTP
//! connections on 2 cores the two workers were each busy half the time, and the server spent
//! 26–29 µs of CPU a request where bare hyper spends 15.
//!
//! Why one accept loop rather than every thread accepting from the shared listener: the kernel
//! wakes every thread waiting on the listener and the first to call `accept` takes the connection,
//! so where connections land was left to chance, and a connection stays where it lands.
//!
//! Where they go: a thread takes new connections until it has [`PACK`] open, then the next one
//! does; once every thread has that many, the one with the fewest open takes the next. Packing a
//! few connections onto one thread rather than spreading them from the first, because one busy
//! thread serves a request for much less CPU than two half-idle ones: a thread that runs out of
//! ready connections parks, and each wake-up (on a virtual machine, an interrupt through the
//! hypervisor) costs more than a small request. Measured with `simple` over HTTP on 2 cores,
//! against the multi-threaded runtime, alternating rounds (bench/README.md): 4 closed-loop
//! connections on one thread 1.43–1.47× the requests a second at 18 µs of server CPU a request
//! where spread over two they made 0.74–0.88× at 32–38 µs; 256 connections spread 1.14–1.24×.
//! How many one thread should take depends on how much CPU the clients leave it: perf_analyzer
//! at 8 connections ran 1.04× on one thread, at 16 0.88× on one thread and level spread 8 and 8.
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// Connections a thread takes before the next thread is given any (see the module's doc).
pub const PACK: usize = 8;

/// The connections handed to one I/O thread.
pub struct Handed {
    streams: mpsc::UnboundedReceiver<std::net::TcpStream>,
    open: Arc<AtomicUsize>,
}

/// A connection handed to this thread; it counts as open on its thread until dropped.
pub struct Accepted {
    pub stream: TcpStream,
    pub open: OpenOnThread,
}

/// A connection's place in its thread's count of open connections; released on drop.
pub struct OpenOnThread(Arc<AtomicUsize>);

impl Drop for OpenOnThread {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Handed {
    /// The next connection for this thread; `None` once the accept loop has stopped. Must be
    /// called on the thread's runtime, which the connection is registered with.
    pub async fn next(&mut self) -> Option<Accepted> {
        loop {
            let stream = self.streams.recv().await?;
            let open = OpenOnThread(self.open.clone());
            match TcpStream::from_std(stream) {
                Ok(stream) => return Some(Accepted { stream, open }),
                // Out of resources to register it: the connection is closed, as a failed accept's.
                Err(e) => tracing::warn!("could not take an accepted connection: {e}"),
            }
        }
    }
}

/// The sending side of one thread's [`Handed`].
struct Thread {
    streams: mpsc::UnboundedSender<std::net::TcpStream>,
    open: Arc<AtomicUsize>,
}

/// Starts `count` threads named `nereus-KIND-N`, each running `serve` on its own single-threaded
/// runtime with the connections it is handed, and on the calling runtime the loop accepting from
/// `listener` until `stop` turns true (then the listener closes and each thread's [`Handed`]
/// ends once taken). `frontend` names the endpoint in the log. Each thread calls `before_park`
/// whenever it is about to sleep for want of ready work (tokio's `on_thread_park`; a task it wakes
/// there runs before the thread sleeps).
pub fn start<F>(
    frontend: &'static str,
    kind: &'static str,
    count: usize,
    listener: TcpListener,
    mut stop: watch::Receiver<bool>,
    serve: impl Fn(Handed, watch::Receiver<bool>) -> F + Clone + Send + 'static,
    before_park: impl Fn() + Clone + Send + Sync + 'static,
) -> std::io::Result<()>
where
    F: Future<Output = ()> + 'static,
{
    let mut threads = Vec::with_capacity(count);
    for i in 0..count.max(1) {
        let (tx, rx) = mpsc::unbounded_channel();
        let open = Arc::new(AtomicUsize::new(0));
        threads.push(Thread { streams: tx, open: open.clone() });
        let (handed, stop, serve) = (Handed { streams: rx, open }, stop.clone(), serve.clone());
        let before_park = before_park.clone();
        let thread = std::thread::Builder::new().name(format!("nereus-{kind}-{i}")).spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().on_thread_park(before_park).build()?;
            runtime.block_on(serve(handed, stop));
            std::io::Result::Ok(())
        })?;
        tokio::task::spawn_blocking(move || {
            if let Ok(Err(e)) = thread.join() {
                tracing::error!("{frontend} I/O thread failed: {e}");
            }
        });
    }
    tokio::spawn(async move {
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => hand(&threads, stream),
                    Err(e) => super::accept::after_error(frontend, &e).await,
                },
                () = async { drop(stop.wait_for(|stopping| *stopping).await) } => break,
            }
        }
    });
    Ok(())
}

/// Hands `stream` to the thread [`pick`] chooses.
fn hand(threads: &[Thread], stream: TcpStream) {
    let Some(thread) = pick(threads.iter().map(|t| t.open.load(Ordering::Relaxed))).and_then(|i| threads.get(i)) else {
        return;
    };
    let Ok(stream) = stream.into_std() else { return };
    thread.open.fetch_add(1, Ordering::Relaxed);
    if let Err(unsent) = thread.streams.send(stream) {
        // The thread has stopped: the connection closes with it.
        drop(unsent);
        thread.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Which thread takes the next connection, given each thread's open connections: the first with
/// fewer than [`PACK`], or, once every thread has that many, the one with the fewest (the first of
/// those tied). `None` without threads.
fn pick(open: impl Iterator<Item = usize> + Clone) -> Option<usize> {
    open.clone().position(|n| n < PACK).or_else(|| open.enumerate().min_by_key(|&(_, n)| n).map(|(i, _)| i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_packed_onto_the_first_threads_then_spread() {
        assert_eq!(pick([0, 0].into_iter()), Some(0));
        assert_eq!(pick([PACK - 1, 0].into_iter()), Some(0));
        assert_eq!(pick([PACK, 0, 0].into_iter()), Some(1));
        assert_eq!(pick([PACK, PACK].into_iter()), Some(0), "tied: the first");
        assert_eq!(pick([PACK + 8, PACK + 1].into_iter()), Some(1), "all packed: the fewest");
        assert_eq!(pick([3, PACK + 8].into_iter()), Some(0), "a closed connection's place is taken again first");
        assert_eq!(pick(std::iter::empty()), None);
    }

    #[tokio::test]
    async fn a_handed_connection_counts_on_its_thread_until_it_closes() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut receivers = Vec::new();
        let threads: Vec<Thread> = [PACK, 0]
            .into_iter()
            .map(|open| {
                let (tx, rx) = mpsc::unbounded_channel();
                let count = Arc::new(AtomicUsize::new(open));
                receivers.push(Handed { streams: rx, open: count.clone() });
                Thread { streams: tx, open: count }
            })
            .collect();
        let mut clients = Vec::new();
        for _ in 0..2 {
            clients.push(TcpStream::connect(address).await.unwrap());
            let (stream, _) = listener.accept().await.unwrap();
            hand(&threads, stream);
        }
        assert_eq!(threads[0].open.load(Ordering::Relaxed), PACK);
        assert_eq!(threads[1].open.load(Ordering::Relaxed), 2);
        let first = receivers[1].next().await.expect("handed");
        let _second = receivers[1].next().await.expect("handed");
        drop(first);
        assert_eq!(threads[1].open.load(Ordering::Relaxed), 1, "a closed connection leaves its thread's count");
        // A thread that has stopped takes nothing, and its count does not grow.
        receivers.clear();
        clients.push(TcpStream::connect(address).await.unwrap());
        let (stream, _) = listener.accept().await.unwrap();
        hand(&threads, stream);
        assert_eq!(threads[1].open.load(Ordering::Relaxed), 1);
    }
}
