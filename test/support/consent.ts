// Test support: a person on the emulator's consent page, over real HTTP: opens the page, ticks scopes, presses Allow
// or Deny, and answers where Google sends the browser next (the app's redirect URI with code or error).
import { request } from "undici";

export interface ConsentChoice {
  action?: "allow" | "deny";
  /** The scopes to tick (default: every checkbox; [] presses Allow with nothing ticked). */
  tick?: "all" | string[];
}

const attr = (html: string, pattern: RegExp) => html.match(pattern)?.[1]?.replace(/&amp;/g, "&");

/** Answers the consent page at `url`; resolves with the redirect's Location. Throws with Google's error page. */
export async function answerConsent(url: string, choice: ConsentChoice = {}): Promise<string> {
  const page = await request(url);
  const html = await page.body.text();
  if (page.statusCode !== 200) throw new Error(`consent page answered ${page.statusCode}: ${html}`);
  const action = attr(html, /<form method="post" action="([^"]+)"/);
  const id = attr(html, /name="request" value="([^"]+)"/);
  if (!action || !id) throw new Error("no consent form on the page");
  const boxes = [...html.matchAll(/type="checkbox" name="scope" value="([^"]+)"/g)].map((m) => m[1]!);
  const form = new URLSearchParams({ request: id, action: choice.action ?? "allow" });
  for (const scope of choice.tick === undefined || choice.tick === "all" ? boxes : choice.tick) {
    form.append("scope", scope);
  }
  const res = await request(new URL(action, url), {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: form.toString(),
  });
  await res.body.dump();
  const location = res.headers.location;
  if (res.statusCode !== 302 || typeof location !== "string") {
    throw new Error(`consent decision answered ${res.statusCode} without a redirect`);
  }
  return location;
}
