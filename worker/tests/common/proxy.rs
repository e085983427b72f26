//! A TCP proxy the network-fault tests control, put between a store and
//! its PostgreSQL server: every connection the store opens through it is
//! relayed to the server, and the test decides, connection by connection,
//! whether the bytes pass, pass late, or stop.
//!
//! Modes of a connection (both directions alike):
//!
//! - [`Mode::Pass`]: forwarded as read.
//! - [`Mode::Delay`]`(d)`: each chunk forwarded `d` after it was read, in
//!   order, with no bandwidth limit (a round trip costs `2 × d` more).
//! - [`Mode::Blackhole`]: nothing forwarded either way and nothing more
//!   read, the sockets kept open. To the store this is a silent partition
//!   (packets dropped): no error, no close, its writes pile up in socket
//!   buffers and no answer comes. Back to `Pass` (a heal) forwards what was
//!   held at once, as TCP retransmission would deliver it.
//!
//! A blackholed connection is not a dropped packet for the kernels: the
//! proxy's end still acknowledges what the store sends and TCP keepalive
//! probes, so only the store's own deadlines notice it (never TCP
//! keepalives or a user timeout). New connections start in the proxy's
//! current default mode (set by [`Proxy::set_mode`]), so during a
//! partition a new connection is accepted (the kernel completes the
//! handshake) but its startup gets no answer.
//!
//! The proxy looks at what clients send: a connection whose client sent a
//! `LISTEN` statement is marked, so a test can cut only the store's
//! listening connection ([`Proxy::set_listen_mode`]). That needs a plain
//! connection (`sslmode=disable`, which [`Proxy::url`] adds).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// What a connection does with the bytes it reads (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forwarded as read.
    Pass,
    /// Forwarded this long after being read, each direction.
    Delay(Duration),
    /// Neither read nor forwarded, sockets kept open.
    Blackhole,
}

impl Mode {
    fn delay(self) -> Duration {
        match self {
            Mode::Delay(delay) => delay,
            Mode::Pass | Mode::Blackhole => Duration::ZERO,
        }
    }
}

/// What the proxy knows of one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Numbered from 0 in the order accepted.
    pub id: u64,
    /// Its client sent a `LISTEN` statement.
    pub listen: bool,
    /// When the proxy first saw it (forwarded or not).
    pub listened_at: Option<std::time::Instant>,
    /// Its current mode.
    pub mode: Mode,
    /// Neither side has closed it (as far as the proxy has read).
    pub open: bool,
}

struct Conn {
    id: u64,
    mode: watch::Sender<Mode>,
    listen: AtomicBool,
    listened_at: OnceLock<std::time::Instant>,
    /// Directions still relaying (2 at the start).
    relaying: AtomicUsize,
}

struct Shared {
    upstream: SocketAddr,
    default: Mutex<Mode>,
    conns: Mutex<Vec<Arc<Conn>>>,
    tasks: Mutex<Vec<AbortHandle>>,
    next_id: AtomicU64,
    /// Chunks read from clients (each client write, about one round trip).
    client_writes: AtomicU64,
}

/// The proxy: listens on an ephemeral port of 127.0.0.1 and relays every
/// connection to `upstream`. Dropping it stops every relay (both sockets
/// closed).
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for task in self.shared.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

impl Proxy {
    /// Starts a proxy in front of `upstream`, every connection passing.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("proxy address");
        let shared = Arc::new(Shared {
            upstream,
            default: Mutex::new(Mode::Pass),
            conns: Mutex::new(Vec::new()),
            tasks: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            client_writes: AtomicU64::new(0),
        });
        let accepting = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                accepting.relay(client);
            }
        });
        shared.tasks.lock().unwrap().push(task.abort_handle());
        Proxy { addr, shared }
    }

    /// Starts a proxy in front of the server a `postgres://` URL names.
    pub async fn for_url(server_url: &str) -> Proxy {
        let (_, host_port, _) = split_url(server_url);
        let upstream = tokio::net::lookup_host(&host_port)
            .await
            .expect("resolve the server")
            .next()
            .expect("an address for the server");
        Proxy::start(upstream).await
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `server_url` (a `postgres://` URL) pointed at this proxy instead,
    /// with `sslmode=disable` unless it names a mode (the proxy reads the
    /// statements to find `LISTEN`).
    pub fn url(&self, server_url: &str) -> String {
        let (head, _, tail) = split_url(server_url);
        let mut url = format!("{head}{}{tail}", self.addr);
        if !url.contains("sslmode=") {
            url.push(if url.contains('?') { '&' } else { '?' });
            url.push_str("sslmode=disable");
        }
        url
    }

    /// Puts every open connection, and every one accepted from now on, in `mode`.
    pub fn set_mode(&self, mode: Mode) {
        *self.shared.default.lock().unwrap() = mode;
        for conn in self.shared.conns.lock().unwrap().iter() {
            conn.mode.send_replace(mode);
        }
    }

    /// Puts every open connection whose client sent `LISTEN` in `mode`
    /// (the others, and later ones, keep theirs); returns how many.
    pub fn set_listen_mode(&self, mode: Mode) -> usize {
        let conns = self.shared.conns.lock().unwrap();
        let mut count = 0;
        for conn in conns
            .iter()
            .filter(|conn| conn.listen.load(Ordering::SeqCst))
        {
            if conn.relaying.load(Ordering::SeqCst) > 0 {
                conn.mode.send_replace(mode);
                count += 1;
            }
        }
        count
    }

    /// Chunks read from clients so far, over every connection: about the
    /// round trips they made (a pipelined batch is one write).
    pub fn client_writes(&self) -> u64 {
        self.shared.client_writes.load(Ordering::SeqCst)
    }

    /// Every connection accepted so far.
    pub fn connections(&self) -> Vec<Connection> {
        self.shared
            .conns
            .lock()
            .unwrap()
            .iter()
            .map(|conn| Connection {
                id: conn.id,
                listen: conn.listen.load(Ordering::SeqCst),
                listened_at: conn.listened_at.get().copied(),
                mode: *conn.mode.borrow(),
                open: conn.relaying.load(Ordering::SeqCst) == 2,
            })
            .collect()
    }
}

impl Shared {
    /// Relays `client` to a new connection to the upstream server: one
    /// reader and one writer task per direction, joined by a queue that
    /// holds what is read until it is due and the mode lets it through.
    fn relay(self: &Arc<Self>, client: TcpStream) {
        let mode = *self.default.lock().unwrap();
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            mode: watch::Sender::new(mode),
            listen: AtomicBool::new(false),
            listened_at: OnceLock::new(),
            relaying: AtomicUsize::new(2),
        });
        self.conns.lock().unwrap().push(Arc::clone(&conn));
        let shared = Arc::clone(self);
        let task = tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(shared.upstream).await else {
                conn.relaying.store(0, Ordering::SeqCst);
                return; // The client sees its connection closed.
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (server_read, server_write) = server.into_split();
            let mut handles = Vec::new();
            for (from, to, watch_listen) in [
                (client_read, server_write, true),
                (server_read, client_write, false),
            ] {
                let (queue, queued) = mpsc::unbounded_channel();
                let reader = tokio::spawn(read_side(
                    from,
                    conn.mode.subscribe(),
                    queue,
                    watch_listen.then(|| (Arc::clone(&conn), Arc::clone(&shared))),
                ));
                let writer = tokio::spawn(write_side(
                    to,
                    conn.mode.subscribe(),
                    queued,
                    Arc::clone(&conn),
                ));
                handles.push(reader.abort_handle());
                handles.push(writer.abort_handle());
            }
            shared.tasks.lock().unwrap().extend(handles);
        });
        self.tasks.lock().unwrap().push(task.abort_handle());
    }
}

/// Bytes read from one side, and when they may be written to the other.
struct Chunk {
    due: Instant,
    bytes: Vec<u8>,
}

/// Waits while `mode` is [`Mode::Blackhole`]; `false` when the proxy is gone.
async fn wait_unblocked(mode: &mut watch::Receiver<Mode>) -> bool {
    mode.wait_for(|mode| *mode != Mode::Blackhole).await.is_ok()
}

/// Reads one direction into `queue` (until end of file or an error), each
/// chunk due after the mode's delay; reads nothing while blackholed. With
/// `client` (the client's side), counts its writes and marks the
/// connection when the bytes hold a `LISTEN` statement.
async fn read_side(
    mut from: OwnedReadHalf,
    mut mode: watch::Receiver<Mode>,
    queue: mpsc::UnboundedSender<Chunk>,
    client: Option<(Arc<Conn>, Arc<Shared>)>,
) {
    const NEEDLE: &[u8] = b"LISTEN ";
    let mut buf = vec![0u8; 64 * 1024];
    // The end of the previous chunk, so a statement split across reads is found.
    let mut tail: Vec<u8> = Vec::new();
    loop {
        if !wait_unblocked(&mut mode).await {
            return;
        }
        let read = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return, // Dropping `queue` ends the writer once it is drained.
            Ok(read) => read,
        };
        if let Some((conn, shared)) = &client {
            shared.client_writes.fetch_add(1, Ordering::SeqCst);
            tail.extend_from_slice(&buf[..read]);
            if tail.windows(NEEDLE.len()).any(|window| window == NEEDLE) {
                let _ = conn.listened_at.set(std::time::Instant::now());
                conn.listen.store(true, Ordering::SeqCst);
            }
            let keep = tail.len().saturating_sub(NEEDLE.len() - 1);
            tail.drain(..keep);
        }
        let due = Instant::now() + mode.borrow().delay();
        let chunk = Chunk {
            due,
            bytes: buf[..read].to_vec(),
        };
        if queue.send(chunk).is_err() {
            return;
        }
    }
}

/// Writes what `queued` holds to the other side, each chunk at its due
/// time and only while not blackholed; closes its write half at the end.
async fn write_side(
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
    mut queued: mpsc::UnboundedReceiver<Chunk>,
    conn: Arc<Conn>,
) {
    while let Some(chunk) = queued.recv().await {
        // A due time already past costs no timer tick.
        if chunk.due > Instant::now() {
            tokio::time::sleep_until(chunk.due).await;
        }
        if !wait_unblocked(&mut mode).await || to.write_all(&chunk.bytes).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
    conn.relaying.fetch_sub(1, Ordering::SeqCst);
}

/// A `postgres://user@host:port/db?query` URL as (`postgres://user@`,
/// `host:port`, `/db?query`); the port defaults to 5432.
fn split_url(url: &str) -> (&str, String, &str) {
    let scheme_end = url.find("://").map_or(0, |at| at + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let host_start = authority.rfind('@').map_or(0, |at| at + 1);
    let host = &authority[host_start..];
    let host_port = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    (
        &url[..scheme_end + host_start],
        host_port,
        &rest[authority_end..],
    )
}
