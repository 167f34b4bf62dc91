// The viewer's only script: times in the reader's own zone, and live pages kept current.
// Loaded from the server itself (the page's policy allows no inline script).
"use strict";

function localTimes(root) {
  for (const el of root.querySelectorAll("time[datetime]")) {
    const when = new Date(el.getAttribute("datetime"));
    if (isNaN(when)) continue;
    if (!el.title) el.title = el.textContent;
    el.textContent = when.toLocaleString(undefined, {
      dateStyle: "medium", timeStyle: "long",
    });
  }
}

function follow(main) {
  const url = main.dataset.live;
  if (!url || !window.EventSource) return;
  const events = new EventSource(url);
  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const response = await fetch(window.location.href, { cache: "no-store" });
      if (!response.ok) { events.close(); return; }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("main");
      if (!fresh) return;
      // Keep what the reader opened open.
      const open = new Set([...main.querySelectorAll("details[open][id]")].map((d) => d.id));
      main.innerHTML = fresh.innerHTML;
      for (const id of open) {
        const el = document.getElementById(id);
        if (el) el.open = true;
      }
      localTimes(main);
    } finally {
      busy = false;
    }
  }
  events.addEventListener("changed", refresh);
  events.addEventListener("finished", () => { events.close(); refresh(); });
  events.onerror = () => { if (events.readyState === EventSource.CLOSED) events.close(); };
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  const main = document.getElementById("main");
  if (main) follow(main);
});
