// Owns the privacy presets of `event.preset`: for each, the title and description templates it stands for and what
// a therapist (and anyone who can see the event's details) is shown.

export const PRESET_NAMES = ["full", "first_name", "initials", "booking_only"] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

export interface Preset {
  title: string;
  description: string;
  /** What the event shows (README). */
  shows: string;
}

export const PRESETS: Record<PresetName, Preset> = {
  full: {
    title: "{service_name}: {customer_name}",
    description: "Booking {id}\n{notes}",
    shows: "the service and the customer's full name; the booking id and the notes",
  },
  first_name: {
    title: "{service_name}: {customer_first_name}",
    description: "Booking {id}\n{notes}",
    shows: "the service and the customer's first name; the booking id and the notes",
  },
  initials: {
    title: "{service_name}: {customer_initials}",
    description: "Booking {id}",
    shows: "the service and the customer's initials; the booking id (no notes)",
  },
  booking_only: {
    title: "{service_name}",
    description: "Booking {id}",
    shows: "the service and the booking id: no customer details at all",
  },
};

/** The templates in force: the ones set, else the preset's (`full` when neither is set). */
export function templatesOf(event: {
  preset?: PresetName | undefined;
  title?: string | undefined;
  description?: string | undefined;
}): {
  title: string;
  description: string;
} {
  const preset = PRESETS[event.preset ?? "full"];
  return { title: event.title ?? preset.title, description: event.description ?? preset.description };
}
