// Owns the probe the benchmarks preload (node --import) into a daemon child process: at exit it writes the process's
// peak RSS, sampled peak heap and external memory, and CPU time as JSON to the file named by CALBRIDGE_BENCH_PROBE,
// so the memory figure is the daemon's own and not the simulators'.
//
// The peak is VmHWM from /proc/self/status, not process.resourceUsage().maxRSS: on Linux, getrusage's maxrss of a
// forked-then-exec'd child starts at the parent's RSS at fork time, so a child of a big benchmark process would
// report the benchmark's memory instead of its own.
import { readFileSync, writeFileSync } from "node:fs";

const out = process.env["CALBRIDGE_BENCH_PROBE"];
const started = performance.now();
let peakRss = 0;
let peakHeapUsed = 0;
let peakExternal = 0;
const sample = () => {
  const m = process.memoryUsage();
  peakRss = Math.max(peakRss, m.rss);
  peakHeapUsed = Math.max(peakHeapUsed, m.heapUsed);
  peakExternal = Math.max(peakExternal, m.external);
};

/** The kernel's high-water mark of this process image's resident set, in kB (Linux); undefined elsewhere. */
function vmHwmKb() {
  try {
    const m = /^VmHWM:\s+(\d+)\s+kB/m.exec(readFileSync("/proc/self/status", "utf8"));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

if (out) {
  setInterval(sample, 100).unref();
  process.on("exit", (code) => {
    sample();
    const u = process.resourceUsage();
    const hwm = vmHwmKb();
    writeFileSync(
      out,
      JSON.stringify({
        exitCode: code,
        maxRssKb: hwm ?? Math.round(peakRss / 1024),
        maxRssSource: hwm === undefined ? "sampled every 100 ms" : "VmHWM",
        sampledPeakRssKb: Math.round(peakRss / 1024),
        peakHeapUsedKb: Math.round(peakHeapUsed / 1024),
        peakExternalKb: Math.round(peakExternal / 1024),
        userCpuMs: Math.round(u.userCPUTime / 1000),
        systemCpuMs: Math.round(u.systemCPUTime / 1000),
        wallMs: Math.round(performance.now() - started),
      }),
    );
  });
}
