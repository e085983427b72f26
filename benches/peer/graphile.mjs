// The graphile-worker side of the peer bench, run by `peer_drain` (see
// `benches/peer/run`). Two steps, each its own process so the caller can
// read the server's counters between them:
//
//   node graphile.mjs prepare <jobs> <sessions> <independent|queues>
//       installs graphile-worker's schema and enqueues the jobs, payload
//       `{"n": n}`: plain jobs (`independent`), or job n in the named queue
//       `s<n % sessions>` (`queues`: a session's jobs run one at a time),
//       then prints `{"enqueued": N}`.
//   node graphile.mjs drain <jobs> <default|batched>
//       runs the worker (16 concurrent jobs, a no-op task) from start until
//       every job ran and the runner stopped (pending batched completions are
//       flushed by `stop`), then prints
//       `{"seconds": S, "handled": H, "distinct": D}`.
//
// The database is named by the environment variable A2_PEER_DB_URL, so the
// URL never shows in a process listing.
import { Logger, makeWorkerUtils, run } from "graphile-worker";

const CONCURRENCY = 16;
// graphile-worker's own advice for its pool: `concurrentJobs + 2`.
const MAX_POOL_SIZE = CONCURRENCY + 2;
// Jobs per `addJobs` call while enqueueing.
const ENQUEUE_BATCH = 1000;

// Warnings and errors on stderr; graphile-worker's info lines would drown the table.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") {
    console.error(`graphile-worker ${level}: ${message}`);
  }
});

function die(message) {
  console.error(`graphile.mjs: ${message}`);
  process.exit(2);
}

function count(text, what) {
  const value = Number.parseInt(text ?? "", 10);
  if (!Number.isSafeInteger(value) || value < 1) {
    die(`${what} must be a positive integer, not '${text}'`);
  }
  return value;
}

const connectionString = process.env.A2_PEER_DB_URL;
if (!connectionString) {
  die("A2_PEER_DB_URL is not set");
}

async function prepare(jobs, sessions, workload) {
  const utils = await makeWorkerUtils({ connectionString, logger });
  try {
    await utils.migrate();
    for (let start = 0; start < jobs; start += ENQUEUE_BATCH) {
      const specs = [];
      for (let n = start; n < Math.min(jobs, start + ENQUEUE_BATCH); n++) {
        const spec = { identifier: "job", payload: { n } };
        if (workload === "queues") {
          spec.queueName = `s${n % sessions}`;
        }
        specs.push(spec);
      }
      await utils.addJobs(specs);
    }
  } finally {
    await utils.release();
  }
  console.log(JSON.stringify({ enqueued: jobs }));
}

async function drain(jobs, mode) {
  const worker = {
    connectionString,
    concurrentJobs: CONCURRENCY,
    maxPoolSize: MAX_POOL_SIZE,
  };
  if (mode === "batched") {
    // graphile-worker's documented high-throughput settings
    // (https://worker.graphile.org/docs/performance): a local queue of 500
    // jobs fetched in one claim, and completions (and failures) batched
    // with no added delay.
    worker.localQueue = { size: 500 };
    worker.completeJobBatchDelay = 0;
    worker.failJobBatchDelay = 0;
  }
  const seen = new Set();
  let handled = 0;
  let allHandled;
  const done = new Promise((resolve) => {
    allHandled = resolve;
  });
  const taskList = {
    job: async (payload) => {
      handled += 1;
      seen.add(payload.n);
      if (handled === jobs) {
        allHandled();
      }
    },
  };
  const started = process.hrtime.bigint();
  const runner = await run({
    preset: { worker },
    concurrency: CONCURRENCY,
    noHandleSignals: true,
    logger,
    taskList,
  });
  await done;
  // Stopping waits for the running jobs and flushes batched completions, so
  // every job's row is gone when it returns.
  await runner.stop();
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  console.log(JSON.stringify({ seconds, handled, distinct: seen.size }));
}

const [step, ...args] = process.argv.slice(2);
if (step === "prepare") {
  const [jobs, sessions, workload] = args;
  if (workload !== "independent" && workload !== "queues") {
    die(`workload must be independent or queues, not '${workload}'`);
  }
  await prepare(count(jobs, "jobs"), count(sessions, "sessions"), workload);
} else if (step === "drain") {
  const [jobs, mode] = args;
  if (mode !== "default" && mode !== "batched") {
    die(`mode must be default or batched, not '${mode}'`);
  }
  await drain(count(jobs, "jobs"), mode);
} else {
  die("usage: graphile.mjs prepare <jobs> <sessions> <independent|queues> | drain <jobs> <default|batched>");
}
process.exit(0);
