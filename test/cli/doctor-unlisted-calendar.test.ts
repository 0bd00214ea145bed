// Tests `calbridge doctor` on a mapped calendar that is not on the account's calendar list, so its access role
// cannot be read. It passed ("write access unverified", status ok, exit 0) while the account could only see the
// calendar and every insert of a real run was refused. It is a warning now, with what to do; a calendar on the list
// with writer access still passes.
import { afterEach, expect, it } from "vitest";
import { startWorld, type World } from "../../src/simulator/world.ts";
import { runCli, writeConfig } from "./support.ts";

const worlds: World[] = [];
afterEach(async () => {
  for (const w of worlds.splice(0)) await w.close();
});

type Doctor = { checks: { name: string; status: string; detail: string; fix?: string }[] };

it("a calendar whose access role cannot be read is a warning with the fix, not a pass", async () => {
  const w = await startWorld({ therapists: ["th_anna"] });
  worlds.push(w);
  // The clinic's room calendar, owned by someone else, shared with Anna's account (read only), not on her list.
  w.google.createCalendar("room-1@clinic.test", "owner@clinic.test", { timeZone: "Europe/Berlin" });
  w.google.shareCalendar("room-1@clinic.test", w.calendarOf("th_anna"), "reader");
  w.google.removeFromCalendarList("room-1@clinic.test", w.calendarOf("th_anna"));
  const file = writeConfig(w, (c) => {
    c.therapists[0]!.calendar_id = "room-1@clinic.test";
  });
  const doctor = await runCli("doctor", "--json", "--config", file);
  const cal = (JSON.parse(doctor.stdout) as Doctor).checks.find((c) => c.name === "calendar of th_anna");
  expect(cal).toMatchObject({
    status: "warn",
    detail: expect.stringContaining("not in the account's calendar list, write access unverified"),
    fix: expect.stringContaining("add room-1@clinic.test to the account's calendar list"),
  });

  // A calendar on the account's list with "Make changes to events" passes.
  w.google.createCalendar("room-2@clinic.test", "owner@clinic.test", { timeZone: "Europe/Berlin" });
  w.google.shareCalendar("room-2@clinic.test", w.calendarOf("th_anna"), "writer");
  const listedFile = writeConfig(
    w,
    (c) => {
      c.therapists[0]!.calendar_id = "room-2@clinic.test";
    },
    "listed.yaml",
  );
  const again = await runCli("doctor", "--json", "--config", listedFile);
  const listed = (JSON.parse(again.stdout) as Doctor).checks.find((c) => c.name === "calendar of th_anna");
  expect(listed).toMatchObject({ status: "ok", detail: expect.stringContaining("access writer") });
});
