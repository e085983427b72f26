//! The workers of one run: processes of this binary (`bench-worker`) over
//! a shared scratch store, or tasks of this process for `memory:`.
//!
//! A worker process opens the store, makes one waiting claim that claims
//! nothing (so its wake-up is set up), prints `{"ready":true}` on stdout,
//! waits for the line `go` on stdin (sent once every worker is ready, so
//! no worker's writes hold up another's open and all start together) and
//! works until its stdin closes (so it also stops when the bench dies),
//! then prints its [`WorkerReport`] as one JSON line and exits. Errors go
//! to its stderr as one line, as every command's do.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2_store::{ClaimWorkRequest, ConsumerDeclaration, OpenOptions, Store};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::cpu;
use super::home::{worker_url, Place};
use super::worker::{work, WorkerConfig, WorkerReport};
use crate::args::{BenchWorkerArgs, Runner};
use crate::failure::Failure;

/// The variable a worker process reads its base store URL from.
pub const WORKER_URL_VAR: &str = "A2_BENCH_WORKER_URL";
/// How long a worker process may take to open the store and say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// How the workers of a run claim.
#[derive(Debug, Clone, Copy)]
pub struct FleetConfig {
    /// How many workers.
    pub workers: u32,
    /// How long one `claim_work` call waits, ms.
    pub wait_ms: i64,
    /// Heads one call claims at most (the loop).
    pub claim_limit: u32,
    /// What each worker runs.
    pub runner: Runner,
    /// Heads processed at once (`a2-worker`).
    pub max_in_flight: u32,
}

impl FleetConfig {
    /// The config of worker number `worker`.
    fn worker(&self, worker: u32) -> WorkerConfig {
        WorkerConfig {
            worker,
            wait_ms: self.wait_ms,
            claim_limit: self.claim_limit,
            runner: self.runner,
            max_in_flight: self.max_in_flight,
        }
    }
}

/// Running workers.
pub struct Fleet {
    kind: Kind,
    /// Process CPU time when the tasks started (tasks only).
    cpu_before: Option<Duration>,
    started: Instant,
}

enum Kind {
    Tasks {
        stop: watch::Sender<bool>,
        tasks: Vec<JoinHandle<Result<WorkerReport, Failure>>>,
    },
    Processes(Vec<WorkerProcess>),
}

struct WorkerProcess {
    worker: u32,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Option<ChildStderr>,
}

/// What a stopped fleet reports.
#[derive(Debug, Clone)]
pub struct FleetReport {
    /// One per worker, by number.
    pub workers: Vec<WorkerReport>,
    /// CPU this process used while tasks worked, s (`None` for processes or without `/proc`).
    pub in_process_cpu_s: Option<f64>,
    /// Wall time from start to stop, s.
    pub window_s: f64,
}

impl Fleet {
    /// Starts `config.workers` workers on `store` (tasks) or on `place`
    /// (processes, opening `base_url`'s backend there); returns when every
    /// worker is ready to claim.
    pub async fn start(
        store: &Arc<dyn Store>,
        base_url: &str,
        place: &Place,
        config: FleetConfig,
    ) -> Result<Self, Failure> {
        if let Place::InProcess = place {
            let (stop, receiver) = watch::channel(false);
            let cpu_before = cpu::process_cpu();
            let tasks = (1..=config.workers)
                .map(|worker| {
                    let store = Arc::clone(store);
                    let receiver = receiver.clone();
                    let config = config.worker(worker);
                    tokio::spawn(async move { work(&store, config, receiver, false).await })
                })
                .collect();
            return Ok(Self {
                kind: Kind::Tasks { stop, tasks },
                cpu_before,
                started: Instant::now(),
            });
        }
        let program = std::env::current_exe().map_err(|e| {
            Failure::new(format!("finding this program to start bench workers: {e}"))
        })?;
        let mut processes = Vec::new();
        for worker in 1..=config.workers {
            let mut command = Command::new(&program);
            command
                .arg("bench-worker")
                .arg("--worker")
                .arg(worker.to_string())
                .arg("--wait-ms")
                .arg(config.wait_ms.to_string())
                .arg("--claim-limit")
                .arg(config.claim_limit.to_string())
                .arg("--runner")
                .arg(config.runner.as_arg())
                .arg("--max-in-flight")
                .arg(config.max_in_flight.to_string())
                .env(WORKER_URL_VAR, base_url)
                .env_remove(crate::URL_VAR)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            match place {
                Place::SqliteFile(path) => {
                    command.arg("--sqlite-file").arg(path);
                }
                Place::Schema(schema) => {
                    command.arg("--schema").arg(schema);
                }
                Place::InProcess => {}
            }
            let mut child = command.spawn().map_err(|e| {
                Failure::new(format!(
                    "starting bench worker {worker} ({}): {e}",
                    program.display()
                ))
            })?;
            let (Some(stdin), Some(stdout), stderr) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(Failure::new(format!(
                    "bench worker {worker} started without its pipes"
                )));
            };
            processes.push(WorkerProcess {
                worker,
                child,
                stdin: Some(stdin),
                stdout: BufReader::new(stdout).lines(),
                stderr,
            });
        }
        for process in &mut processes {
            let line = tokio::time::timeout(READY_TIMEOUT, process.stdout.next_line()).await;
            match line {
                Ok(Ok(Some(line))) if line.trim() == r#"{"ready":true}"# => {}
                Ok(Ok(Some(line))) => {
                    return Err(Failure::new(format!(
                        "bench worker {} said '{line}' instead of being ready",
                        process.worker
                    )))
                }
                Ok(_) => return Err(process.died("starting").await),
                Err(_) => {
                    return Err(Failure::new(format!(
                        "bench worker {} was not ready within {} s",
                        process.worker,
                        READY_TIMEOUT.as_secs()
                    )))
                }
            }
        }
        for process in &mut processes {
            let go = match process.stdin.as_mut() {
                Some(stdin) => stdin.write_all(b"go\n").await.and(stdin.flush().await),
                None => Ok(()),
            };
            if go.is_err() {
                return Err(process.died("starting").await);
            }
        }
        Ok(Self {
            kind: Kind::Processes(processes),
            cpu_before: None,
            started: Instant::now(),
        })
    }

    /// `Err` when a worker has ended before being told to stop (it failed).
    pub async fn check_alive(&mut self) -> Result<(), Failure> {
        match &mut self.kind {
            Kind::Tasks { tasks, .. } => {
                if let Some(at) = tasks.iter().position(JoinHandle::is_finished) {
                    let task = tasks.swap_remove(at);
                    return Err(match task.await {
                        Ok(Err(failure)) => failure,
                        Ok(Ok(_)) => Failure::new("a bench worker task stopped on its own"),
                        Err(join) => Failure::new(format!("a bench worker task failed: {join}")),
                    });
                }
                Ok(())
            }
            Kind::Processes(processes) => {
                for process in processes.iter_mut() {
                    if let Ok(Some(_)) = process.child.try_wait() {
                        return Err(process.died("working").await);
                    }
                }
                Ok(())
            }
        }
    }

    /// Stops every worker and collects their reports.
    pub async fn stop(self) -> Result<FleetReport, Failure> {
        let window_s = self.started.elapsed().as_secs_f64();
        match self.kind {
            Kind::Tasks { stop, tasks } => {
                let _ = stop.send(true);
                let mut workers = Vec::new();
                for task in tasks {
                    match task.await {
                        Ok(Ok(report)) => workers.push(report),
                        Ok(Err(failure)) => return Err(failure),
                        Err(join) => {
                            return Err(Failure::new(format!("a bench worker task failed: {join}")))
                        }
                    }
                }
                let in_process_cpu_s = match (self.cpu_before, cpu::process_cpu()) {
                    (Some(before), Some(after)) => Some(after.saturating_sub(before).as_secs_f64()),
                    _ => None,
                };
                Ok(FleetReport {
                    workers,
                    in_process_cpu_s,
                    window_s,
                })
            }
            Kind::Processes(mut processes) => {
                // Close every stdin first: all stop together.
                for process in &mut processes {
                    process.stdin = None;
                }
                let mut workers = Vec::new();
                for mut process in processes {
                    workers.push(process.report().await?);
                }
                Ok(FleetReport {
                    workers,
                    in_process_cpu_s: None,
                    window_s,
                })
            }
        }
    }
}

/// How long a stopped worker may take to finish its call and report.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

impl WorkerProcess {
    async fn report(&mut self) -> Result<WorkerReport, Failure> {
        let line = tokio::time::timeout(STOP_TIMEOUT, self.stdout.next_line()).await;
        let report = match line {
            Ok(Ok(Some(line))) => serde_json::from_str::<WorkerReport>(&line).map_err(|e| {
                Failure::new(format!(
                    "bench worker {} reported '{line}', not a report: {e}",
                    self.worker
                ))
            })?,
            Ok(_) => return Err(self.died("stopping").await),
            Err(_) => {
                return Err(Failure::new(format!(
                    "bench worker {} did not report within {} s of being stopped",
                    self.worker,
                    STOP_TIMEOUT.as_secs()
                )))
            }
        };
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(report),
            Ok(Ok(_)) => Err(self.died("stopping").await),
            Ok(Err(e)) => Err(Failure::new(format!(
                "waiting for bench worker {}: {e}",
                self.worker
            ))),
            Err(_) => Err(Failure::new(format!(
                "bench worker {} did not exit within {} s of reporting",
                self.worker,
                STOP_TIMEOUT.as_secs()
            ))),
        }
    }

    /// The failure of a worker that ended unexpectedly: its error line.
    async fn died(&mut self, doing: &str) -> Failure {
        let _ = tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await;
        let mut text = String::new();
        if let Some(mut stderr) = self.stderr.take() {
            let _ = tokio::time::timeout(STOP_TIMEOUT, stderr.read_to_string(&mut text)).await;
        }
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .map(str::trim)
            .unwrap_or("it said nothing")
            .trim_start_matches("error: ")
            .to_owned();
        Failure::new(format!(
            "bench worker {} ended while {doing}: {last}",
            self.worker
        ))
    }
}

/// One waiting claim of a consumer that has no cursor, before the worker
/// says it is ready: it sets up the store's wake-up (PostgreSQL's
/// `LISTEN` connection, opened by the first wait), as a worker that has
/// been running has it, so the producer's first messages (sent at `go`)
/// are not timed against a process still connecting. It claims nothing.
async fn warm_up(store: &dyn Store) -> Result<(), a2_store::StoreError> {
    let nobody = vec![ConsumerDeclaration::targeted("a2-bench-warm-up")];
    let request = ClaimWorkRequest::new("a2-bench-warm-up", nobody, 1_000).with_wait_ms(1);
    store.claim_work(request).await.map(|_| ())
}

/// Runs `bench-worker`: the process side of the protocol above.
pub async fn run_worker(args: &BenchWorkerArgs) -> Result<(), Failure> {
    let base_url = std::env::var(WORKER_URL_VAR).map_err(|_| {
        Failure::new(format!(
            "bench-worker is started by `a2-store bench` (it reads the store from ${WORKER_URL_VAR}); run `a2-store bench --workload runtime` instead"
        ))
    })?;
    let place = match (&args.sqlite_file, &args.schema) {
        (Some(path), _) => Place::SqliteFile(path.clone()),
        (None, Some(schema)) => Place::Schema(schema.clone()),
        (None, None) => Place::InProcess,
    };
    let url = worker_url(&base_url, &place)?;
    let shown = a2_store::StoreUrl::redact(&base_url);
    let store: Arc<dyn Store> = a2_store::open_url(&url, OpenOptions::default())
        .await
        .map_err(|e| Failure::store(&shown, "opening the bench store", &e))?;
    warm_up(store.as_ref())
        .await
        .map_err(|e| Failure::store(&shown, "setting up the bench worker's wake-up", &e))?;
    let (stop, receiver) = watch::channel(false);
    let (go, started) = tokio::sync::oneshot::channel::<()>();
    // Blocking reads on a thread of its own: the line `go` starts the
    // work; EOF (or any error) is the stop.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut stdin, &mut line).is_ok() && line.trim() == "go" {
            let _ = go.send(());
            let mut sink = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdin, &mut sink);
        }
        let _ = stop.send(true);
    });
    crate::output::print("{\"ready\":true}\n")?;
    if started.await.is_err() {
        // Stopped before starting: the bench gave up; nothing to report.
        return Ok(());
    }
    let config = WorkerConfig {
        worker: args.worker,
        wait_ms: args.wait_ms,
        claim_limit: args.claim_limit,
        runner: args.runner,
        max_in_flight: args.max_in_flight,
    };
    let report = work(&store, config, receiver, true).await?;
    let line = serde_json::to_string(&report)
        .map_err(|e| Failure::new(format!("encoding the worker report: {e}")))?;
    crate::output::print(&format!("{line}\n"))
}
