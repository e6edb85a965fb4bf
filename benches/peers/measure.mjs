// The one measurement `ceiling.mjs` and `split.mjs` both take: run a phase
// of `n` operations and read its rate and the CPU it cost per operation,
// the client's (this process) and, given its pid, a server's (from /proc).
import fs from 'node:fs';

/** A process's CPU so far in µs (user + system, from /proc; 100 ticks/s). */
function processCpu(pid) {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/** This process's CPU so far in µs. */
function clientCpu() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

/** Runs `work` (`n` operations); returns ops/s and µs of CPU per operation
 *  for the client and, with `serverPid`, the server (else `null`). */
export async function measure(n, work, serverPid) {
  const server = () => (serverPid ? processCpu(serverPid) : 0);
  const [s0, c0, t0] = [server(), clientCpu(), performance.now()];
  await work();
  const secs = (performance.now() - t0) / 1000;
  return {
    rate: n / secs,
    clientUs: (clientCpu() - c0) / n,
    serverUs: serverPid ? (server() - s0) / n : null,
  };
}
