// convmem's browser pages: the only script, loaded from this server (the CSP allows no other).
// It only changes how times are shown (local time instead of UTC) and lets "/" focus the search
// box; every page works without it. It never reads stored text into HTML.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const el of document.querySelectorAll("time[datetime]")) {
    const at = new Date(el.getAttribute("datetime"));
    if (!Number.isNaN(at.getTime())) {
      el.title = el.textContent;
      el.textContent = at.toLocaleString();
    }
  }
  document.addEventListener("keydown", (event) => {
    const typing = event.target.closest && event.target.closest("input, textarea, select");
    if (event.key === "/" && !typing) {
      const box = document.getElementById("q") || document.getElementById("quick-q");
      if (box) {
        event.preventDefault();
        box.focus();
      }
    }
  });
});
