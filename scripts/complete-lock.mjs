// Adds to package-lock.json the platform packages of @biomejs/biome that this workplace's registry does not serve
// (npm drops optional dependencies it cannot resolve, and `npm ci` then refuses the lock as out of sync).
// They are optional and bound to other platforms, so npm ci skips them here and fetches them where they exist.
// Run after any `npm install` that rewrites the lock: node scripts/complete-lock.mjs
import { readFileSync, writeFileSync } from "node:fs";

const path = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(path, "utf8"));
const biome = lock.packages["node_modules/@biomejs/biome"];
const platforms = {
  "cli-android-arm64": { os: ["android"], cpu: ["arm64"] },
  "cli-android-x64": { os: ["android"], cpu: ["x64"] },
  "cli-darwin-arm64": { os: ["darwin"], cpu: ["arm64"] },
  "cli-darwin-x64": { os: ["darwin"], cpu: ["x64"] },
  "cli-linux-arm64": { os: ["linux"], cpu: ["arm64"], libc: ["glibc"] },
  "cli-linux-arm64-musl": { os: ["linux"], cpu: ["arm64"], libc: ["musl"] },
  "cli-linux-x64": { os: ["linux"], cpu: ["x64"], libc: ["glibc"] },
  "cli-linux-x64-musl": { os: ["linux"], cpu: ["x64"], libc: ["musl"] },
  "cli-win32-arm64": { os: ["win32"], cpu: ["arm64"] },
  "cli-win32-x64": { os: ["win32"], cpu: ["x64"] },
};
let added = 0;
for (const [name, version] of Object.entries(biome?.optionalDependencies ?? {})) {
  const key = `node_modules/${name}`;
  const short = name.replace("@biomejs/", "");
  if (lock.packages[key] || !platforms[short]) continue;
  lock.packages[key] = {
    version,
    dev: true,
    license: "MIT OR Apache-2.0",
    optional: true,
    ...platforms[short],
    engines: { node: ">=14.21.3" },
  };
  added++;
}
const sorted = Object.fromEntries(
  Object.entries(lock.packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))),
);
lock.packages = sorted;
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`package-lock.json: ${added} platform entries added`);
