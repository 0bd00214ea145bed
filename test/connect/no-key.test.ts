// connect configured without store.encryption_key (the configuration accepts it): the connect page can keep no token
// and refuses every link ("Connecting is not set up yet"). So no link is handed out: `calbridge invite` exits 2 naming
// the key, and the daemon's notices carry no reconnect link but say to set the key first, as doctor's hint does.
import { afterEach, expect, it } from "vitest";
import { runDoctor } from "../../src/cli/doctor.ts";
import { runCli } from "../cli/support.ts";
import { type HookSink, startHookSink } from "../notify/support.ts";
import { type ConnectWorld, startConnectWorld } from "./support.ts";

let cw: ConnectWorld | undefined;
let hook: HookSink | undefined;
afterEach(async () => {
  await cw?.close();
  await hook?.close();
  cw = undefined;
  hook = undefined;
});

it("without store.encryption_key no connect link is handed out: invite exits 2, notices say to set the key", async () => {
  hook = await startHookSink();
  const sink = hook;
  cw = await startConnectWorld({
    configure: (c) => {
      delete (c.store as { encryption_key?: string }).encryption_key;
      c.notify = { label: "clinic-test", targets: [{ type: "webhook", name: "chat", url: sink.url }] };
    },
  });
  const res = await runCli("--config", cw.file, "invite", "--therapist", "th_ben");
  expect(res.code).toBe(2);
  expect(res.stdout).toBe("");
  expect(res.stderr).toContain("store.encryption_key is not set");

  // th_ben (OAuth) has never connected: the notice tells the admin what to do, with no link that could only fail.
  await cw.app.notifier.check();
  expect(sink.posts).toHaveLength(1);
  const text = String(sink.posts[0]!.body.text);
  expect(text).toContain("No refresh token is stored for them");
  expect(text).not.toContain("/connect?invite=");
  expect(text).toContain("Set store.encryption_key first");
  expect(text).toContain("`calbridge invite --therapist th_ben`");

  // So does doctor's hint for the calendar.
  const check = (await runDoctor(cw.app)).find((c) => c.name === "calendar of th_ben");
  expect(check?.fix).toMatch(
    /^the therapist has not connected their calendar yet: set store\.encryption_key .*, then run `calbridge invite --therapist th_ben`/,
  );
});
