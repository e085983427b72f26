//! A private PostgreSQL cluster for tests, started from the installed
//! server binaries (no container): a primary and a streaming standby on
//! ports of their own, made synchronous, that a test kills (SIGKILL, as a
//! crashed host), promotes and rebuilds.
//!
//! The binaries are found in `A2_PG_BIN`, `/usr/lib/postgresql/15/bin`
//! or `pg_config --bindir`; without them the test fails, it never skips.
//! `initdb` refuses to run as root, so as root every server binary runs as
//! the `postgres` OS user (`runuser -u postgres --`), with its data
//! directory in a temporary directory handed to that user. A command
//! prefix ([`ClusterOptions::prefix`], e.g. `ip netns exec NAME`) runs the
//! server binaries inside a network namespace; the listen address is an
//! option too. Administrative SQL goes through the Unix socket in each
//! data directory, so it keeps working whatever happens to the network.
//!
//! Everything started is killed and deleted on drop.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The name of our settings file, included from each `postgresql.conf`.
const SETTINGS: &str = "a2_test.conf";

/// How a test's servers run.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The address the servers listen on, and that the standby and the
    /// URLs connect to.
    pub listen: String,
    /// Words put before every server command (`initdb`, `pg_ctl`,
    /// `pg_basebackup`), e.g. `["ip", "netns", "exec", "ns1"]`.
    pub prefix: Vec<String>,
    /// Where the PostgreSQL binaries are; `None` finds them.
    pub bindir: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1".to_owned(),
            prefix: Vec::new(),
            bindir: None,
        }
    }
}

/// The directory of the PostgreSQL server binaries: `A2_PG_BIN`, the
/// Debian path of PostgreSQL 15, or `pg_config --bindir`. Panics when none
/// holds `initdb`.
pub fn find_bindir() -> PathBuf {
    let has_binaries = |dir: &Path| dir.join("initdb").exists() && dir.join("pg_ctl").exists();
    if let Some(dir) = std::env::var_os("A2_PG_BIN") {
        let dir = PathBuf::from(dir);
        assert!(
            has_binaries(&dir),
            "A2_PG_BIN={}: no initdb and pg_ctl there",
            dir.display()
        );
        return dir;
    }
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = vec!["/usr/lib/postgresql/15/bin".into()];
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output() {
        if output.status.success() {
            let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            candidates.push(dir.into());
        }
    }
    for dir in candidates {
        if has_binaries(&dir) {
            return dir;
        }
        tried.push(dir.display().to_string());
    }
    panic!(
        "no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) in {tried:?}: \
         install the server (e.g. postgresql-15) or set A2_PG_BIN"
    );
}

/// A port free on `listen` now (bound and let go).
pub fn free_port(listen: &str) -> u16 {
    let socket = TcpListener::bind((listen, 0))
        .unwrap_or_else(|error| panic!("no free port on {listen}: {error}"));
    socket.local_addr().expect("bound address").port()
}

/// Whether this process runs as root (`/proc/self` belongs to its user).
fn running_as_root() -> bool {
    fs::metadata("/proc/self")
        .map(|meta| meta.uid() == 0)
        .unwrap_or(false)
}

/// How server commands are run: the binaries, the prefix, the user.
#[derive(Debug)]
struct Runner {
    bindir: PathBuf,
    options: ClusterOptions,
    as_postgres: bool,
}

impl Runner {
    fn new(options: ClusterOptions) -> Self {
        let bindir = options.bindir.clone().unwrap_or_else(find_bindir);
        Self {
            bindir,
            options,
            as_postgres: running_as_root(),
        }
    }

    /// `binary args…` behind the prefix, as the `postgres` user when root.
    fn command(&self, binary: &str, args: &[&str]) -> Command {
        let mut words: Vec<String> = self.options.prefix.clone();
        if self.as_postgres {
            words.extend(["runuser", "-u", "postgres", "--"].map(str::to_owned));
        }
        words.push(self.bindir.join(binary).display().to_string());
        words.extend(args.iter().map(|arg| (*arg).to_owned()));
        let mut command = Command::new(&words[0]);
        command.args(&words[1..]).stdin(Stdio::null());
        command
    }

    /// Runs a server command to its end; panics with its output on failure.
    fn run(&self, binary: &str, args: &[&str]) -> Output {
        let output = self
            .command(binary, args)
            .output()
            .unwrap_or_else(|error| panic!("run {binary}: {error}"));
        assert!(
            output.status.success(),
            "{binary} {args:?} failed ({}):\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    /// Hands `dir` to the `postgres` user, when the servers run as it.
    fn give(&self, dir: &Path) {
        if self.as_postgres {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir)
                .status()
                .expect("run chown");
            assert!(status.success(), "chown {} failed", dir.display());
        }
    }
}

/// One PostgreSQL server: its data directory and port.
#[derive(Debug)]
pub struct Node {
    runner: Arc<Runner>,
    data: PathBuf,
    port: u16,
    running: bool,
}

impl Node {
    /// A new cluster (`initdb`, trust authentication) in `data`, started,
    /// listening on `port`.
    fn init(runner: Arc<Runner>, data: PathBuf, port: u16) -> Self {
        let path = data.display().to_string();
        runner.run(
            "initdb",
            &[
                "-D",
                &path,
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        );
        let mut conf = fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))
            .expect("open postgresql.conf");
        std::io::Write::write_all(&mut conf, format!("\ninclude '{SETTINGS}'\n").as_bytes())
            .expect("include our settings");
        // Trust from anywhere, replication included: a throwaway cluster on
        // a private port (and perhaps a private network namespace).
        fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             local replication all trust\n\
             host all all 0.0.0.0/0 trust\n\
             host all all ::/0 trust\n\
             host replication all 0.0.0.0/0 trust\n\
             host replication all ::/0 trust\n",
        )
        .expect("write pg_hba.conf");
        let mut node = Self {
            runner,
            data,
            port,
            running: false,
        };
        node.write_settings();
        node.start();
        node
    }

    /// The settings that are this node's own (port, socket directory),
    /// with the ones every node shares.
    fn write_settings(&self) {
        let settings = format!(
            "listen_addresses = '{listen}'\n\
             port = {port}\n\
             unix_socket_directories = '{socket}'\n\
             wal_level = replica\n\
             max_wal_senders = 10\n\
             wal_keep_size = '512MB'\n\
             hot_standby = on\n\
             max_connections = 200\n\
             shared_buffers = '64MB'\n\
             # No fsync: the tests kill server processes (SIGKILL), never the\n\
             # host, and a killed process's writes are in the OS page cache all\n\
             # the same, so skipping fsync loses nothing such a test could see.\n\
             fsync = off\n\
             full_page_writes = off\n\
             logging_collector = off\n\
             log_min_messages = warning\n",
            listen = self.runner.options.listen,
            port = self.port,
            socket = self.data.display(),
        );
        fs::write(self.data.join(SETTINGS), settings).expect("write our settings");
        self.runner.give(&self.data);
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// Whether it was started and not stopped or killed since.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// `postgres://postgres@LISTEN:PORT/DATABASE`.
    pub fn url(&self, database: &str) -> String {
        format!(
            "postgres://postgres@{}:{}/{database}",
            self.runner.options.listen, self.port
        )
    }

    fn log_file(&self) -> PathBuf {
        self.data.with_extension("log")
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&mut self) {
        let data = self.data.display().to_string();
        let log = self.log_file().display().to_string();
        self.runner.run(
            "pg_ctl",
            &["start", "-w", "-t", "60", "-D", &data, "-l", &log],
        );
        self.running = true;
    }

    /// Stops the server (fast shutdown) and waits for it.
    pub fn stop(&mut self) {
        let data = self.data.display().to_string();
        self.runner.run(
            "pg_ctl",
            &["stop", "-w", "-t", "60", "-m", "fast", "-D", &data],
        );
        self.running = false;
    }

    /// The postmaster's process id, from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = fs::read_to_string(self.data.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Kills the server as a crashed host would end it: the postmaster is
    /// frozen (SIGSTOP, so it forks nothing more and notices nothing), then
    /// it and every one of its processes get SIGKILL. Killing only the
    /// postmaster would leave its backends serving their clients for a
    /// while. Returns once none of them runs any more. Does nothing to a
    /// server not running (whose `postmaster.pid` may name a reused pid).
    pub fn kill(&mut self) {
        if !self.running {
            return;
        }
        let Some(postmaster) = self.postmaster_pid() else {
            self.running = false;
            return;
        };
        signal("STOP", &[postmaster]);
        let mut pids = descendants(postmaster);
        pids.push(postmaster);
        signal("KILL", &pids);
        let start = Instant::now();
        while pids.iter().any(|pid| alive(*pid)) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "server processes {pids:?} survive SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        self.running = false;
    }

    /// Promotes a standby (`pg_ctl promote -w`): it returns once the server
    /// accepts writes.
    pub fn promote(&self) {
        let data = self.data.display().to_string();
        self.runner
            .run("pg_ctl", &["promote", "-w", "-t", "60", "-D", &data]);
    }

    /// Runs `sql` through `psql` on the node's Unix socket and returns its
    /// unaligned, tuples-only output.
    pub fn psql(&self, sql: &str) -> String {
        let output = Command::new(self.runner.bindir.join("psql"))
            .arg("-h")
            .arg(&self.data)
            .args(["-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-X", "-A", "-t"])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            output.status.success(),
            "psql on port {} failed on {sql:?}: {}",
            self.port,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// A standby of `primary` (`pg_basebackup -R`) in `data`, started,
    /// listening on `port`. It carries none of the primary's synchronous
    /// standby names into a later life as a primary.
    fn standby_of(primary: &Node, data: PathBuf, port: u16) -> Self {
        let runner = Arc::clone(&primary.runner);
        let path = data.display().to_string();
        let primary_port = primary.port.to_string();
        runner.run(
            "pg_basebackup",
            &[
                "-h",
                &runner.options.listen,
                "-p",
                &primary_port,
                "-U",
                "postgres",
                "-D",
                &path,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        // `ALTER SYSTEM` settings of the primary were copied with the data:
        // a promoted standby that kept `synchronous_standby_names` would
        // wait on every commit for a standby it does not have.
        let auto = data.join("postgresql.auto.conf");
        let kept: String = fs::read_to_string(&auto)
            .expect("read postgresql.auto.conf")
            .lines()
            .filter(|line| !line.trim_start().starts_with("synchronous_standby_names"))
            .map(|line| format!("{line}\n"))
            .collect();
        fs::write(&auto, kept).expect("write postgresql.auto.conf");
        let _ = fs::remove_file(data.join("postmaster.pid"));
        let mut node = Self {
            runner,
            data,
            port,
            running: false,
        };
        node.write_settings();
        node.start();
        node
    }

    /// Makes the standbys of this primary synchronous (any of them, `'*'`)
    /// and waits until one streams as `sync`.
    pub fn require_sync_standby(&self) {
        self.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        self.psql("SELECT pg_reload_conf()");
        let start = Instant::now();
        loop {
            let synced = self.psql(
                "SELECT count(*) FROM pg_stat_replication \
                 WHERE sync_state = 'sync' AND state = 'streaming'",
            );
            if synced != "0" {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "no synchronous standby on port {} after 60 s: {}",
                self.port,
                self.psql("SELECT application_name, state, sync_state FROM pg_stat_replication")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the server is in recovery (a standby).
    pub fn in_recovery(&self) -> bool {
        self.psql("SELECT pg_is_in_recovery()") == "t"
    }

    /// The server's log so far (`pg_ctl -l`).
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_file()).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.data);
        let _ = fs::remove_file(self.log_file());
    }
}

/// Sends `SIGname` to `pids`.
fn signal(name: &str, pids: &[u32]) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null())
        .status();
}

/// Whether `pid` runs (exists and is no zombie).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Every live process below `root`, from `/proc`.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in fs::read_dir("/proc").expect("read /proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: the command may hold spaces and ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse().ok());
        if let Some(ppid) = ppid {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// What one failover took.
#[derive(Debug, Clone, Copy)]
pub struct Failover {
    /// The port of the primary that was killed.
    pub killed: u16,
    /// The port of the standby promoted in its place.
    pub promoted: u16,
    /// When the kill returned (every server process gone).
    pub killed_at: std::time::SystemTime,
    /// When the promotion returned (the new primary accepts writes).
    pub promoted_at: std::time::SystemTime,
}

/// A primary and a synchronous standby on two ports that keep their
/// places in the multi-host URL while their roles alternate: after a
/// failover, [`Cluster::replace_standby`] makes a fresh standby of the new
/// primary on the killed primary's port.
#[derive(Debug)]
pub struct Cluster {
    runner: Arc<Runner>,
    /// Indexed by slot: 0 and 1; `None` while a slot has no server.
    nodes: [Option<Node>; 2],
    ports: [u16; 2],
    primary: usize,
    generation: u32,
    // Dropped after the nodes, which delete their own directories first.
    root: tempfile::TempDir,
}

impl Cluster {
    /// A primary and a synchronous standby on free ports of the listen
    /// address.
    pub fn start(options: ClusterOptions) -> Self {
        let ports = [free_port(&options.listen), free_port(&options.listen)];
        Self::start_on(options, ports)
    }

    /// A primary on `ports[0]` and a synchronous standby on `ports[1]`.
    pub fn start_on(options: ClusterOptions, ports: [u16; 2]) -> Self {
        let runner = Arc::new(Runner::new(options));
        let root = tempfile::Builder::new()
            .prefix("a2-pg-cluster-")
            .tempdir()
            .expect("a temporary directory");
        runner.give(root.path());
        let primary = Node::init(
            Arc::clone(&runner),
            root.path().join("node-0-gen-0"),
            ports[0],
        );
        let mut cluster = Self {
            runner,
            nodes: [Some(primary), None],
            ports,
            primary: 0,
            generation: 0,
            root,
        };
        cluster.replace_standby();
        cluster
    }

    /// The current primary.
    pub fn primary(&self) -> &Node {
        self.nodes[self.primary].as_ref().expect("a primary")
    }

    /// The current standby, if there is one.
    pub fn standby(&self) -> Option<&Node> {
        self.nodes[1 - self.primary].as_ref()
    }

    /// Both ports, in URL order.
    pub fn ports(&self) -> [u16; 2] {
        self.ports
    }

    /// The multi-host URL of both servers, read-write sessions only:
    /// `postgres://postgres@A:P1,A:P2/DATABASE?target_session_attrs=read-write`
    /// followed by `&query` when it is not empty.
    pub fn url(&self, database: &str, query: &str) -> String {
        let listen = &self.runner.options.listen;
        let mut url = format!(
            "postgres://postgres@{listen}:{},{listen}:{}/{database}?target_session_attrs=read-write",
            self.ports[0], self.ports[1]
        );
        if !query.is_empty() {
            url.push('&');
            url.push_str(query);
        }
        url
    }

    /// Kills the primary (every process, SIGKILL) and promotes the
    /// standby, which must be there.
    pub fn failover(&mut self) -> Failover {
        self.failover_after(Duration::ZERO)
    }

    /// Kills the primary and promotes the standby `delay` later (the time
    /// a failover manager takes to notice and decide).
    pub fn failover_after(&mut self, delay: Duration) -> Failover {
        let killed = self.ports[self.primary];
        let mut old = self.nodes[self.primary].take().expect("a primary");
        old.kill();
        let killed_at = std::time::SystemTime::now();
        std::thread::sleep(delay);
        let standby = 1 - self.primary;
        let node = self.nodes[standby].as_ref().expect("a standby to promote");
        node.promote();
        let promoted_at = std::time::SystemTime::now();
        self.primary = standby;
        // The killed server's directory goes; its port waits for a standby.
        drop(old);
        Failover {
            killed,
            promoted: self.ports[standby],
            killed_at,
            promoted_at,
        }
    }

    /// A fresh standby of the primary on the other port (its old server,
    /// if any, killed and deleted first), made synchronous.
    pub fn replace_standby(&mut self) {
        let slot = 1 - self.primary;
        drop(self.nodes[slot].take());
        self.generation += 1;
        let data = self
            .root
            .path()
            .join(format!("node-{slot}-gen-{}", self.generation));
        let standby = Node::standby_of(self.primary(), data, self.ports[slot]);
        self.nodes[slot] = Some(standby);
        self.primary().require_sync_standby();
    }
}
