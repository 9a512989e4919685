// The producer of redefer's peer benchmark (benches/scenarios/peer.rs), in a process of its own:
//   node produce.mjs bulk   <redis port> <queue> <jobs>           adds <jobs> no-op jobs, due at once, with addBulk
//   node produce.mjs steady <redis port> <queue> <jobs/s> <ms>    adds jobs one by one at a steady rate for <ms>
// The steady producer adds rate/1000 jobs per 1 ms tick (the same pacing as redefer's producer).
import { Queue } from "bullmq";

const [mode, port, name, a, b] = process.argv.slice(2);
const connection = { host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: null };
const queue = new Queue(name, { connection });
const opts = { removeOnComplete: true, removeOnFail: true };

if (mode === "bulk") {
  const jobs = Number(a);
  for (let first = 0; first < jobs; first += 1000) {
    const batch = [];
    for (let i = first; i < Math.min(first + 1000, jobs); i++) batch.push({ name: "noop", data: { i }, opts });
    await queue.addBulk(batch);
  }
} else if (mode === "steady") {
  const [rate, ms] = [Number(a), Number(b)];
  const start = performance.now();
  let added = 0;
  const total = Math.floor((rate * ms) / 1000);
  while (added < total) {
    const due = Math.min(total, Math.floor(((performance.now() - start) * rate) / 1000));
    const adds = [];
    for (; added < due; added++) adds.push(queue.add("noop", { i: added }, opts));
    await Promise.all(adds);
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
} else {
  throw new Error(`unknown mode ${mode}`);
}
await queue.close();
