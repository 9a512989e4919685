// The workers of redefer's peer benchmark (benches/scenarios/peer.rs), in a process of its own:
//   node work.mjs <redis port> <queue> <workers> <concurrency>
// Connects <workers> BullMQ workers of <concurrency> each on one no-op handler, prints "ready",
// starts them when a line "go" comes on stdin (so that several processes start together), and
// runs until its stdin closes; then prints one JSON line: when the
// first handler started and the last ended (ms since the epoch), how many jobs it handled, and
// each job's lag (start of handling minus the time it was added, ms).
import { createInterface } from "node:readline";
import { Worker } from "bullmq";

const [port, name, workers, concurrency] = process.argv.slice(2);
const connection = { host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: null };
let first = null;
let last = null;
const lags = [];
const handler = async (job) => {
  const now = Date.now();
  if (first === null) first = performance.timeOrigin + performance.now();
  lags.push(now - job.timestamp);
  last = performance.timeOrigin + performance.now();
};
const running = [];
for (let i = 0; i < Number(workers); i++) {
  running.push(new Worker(name, handler, { connection, concurrency: Number(concurrency), autorun: false }));
}
await Promise.all(running.map((worker) => worker.waitUntilReady()));
console.log("ready");

const input = createInterface({ input: process.stdin });
input.on("line", (line) => {
  if (line === "go") running.forEach((worker) => worker.run());
});
input.on("close", async () => {
  await Promise.all(running.map((worker) => worker.close()));
  // Written before exiting: a pipe takes a long line in several writes.
  const report = JSON.stringify({ first_start_ms: first, last_end_ms: last, handled: lags.length, lags_ms: lags });
  process.stdout.write(`${report}\n`, () => process.exit(0));
});
