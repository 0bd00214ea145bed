// Tests which lines of an event's description an edit notice takes for the therapist's (edit-notice-own-lines.test.ts
// tests it end to end): those neither in calbridge's last write, by the link's keyed digests of its lines, nor in the
// rendering now; a link of an earlier build, without digests, only when the text it stands for did not change.
import { describe, expect, it } from "vitest";
import type { RenderedEvent } from "../../src/calendar/render.ts";
import { addedText, lineDigests } from "../../src/sync/edit-notice.ts";
import type { Link } from "../../src/sync/types.ts";

describe("addedText", () => {
  const wanted = { description: "Booking apt_1\nNotes: new" } as RenderedEvent;
  const current = { description: "Booking apt_1\nNotes: HIV positive\nmy own note" };
  const link = { appointmentId: "apt_1" } as Link;

  it("quotes only lines that are neither calbridge's last write (its digests) nor its rendering now", () => {
    const written = { ...link, lines: lineDigests("apt_1", "Booking apt_1\nNotes: HIV positive") };
    expect(JSON.stringify(written.lines)).not.toContain("HIV");
    expect(addedText(current, written, wanted, false, false)).toBe("my own note");
    expect(addedText({ description: "Booking apt_1\nNotes: HIV positive" }, written, wanted, false, false)).toBe(
      undefined,
    );
  });

  it("a link of an earlier build (no digests) quotes only when the text it stands for did not change", () => {
    expect(addedText(current, link, wanted, false, false)).toBe(undefined);
    const same = { description: "Booking apt_1\nNotes: new\nmy own note" };
    expect(addedText(same, link, wanted, true, false)).toBe("my own note");
  });
});
