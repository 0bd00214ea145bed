// Test support for notifications: a real SMTP server (smtp-server) and an HTTP receiver standing in for a chat's
// incoming webhook, both on 127.0.0.1, collecting what calbridge delivers to them.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { SMTPServer } from "smtp-server";

export interface ReceivedMail {
  from: string;
  to: string[];
  subject: string;
  /** The text body, decoded (quoted-printable) to one string. */
  text: string;
  raw: string;
}

export interface MailSink {
  port: number;
  mails: ReceivedMail[];
  /** Logins the server accepted (user names). */
  logins: string[];
  /**
   * The next `n` messages are refused with `code` (451 by default: a temporary failure), in answer to the message
   * itself (DATA) or to its sender (MAIL FROM).
   */
  refuseNext(n: number, code?: number, at?: "DATA" | "MAIL FROM"): void;
  /** While true, every login is refused with 535 (the server's auth backend down, a password being changed). */
  loginDown: boolean;
  /** Addresses refused for good at RCPT TO (550 5.1.1, no such mailbox). */
  unknown: Set<string>;
  /** Addresses refused for a moment at RCPT TO (451 4.7.1, greylisted), while they are in it. */
  deferred: Set<string>;
  close(): Promise<void>;
}

export const SMTP_USER = "calbridge";
export const SMTP_PASS = "smtp-pass-0123456789";

/** Headers unfolded; the body's quoted-printable soft breaks and =XX escapes decoded (all nodemailer writes here). */
function parseMail(raw: string): { subject: string; text: string } {
  const split = raw.indexOf("\r\n\r\n");
  const head = raw.slice(0, split).replace(/\r\n[ \t]+/g, " ");
  const body = raw.slice(split + 4);
  const header = (name: string) => new RegExp(`^${name}: (.*)$`, "im").exec(head)?.[1] ?? "";
  const qp = /quoted-printable/i.test(header("Content-Transfer-Encoding"));
  const text = qp
    ? Buffer.from(
        body
          .replace(/=\r\n/g, "")
          .replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16))),
        "latin1",
      ).toString("utf8")
    : body;
  return { subject: header("Subject"), text: text.replace(/\r\n/g, "\n") };
}

export async function startMailSink(): Promise<MailSink> {
  const mails: ReceivedMail[] = [];
  const logins: string[] = [];
  let refuse = 0;
  let refuseCode = 451;
  let refuseAt: "DATA" | "MAIL FROM" = "DATA";
  const refusal = () => {
    refuse--;
    const err = new Error(refuseCode < 500 ? "Try again later" : "5.7.1 Message refused") as Error & {
      responseCode: number;
    };
    err.responseCode = refuseCode;
    return err;
  };
  const unknown = new Set<string>();
  const deferred = new Set<string>();
  const sink: MailSink = {
    port: 0,
    mails,
    logins,
    refuseNext(n, code = 451, at = "DATA") {
      refuse = n;
      refuseCode = code;
      refuseAt = at;
    },
    loginDown: false,
    unknown,
    deferred,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server = new SMTPServer({
    onMailFrom(_address, _session, cb) {
      if (refuse > 0 && refuseAt === "MAIL FROM") return cb(refusal());
      cb();
    },
    onRcptTo(address, _session, cb) {
      if (deferred.has(address.address)) {
        const err = new Error("4.7.1 Greylisted, please try again later") as Error & { responseCode: number };
        err.responseCode = 451;
        return cb(err);
      }
      if (!unknown.has(address.address)) return cb();
      const err = new Error("5.1.1 mailbox unavailable") as Error & { responseCode: number };
      err.responseCode = 550;
      cb(err);
    },
    disabledCommands: ["STARTTLS"],
    allowInsecureAuth: true,
    authOptional: false,
    logger: false,
    onAuth(auth, _session, cb) {
      if (sink.loginDown) {
        const err = new Error("5.7.8 Authentication credentials invalid") as Error & { responseCode: number };
        err.responseCode = 535;
        return cb(err);
      }
      if (auth.username === SMTP_USER && auth.password === SMTP_PASS) {
        logins.push(auth.username);
        cb(null, { user: auth.username });
      } else cb(new Error("Invalid username or password"));
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        if (refuse > 0 && refuseAt === "DATA") return cb(refusal());
        const raw = Buffer.concat(chunks).toString("utf8");
        mails.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : "",
          to: session.envelope.rcptTo.map((r) => r.address),
          ...parseMail(raw),
          raw,
        });
        cb();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  sink.port = (server.server.address() as AddressInfo).port;
  return sink;
}

export interface Posted {
  path: string;
  contentType: string;
  body: Record<string, unknown>;
  raw: string;
}

export interface HookSink {
  url: string;
  posts: Posted[];
  /** The next `n` requests are answered with `status` (default 500). */
  failNext(n: number, status?: number): void;
  /** Requests answered with an error so far. */
  failures: number;
  close(): Promise<void>;
}

export async function startHookSink(path = "/hooks/T000/B000/secret-token-0123456789"): Promise<HookSink> {
  const posts: Posted[] = [];
  let fail = 0;
  let failStatus = 500;
  const sink: HookSink = {
    url: "",
    posts,
    failures: 0,
    failNext(n, status = 500) {
      fail = n;
      failStatus = status;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (fail > 0) {
        fail--;
        sink.failures++;
        res.writeHead(failStatus, { "content-type": "text/plain" }).end("invalid_payload");
        return;
      }
      const raw = Buffer.concat(chunks).toString("utf8");
      posts.push({
        path: req.url ?? "",
        contentType: String(req.headers["content-type"] ?? ""),
        body: JSON.parse(raw) as Record<string, unknown>,
        raw,
      });
      res.writeHead(200, { "content-type": "text/plain" }).end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  sink.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`;
  return sink;
}
