// Tests deterministic event ids: stable, valid base32hex, distinct per appointment; and which event under such an id
// is a guest's copy of an invitation.
import { describe, expect, it } from "vitest";
import { base32hex, eventIdFor, isInvitation, isValidEventId, namesNoOther } from "../../src/calendar/ids.ts";

describe("eventIdFor", () => {
  it("is deterministic and valid base32hex", () => {
    const id = eventIdFor("apt_123");
    expect(id).toBe(eventIdFor("apt_123"));
    expect(id).toMatch(/^cb[a-v0-9]{52}$/);
    expect(isValidEventId(id)).toBe(true);
  });

  it("is the id earlier versions wrote (events already in calendars are found by it)", () => {
    // Values of the first implementation (createHash per id); any change to how ids are computed must keep them.
    expect(eventIdFor("apt_1")).toBe("cboj1p7sos8ujaimcpe23b2gg10b0betp8u2tib44ekvgemk9gbuig");
    expect(eventIdFor("apt_1", 2)).toBe("cb0lf7n1jnp8erf0u2oktjqm4i4vde2tj739hgetbgjc4c18fv6q3g");
  });

  it("differs per appointment and per generation", () => {
    const ids = new Set(["apt_1", "apt_2", "APT_1", "apt_1 "].map((a) => eventIdFor(a)));
    ids.add(eventIdFor("apt_1", 1));
    expect(ids.size).toBe(5);
  });

  it("handles any appointment id, unicode and empty included", () => {
    for (const a of ["", "ü/ä?#&", "x".repeat(5000)]) expect(isValidEventId(eventIdFor(a))).toBe(true);
  });
});

describe("isValidEventId", () => {
  it("follows Google's rule: a-v and 0-9, 5 to 1024 long", () => {
    expect(isValidEventId("abcd")).toBe(false);
    expect(isValidEventId("abcde")).toBe(true);
    expect(isValidEventId("abcdw")).toBe(false);
    expect(isValidEventId("ABCDE")).toBe(false);
    expect(isValidEventId("a".repeat(1024))).toBe(true);
    expect(isValidEventId("a".repeat(1025))).toBe(false);
  });
});

describe("base32hex", () => {
  it("matches RFC 4648 test vectors (lower case, no padding)", () => {
    const enc = (s: string) => base32hex(Buffer.from(s));
    expect(enc("")).toBe("");
    expect(enc("f")).toBe("co");
    expect(enc("fo")).toBe("cpng");
    expect(enc("foo")).toBe("cpnmu");
    expect(enc("foob")).toBe("cpnmuog");
    expect(enc("fooba")).toBe("cpnmuoj1");
    expect(enc("foobar")).toBe("cpnmuoj1e8");
  });
});

describe("isInvitation", () => {
  const guestCopy = { organizer: { email: "anna@clinic.example" } };
  it("is an event whose organizer is another calendar (organizer.self not set)", () => {
    expect(isInvitation(guestCopy)).toBe(true);
    expect(isInvitation({ organizer: { email: "anna@clinic.example", self: false } })).toBe(true);
    expect(namesNoOther(guestCopy, "apt_1")).toBe(false);
  });
  it("is not an event of this calendar, nor one that does not say, nor one carrying calbridge's private mark", () => {
    expect(isInvitation({ organizer: { email: "ben@clinic.example", self: true } })).toBe(false);
    expect(isInvitation({})).toBe(false); // a deleted event: only its id
    expect(isInvitation({ organizer: null })).toBe(false);
    const marked = { ...guestCopy, extendedProperties: { private: { calbridge_appointment_id: "apt_1" } } };
    expect(isInvitation(marked)).toBe(false);
    expect(namesNoOther(marked, "apt_1")).toBe(true);
    // Where the calendar's id is known, an organizer that is that calendar settles it.
    expect(isInvitation(guestCopy, "Anna@Clinic.example")).toBe(false);
    expect(isInvitation(guestCopy, "ben@clinic.example")).toBe(true);
  });
});
