// Where a peer's CPU goes in the harness's workload: the server's CPU and
// the client's CPU per operation, through the harness's own adapter
// (`peers/<peer>.mjs`, one Node process, 64 in flight), against a server
// already started (`split.sh` starts one). On a 2-core machine both share
// the cores, so the rate is about 2 cores / (server + client CPU per op);
// a lever is judged by the server's CPU per op over alternating runs, which
// drifts far less than the rate.
//
//   node benches/peers/split.mjs PATH_TO_BENCH_PEERS PEER SERVER_PID
//
// The adapter reads its server from the environment as under run.sh
// (TESSERA_URL and TESSERA_KEY; REDIS_PORT). N (default 40000) operations
// per phase: one-by-one enqueue into "single", a batched enqueue into
// "work" (untimed), then claim+submit cycles on "work". The cycles' latency
// is also printed per window of WINDOW (default 2000) jobs in completion order,
// to tell a slow start (a client's warm-up) from stalls spread over the run.
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { measure } from './measure.mjs';

const [harness, name, pid] = process.argv.slice(2);
if (!harness || !name || !pid) {
  console.error('usage: node benches/peers/split.mjs PATH_TO_BENCH_PEERS PEER SERVER_PID');
  process.exit(2);
}
const dir = pathToFileURL(path.resolve(harness)).href;
const peer = await import(`${dir}/peers/${name}.mjs`);
const { config, inParallel, now, percentile } = await import(`${dir}/lib.mjs`);
const cfg = config();
const N = Number(process.env.N ?? 40000);
const WINDOW = Number(process.env.WINDOW ?? 2000);

/** Runs `work` (N operations) and prints the rate and both CPUs per operation. */
async function phase(label, work, extra = () => '') {
  const { rate, serverUs, clientUs } = await measure(N, work, pid);
  console.log(
    `${name} ${label.padEnd(8)} ${Math.round(rate)} ops/s   server ${serverUs.toFixed(1)} µs/op   client ${clientUs.toFixed(1)} µs/op${extra()}`,
  );
}

await peer.prepare(cfg);
let producer = await peer.producer(cfg, 'single', cfg.w);
await phase('enqueue', () => inParallel(N, cfg.w, (i) => producer.addOne(i)));
await producer.close();

producer = await peer.producer(cfg, 'work', 1);
for (let i = 0; i < N; i += cfg.batch) {
  await producer.addMany(Array.from({ length: Math.min(cfg.batch, N - i) }, (_, j) => i + j));
}
await producer.close();
await peer.settle?.(cfg);

const claimed = new Map();
const latency = [];
let finish;
const finished = new Promise((resolve) => (finish = resolve));
const hooks = {
  claimed: (id) => claimed.set(id, now()),
  done: (id) => {
    latency.push(now() - claimed.get(id));
    if (latency.length === N) finish();
  },
};
const consumer = await peer.consumer(cfg, 'work', cfg.w, hooks);
await phase(
  'cycles',
  async () => {
    consumer.start();
    await finished;
  },
  () => {
    const sorted = [...latency].sort((a, b) => a - b);
    return `   p50 ${percentile(sorted, 50).toFixed(2)} ms   p99 ${percentile(sorted, 99).toFixed(2)} ms`;
  },
);
for (let from = 0; from < latency.length; from += WINDOW) {
  const w = latency.slice(from, from + WINDOW).sort((a, b) => a - b);
  const ms = (p) => percentile(w, p).toFixed(1).padStart(6);
  console.log(`${name} jobs ${String(from).padStart(6)}+   p50 ${ms(50)} ms   p99 ${ms(99)} ms   max ${w[w.length - 1].toFixed(1)} ms`);
}
await consumer.stop();
process.exit(0);
