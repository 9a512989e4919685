// BullMQ on the workload of redefer's peer benchmark (benches/scenarios/peer.rs):
//   node delayed.mjs <redis port> <jobs> <spread ms> <concurrency>
// Adds <jobs> no-op jobs with delays spread evenly over <spread ms> and handles them with a
// worker of <concurrency>. Prints one JSON line: jobs/s from the first add to the last
// completion, and promotion lag (start of handling minus due time) percentiles in ms.
import { Queue, Worker } from "bullmq";

const [port, jobs, spreadMs, concurrency] = process.argv.slice(2).map(Number);
const connection = { host: "127.0.0.1", port, maxRetriesPerRequest: null };
const name = `bench-${process.pid}`;

const queue = new Queue(name, { connection });
const lags = [];
let done;
const finished = new Promise((resolve) => (done = resolve));
const worker = new Worker(
  name,
  async (job) => {
    lags.push(Date.now() - (job.timestamp + (job.opts.delay ?? 0)));
    if (lags.length === jobs) done();
  },
  { connection, concurrency, removeOnComplete: { count: 0 } },
);
await worker.waitUntilReady();

const start = Date.now();
const chunk = 1000;
for (let first = 0; first < jobs; first += chunk) {
  const batch = [];
  for (let i = first; i < Math.min(first + chunk, jobs); i++) {
    const delay = jobs > 1 ? Math.floor((i * spreadMs) / (jobs - 1)) : 0;
    batch.push({ name: "noop", data: { i }, opts: { delay, removeOnComplete: true } });
  }
  await queue.addBulk(batch);
}
await finished;
const elapsed = (Date.now() - start) / 1000;

lags.sort((a, b) => a - b);
const at = (q) => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))];
console.log(JSON.stringify({ jobs_per_s: jobs / elapsed, lag_p50_ms: at(0.5), lag_p99_ms: at(0.99), lag_max_ms: lags[lags.length - 1] }));
await worker.close();
await queue.obliterate({ force: true });
await queue.close();
