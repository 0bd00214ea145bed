// A proxy in front of the Calendar emulator's API root that can replace the next answers to matching requests with
// garbage (HTML, truncated JSON, wrong shapes), after the emulator has carried the request out: the Calendar side of
// "malformed API responses", which the emulator itself cannot produce.
import { createServer, request as httpRequest, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

interface Rule {
  remaining: number;
  match: RegExp;
  status: number;
  body: string;
  contentType: string;
}

export interface GarbleProxy {
  /** Pass as google.api_root. */
  readonly url: string;
  /** The next `n` requests whose "METHOD /path?query" matches get `body` (status 200 unless given) instead. */
  garbleNext(n: number, match: RegExp, body: string, options?: { status?: number; contentType?: string }): void;
  /** Answers replaced so far, as "METHOD /path". */
  readonly garbled: string[];
  readonly pending: number;
  close(): Promise<void>;
}

const readAll = async (stream: IncomingMessage): Promise<Buffer> => {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
};

export async function startGarbleProxy(target: string): Promise<GarbleProxy> {
  const upstream = new URL(target);
  const rules: Rule[] = [];
  const garbled: string[] = [];
  const server: Server = createServer(async (req, res) => {
    try {
      const body = await readAll(req);
      const key = `${req.method} ${req.url}`;
      const answer = await new Promise<{ status: number; headers: IncomingMessage["headers"]; body: Buffer }>(
        (resolve, reject) => {
          const out = httpRequest(
            {
              host: upstream.hostname,
              port: upstream.port,
              method: req.method,
              path: req.url,
              headers: { ...req.headers, host: upstream.host },
            },
            (r) => {
              readAll(r).then((b) => resolve({ status: r.statusCode ?? 502, headers: r.headers, body: b }), reject);
            },
          );
          out.on("error", reject);
          out.end(body);
        },
      );
      const i = rules.findIndex((r) => r.remaining > 0 && r.match.test(key));
      if (i >= 0) {
        const rule = rules[i]!;
        rule.remaining--;
        if (rule.remaining === 0) rules.splice(i, 1);
        garbled.push(`${req.method} ${req.url?.split("?")[0]}`);
        res.writeHead(rule.status, { "content-type": rule.contentType });
        res.end(rule.body);
        return;
      }
      const headers = { ...answer.headers };
      delete headers["transfer-encoding"];
      delete headers.connection;
      res.writeHead(answer.status, { ...headers, "content-length": String(answer.body.length) });
      res.end(answer.body);
    } catch (err) {
      res.socket?.destroy(err as Error);
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/`,
    garbled,
    get pending() {
      return rules.reduce((n, r) => n + r.remaining, 0);
    },
    garbleNext(n, match, body, options = {}) {
      rules.push({
        remaining: n,
        match,
        body,
        status: options.status ?? 200,
        contentType: options.contentType ?? "application/json; charset=UTF-8",
      });
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
