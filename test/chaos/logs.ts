// Every log line the suite makes the daemon write, in one place: in-process apps log through a captured logger at
// level debug, child daemons and CLI runs are collected from their stdout and stderr (LOG_LEVEL=debug). The last
// test of the suite searches all of it for secrets.
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { WORLD_WEBHOOK_SECRET, type World } from "../../src/simulator/world.ts";
import { type CapturedLog, captureLog } from "../support/log-capture.ts";

interface Source {
  name: string;
  lines: () => readonly string[];
}

const sources: Source[] = [];

/** A debug-level logger for an in-process app, whose lines join the collection. */
export function capturedLogger(name: string): CapturedLog {
  const captured = captureLog("debug");
  sources.push({ name, lines: () => captured.raw });
  return captured;
}

/** Collects a child process's stdout and stderr; returns the live list of its lines (both streams). */
export function collectChild(name: string, child: ChildProcess): string[] {
  const lines: string[] = [];
  for (const stream of [child.stdout, child.stderr]) {
    let rest = "";
    stream?.setEncoding("utf8");
    stream?.on("data", (chunk: string) => {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop() ?? "";
      for (const p of parts) if (p) lines.push(p);
    });
    stream?.on("end", () => {
      if (rest) lines.push(rest);
      rest = "";
    });
  }
  sources.push({ name, lines: () => lines });
  return lines;
}

/** Output of a finished command (e.g. a CLI run's stderr). */
export function collectText(name: string, text: string): void {
  const lines = text.split("\n").filter((l) => l !== "");
  sources.push({ name, lines: () => lines });
}

export function allLines(): { source: string; line: string }[] {
  return sources.flatMap((s) => s.lines().map((line) => ({ source: s.name, line })));
}

/** Values the suite knows to be secret (API keys, webhook secrets, private keys, client secrets, refresh tokens). */
export const knownSecrets = new Map<string, string>();

export function secret(label: string, value: string | undefined): void {
  if (value) knownSecrets.set(value, label);
}

/** Records a world's secrets: the booking API key, the webhook signing secret, the service account's private key. */
export function recordWorldSecrets(world: World): void {
  secret("booking api key", world.booking.apiKey);
  secret("webhook signing secret", WORLD_WEBHOOK_SECRET);
  const key = JSON.parse(readFileSync(join(world.dir, "sa.json"), "utf8")) as { private_key: string };
  secret("service account private key", key.private_key);
}
