// The "Bring your story" page: files dropped on the zone join those chosen, and the preview is asked for again.
(function () {
  "use strict";
  const zone = document.querySelector("[data-drop-zone]");
  const input = document.querySelector("[data-bring-files]");
  const chosen = document.querySelector("[data-chosen]");
  if (!zone || !input) return;

  function show() {
    const names = Array.from(input.files).map((file) => file.name);
    chosen.textContent = names.length ? names.join(", ") : "";
  }

  ["dragenter", "dragover"].forEach((kind) => zone.addEventListener(kind, (event) => {
    event.preventDefault();
    zone.classList.add("drop-over");
  }));
  ["dragleave", "drop"].forEach((kind) => zone.addEventListener(kind, () => zone.classList.remove("drop-over")));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    const all = new DataTransfer();
    Array.from(input.files).forEach((file) => all.items.add(file));
    Array.from(event.dataTransfer.files).forEach((file) => all.items.add(file));
    input.files = all.files;
    show();
    input.dispatchEvent(new Event("change", { bubbles: true }));
  });
  input.addEventListener("change", show);

  // A title is asked for only when the files make a new campaign.
  const into = document.querySelector("[data-bring-into]");
  const title = document.querySelector("[data-new-title]");
  if (into && title) into.addEventListener("change", () => { title.hidden = Boolean(into.value); });

  // A refusal (400, or 503 while imports queue) is an answer in words for the preview: show it there.
  document.addEventListener("htmx:beforeSwap", (event) => {
    if (event.detail.target && event.detail.target.id === "bring-preview" && [400, 503].includes(event.detail.xhr.status)) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });
})();
