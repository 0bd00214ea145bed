// Checks the npm package's entry points against what the build makes: `npm pack` (and an install from a git URL, which
// packs) must build dist/ first, or the package ships without its `calbridge` command; and every file package.json
// names as an entry must be one `npm run build` produces from src/ (tsconfig.build.json: src/X.ts -> dist/X.js).
// Packing itself is not run here (it compiles the whole tree, half a minute); the scripts and paths it relies on are.
import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const pkg = JSON.parse(readFileSync("package.json", "utf8")) as {
  main?: string;
  exports?: unknown;
  bin: Record<string, string>;
  files: string[];
  scripts: Record<string, string>;
};
const build = JSON.parse(readFileSync("tsconfig.build.json", "utf8")) as {
  compilerOptions: { outDir: string; rootDir: string };
};

/** The source `npm run build` compiles into `built` (dist/X.js from src/X.ts); undefined outside outDir. */
function sourceOf(built: string): string | undefined {
  const { outDir, rootDir } = build.compilerOptions;
  const path = built.replace(/^\.\//, "");
  if (!path.startsWith(`${outDir}/`) || !path.endsWith(".js")) return undefined;
  return `${rootDir}/${path.slice(outDir.length + 1, -".js".length)}.ts`;
}

describe("the npm package", () => {
  it("builds dist/ before it is packed, and ships it", () => {
    expect(pkg.scripts.build).toContain("tsconfig.build.json");
    expect(pkg.scripts.prepack).toBe("npm run build");
    expect(pkg.files).toContain(build.compilerOptions.outDir);
  });

  it("names as entry points only files the build produces", () => {
    const entries = [...Object.values(pkg.bin), ...(pkg.main !== undefined ? [pkg.main] : [])];
    expect(pkg.exports, "no library entry: calbridge is a command").toBeUndefined();
    for (const entry of entries) {
      const source = sourceOf(entry);
      expect(source, `${entry} is not under ${build.compilerOptions.outDir}/`).toBeDefined();
      expect(existsSync(source!), `${entry} has no source ${source}`).toBe(true);
    }
  });
});
