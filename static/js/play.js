// The play page's small amount of behaviour; htmx and its ws extension do the rest.
(function () {
  "use strict";

  var play = document.getElementById("play");
  if (!play) return;

  // Name this tab, so that a change it makes itself (undo, redo…) is not
  // redrawn a second time when the app tells every open tab about it.
  // Deferred scripts run before htmx connects the websocket, so the name is
  // in place for the first connection.
  var tab = (window.crypto && crypto.randomUUID) ? crypto.randomUUID() : String(Math.random()).slice(2);
  if (play.getAttribute("ws-connect")) {
    play.setAttribute("ws-connect", play.getAttribute("ws-connect") + "?tab=" + encodeURIComponent(tab));
  }
  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-Storyteller-Tab"] = tab;
  });

  function byId(id) { return document.getElementById(id); }

  // Reconnect within a few seconds once the app is back (the extension's own backoff grows to a minute).
  htmx.config.wsReconnectDelay = function (retries) {
    return Math.min(500 * Math.pow(2, retries), 4000) * (0.5 + Math.random() / 2);
  };

  function status(text) {
    var el = byId("connection");
    if (el) el.textContent = text;
  }

  // Until the socket is open a Send is refused (the text is kept); #play[data-connected] says which it is.
  var connected = false;
  function connection(open) {
    connected = open;
    play.dataset.connected = open ? "true" : "false";
  }
  connection(false);
  var opened = false;  // the socket has been open before: an open now is a reconnection
  document.addEventListener("htmx:wsOpen", function () {
    connection(true);
    status("");
    if (opened) {
      // Whatever happened while the socket was down (the app restarted mid-turn, another tab moved the story),
      // the story is read again, and an action that did not make it into the story is given back.
      htmx.ajax("GET", window.location.pathname, { target: "#play-body", swap: "outerHTML" }).then(recover, recover);
    } else {
      recover();
    }
    opened = true;
  });
  document.addEventListener("htmx:wsClose", function (event) {
    connection(false);
    // 4403: the app closed this page's socket because its seat at the table was paused, moved or removed
    // (issue 30); the extension does not reconnect after it.
    var closed = event.detail && event.detail.event;
    if (closed && closed.code === 4403) {
      status("The table's owner paused, moved or removed your seat, so this page has stopped. Reload it to see " +
             "where you stand.");
      return;
    }
    status("Connection to the app lost; reconnecting… Nothing you typed is lost.");
  });
  document.addEventListener("htmx:wsError", function () {
    status("The app is not answering. Is it still running?");
  });

  // Keep the end of the story and the action box in view while the person
  // is there: #dock-end marks where the box ends in the page (on wide
  // screens the box itself also stays in view). Whatever grows the story
  // column (a reply streaming in, the line under the box) scrolls with it,
  // unless the person has scrolled up to read.
  function belowTheWindow() {
    var end = byId("dock-end");
    return end ? end.getBoundingClientRect().top - window.innerHeight : 0;
  }
  var following = true;
  var scrolling = false;  // the next scroll event is ours: the story may have grown again before it arrives
  function revealDock() {
    var below = belowTheWindow();
    if (below > 0) {
      scrolling = true;
      // Whole pixels: the window scrolls by whole ones, and a fraction left over hid the box's last line.
      window.scrollBy(0, Math.ceil(below));
    }
    following = true;
  }
  window.addEventListener("scroll", function () {
    if (scrolling) {
      scrolling = false;
      return;
    }
    following = belowTheWindow() <= 4;
  }, { passive: true });
  var column = play.querySelector(".story-column");
  if (column && window.ResizeObserver) {
    new ResizeObserver(function () { if (following) revealDock(); }).observe(column);
  }
  revealDock();

  // --- What the person types is theirs -------------------------------------
  // The box is cleared when an action is sent (it shows in the story) and put
  // back if the turn does not commit; nothing else ever touches it, so text
  // typed while a reply streams is kept. Text over a limit is refused, never
  // cut, and a count shows as it nears the limit.

  var COUNT_FROM = 0.8;  // show the count from 80% of the limit
  var sent = null;  // {text, direction} of the action in flight

  function length(text) {
    var count = 0;
    for (var ignored of text) count++;  // code points, as the server counts
    return count;
  }

  function problemWith(field) {
    var text = field.value.trim();
    var limit = +field.dataset.limit;
    if (typeof text.isWellFormed === "function" && !text.isWellFormed()) {
      return field.dataset.name + " holds a broken character (half of a surrogate pair, often left by copying " +
        "part of an emoji), so it is not valid Unicode text. Delete or retype it and send again; nothing was sent.";
    }
    var count = length(text);
    if (limit && count > limit) {
      return field.dataset.name + " is " + count.toLocaleString("en") + " characters long; the limit is " +
        limit.toLocaleString("en") + ". Shorten it by " + (count - limit).toLocaleString("en") +
        " and send again; nothing was sent.";
    }
    return "";
  }

  function showCount() {
    var field = byId("action-text");
    var out = byId("action-count");
    if (!field || !out) return;
    var count = length(field.value.trim());
    var limit = +field.dataset.limit;
    out.classList.toggle("over", count > limit);
    if (count < limit * COUNT_FROM) {
      out.textContent = "";
    } else if (count > limit) {
      out.textContent = count.toLocaleString("en") + " / " + limit.toLocaleString("en") + " characters: " +
        (count - limit).toLocaleString("en") + " over the limit";
    } else {
      out.textContent = count.toLocaleString("en") + " / " + limit.toLocaleString("en") + " characters";
    }
  }
  document.addEventListener("input", function (event) {
    if (event.target.id === "action-text") showCount();
  });

  function refuse(message) {
    var error = byId("turn-error");
    if (error) error.textContent = message;
  }

  function busy() {
    var button = byId("send-button");
    return !button || button.disabled;
  }

  document.addEventListener("htmx:wsConfigSend", function (event) {
    var form = event.target;
    if (form.id !== "action-form") return;
    var text = byId("action-text");
    var direction = byId("action-direction");
    var problem = busy() ? "A reply is still being written. Wait for it, or press Stop."
      : !connected ? "Not connected to the app, so nothing was sent; your text is kept. Send again once it reconnects."
      : problemWith(text) || problemWith(direction);
    if (problem) {
      event.preventDefault();
      refuse(problem);
      return;
    }
    var mode = form.querySelector("[name=mode]:checked").value;
    var continuing = mode === "continue";  // Continue sends no text
    sent = { text: continuing ? "" : text.value, direction: direction.value, mode: mode, after: lastNodeId() };
    keepAction(sent);
    if (!continuing) text.value = "";
    direction.value = "";
    showCount();
    revealDock();
  });

  function giveBack() {
    if (!sent) return;
    var text = byId("action-text");
    var direction = byId("action-direction");
    text.value = [sent.text, text.value].filter(function (part) { return part.trim(); }).join("\n");
    if (!direction.value) direction.value = sent.direction;
    sent = null;
    showCount();
  }

  // Ctrl/Cmd+Enter sends the action.
  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.id === "action-text") {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });

  // Every turn ends with its outcome; one that did not commit gives the text back. Either way the server has
  // acknowledged the action, so the page's own copy of it is dropped.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var outcome = byId("turn-outcome");
    if (outcome && outcome.dataset.outcome) {
      if (outcome.dataset.outcome !== "committed") giveBack();
      sent = null;
      forgetAction();
      outcome.dataset.outcome = "";
    }
  });

  // --- Nothing typed is lost --------------------------------------------------
  // The action in flight is kept in this browser's storage until the end of its turn arrives. If the connection
  // drops first (the app crashed or was restarted), the story is read again when the page reconnects, or when it
  // is reloaded, and an action that is not in the story is put back in the box, with one line saying so. The key
  // names this tab (kept across reloads in sessionStorage), so another tab's action in flight is never taken.
  var LOST = "Your last action was not played; it is back in the box.";
  var pendingKey = (function () {
    var id = tab;
    try {
      id = sessionStorage.getItem("storyteller.page") || tab;
      sessionStorage.setItem("storyteller.page", id);
    } catch (error) { /* private mode: this page alone */ }
    return "storyteller.pending." + play.dataset.campaign + "." + id;
  })();

  function keepAction(action) {
    try { localStorage.setItem(pendingKey, JSON.stringify(action)); } catch (error) { /* kept in memory only */ }
  }

  function keptAction() {
    try { return JSON.parse(localStorage.getItem(pendingKey) || "null") || sent; } catch (error) { return sent; }
  }

  function forgetAction() {
    try { localStorage.removeItem(pendingKey); } catch (error) { /* nothing was kept */ }
  }

  function lastNodeId() {
    var last = 0;
    document.querySelectorAll("#story [data-node-id]").forEach(function (node) {
      last = Math.max(last, +node.dataset.nodeId);
    });
    return last;
  }

  function squeezed(text) { return (text || "").replace(/\s+/g, " ").trim(); }

  function playedSince(action) {
    var text = squeezed(action.text);
    return Array.prototype.some.call(document.querySelectorAll("#story [data-role=player][data-node-id]"), function (node) {
      return +node.dataset.nodeId > action.after && (!text || squeezed(node.textContent).indexOf(text) >= 0);
    });
  }

  function recover() {
    var action = keptAction();
    forgetAction();
    if (!action || playedSince(action)) {
      sent = null;
      return;
    }
    sent = action;
    giveBack();
    var notice = byId("turn-notice");
    if (notice) notice.textContent = LOST;
  }

  // --- What a turn waits for, in seconds --------------------------------------
  // A wait the server names (#turn-notice[data-waiting]: the model loading, a recording letting go) counts its
  // seconds, and so does a reply whose first words have not come yet, so the page never shows a bare cursor.
  var READING_AFTER = 1000;  // ms: a reply that starts sooner needs no words about it
  function seconds(since) { return Math.floor((Date.now() - since) / 1000) + " s"; }
  function begun() {  // the reply's first words, or a reasoning model's thinking, have come
    var text = byId("pending-text");
    var thinking = byId("pending-thinking-text");
    return !text || text.textContent || (thinking && thinking.textContent);
  }
  function tick() {
    var reply = byId("pending-reply");
    if (!reply || begun()) return;
    if (!reply.dataset.since) reply.dataset.since = Date.now();
    var notice = document.querySelector("#turn-notice[data-waiting]");
    var reading = byId("pending-wait");
    if (notice) {
      if (!notice.dataset.since) notice.dataset.since = Date.now();
      var count = notice.querySelector(".seconds") || notice.appendChild(document.createElement("span"));
      count.className = "seconds";
      count.textContent = " " + seconds(+notice.dataset.since);
      if (reading) reading.remove();
    } else if (Date.now() - reply.dataset.since >= READING_AFTER) {
      if (!reading) {
        reading = document.createElement("p");
        reading.id = "pending-wait";
        reading.className = "muted small";
        reply.insertBefore(reading, reply.firstChild);
      }
      reading.textContent = "The narrator is reading the story… " + seconds(+reply.dataset.since);
    }
  }
  window.setInterval(tick, 250);
  document.addEventListener("htmx:wsAfterMessage", function () {
    var reading = byId("pending-wait");
    if (reading && begun()) reading.remove();
  });

  // --- Editing a message (issue 26) -------------------------------------------
  // Edit opens a form in the message's card (htmx fetches it, saying what
  // saving does); Cancel closes it. A sent edit is disabled until it ends: an
  // edited reply that was refused stays in its form; an edited action that
  // did not commit comes back in the action box (the story is read again).
  var editing = null;  // {form, action: whether it is an edited action} of the edit in flight

  document.addEventListener("click", function (event) {
    var cancel = event.target.closest("[data-action=cancel-edit]");
    var slot = cancel && cancel.closest(".edit-slot");
    if (slot) slot.innerHTML = "";
  });

  function lockEdit(form, locked) {
    form.querySelectorAll("button, textarea, input").forEach(function (field) { field.disabled = locked; });
  }

  document.addEventListener("htmx:wsConfigSend", function (event) {
    var form = event.target;
    if (!form.closest || !form.closest(".edit-form")) return;
    var field = form.querySelector("[name=text]");
    var problem = busy() ? "A reply is still being written. Wait for it, or press Stop."
      : !connected ? "Not connected to the app, so nothing was sent; your edit is kept. Send it again once it reconnects."
      : problemWith(field);
    if (problem) {
      event.preventDefault();
      refuse(problem);
      return;
    }
    editing = { form: form, action: form.classList.contains("edit-action") };
    if (editing.action) sent = { text: field.value, direction: "" };
    lockEdit(form, true);
  });

  // Before the outcome is read (and cleared) below: capture runs first.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var outcome = byId("turn-outcome");
    if (!editing || !outcome || !outcome.dataset.outcome) return;
    if (outcome.dataset.outcome !== "committed") {
      if (editing.action) {
        var slot = editing.form.closest(".edit-slot");
        if (slot) slot.innerHTML = "";
      } else {
        lockEdit(editing.form, false);
      }
    }
    editing = null;
  }, true);

  // --- Drafting the next move (Impersonate, issue 26) -------------------------
  // The narrator's draft arrives in #draft-stream a few words at a time and
  // is moved into the action box as it comes. What the person had typed stays:
  // the draft goes on a line after it. Nothing is sent until they send it.
  var draftAfter = "";  // what goes between the typed text and the draft
  function moveDraft() {
    var stream = byId("draft-stream");
    var box = byId("action-text");
    if (!stream || !box) return;
    if (stream.hasAttribute("data-drafting")) {
      stream.removeAttribute("data-drafting");
      draftAfter = box.value.trim() ? "\n" : "";
      if (!draftAfter) box.value = "";
      var continuing = document.querySelector("#action-form [name=mode][value=continue]:checked");
      if (continuing) document.querySelector("#action-form [name=mode][value=do]").checked = true;  // it is an action
    }
    var text = stream.textContent;
    if (!text) return;
    stream.textContent = "";
    if (draftAfter !== null) {
      text = draftAfter + text.replace(/^\s+/, "");
      draftAfter = null;
    }
    box.value += text;
    showCount();
  }
  document.addEventListener("htmx:wsAfterMessage", moveDraft);

  // --- Reading aloud (issue 26) ----------------------------------------------
  // The browser's own speech synthesis: nothing is sent anywhere. Read under a
  // reply reads it (pressed again: Stop reading); what a character says in
  // quotes is read in the voice chosen for them under "Reading aloud", the
  // rest in the narrator's; a game master's round reads each character's
  // words in theirs. Choices and "read each new reply" are kept in this
  // browser, per campaign. Without voices, the controls say so.
  var speech = window.speechSynthesis || null;
  var VOICES_KEY = "storyteller.voices." + play.dataset.campaign;
  var AUTO_KEY = "storyteller.autoread." + play.dataset.campaign;
  var ATTRIBUTION = 80;  // how far from a quote (characters) its speaker's name is looked for
  var QUOTE = /“([^”]+)”|"([^"]+)"/g;
  var reading = null;  // the Read button of the reply being read

  function kept(key) {
    try { return window.localStorage.getItem(key); } catch (error) { return null; }
  }
  function keep(key, value) {
    try { window.localStorage.setItem(key, value); } catch (error) { /* private mode: not kept */ }
  }
  function chosenVoices() {
    try { return JSON.parse(kept(VOICES_KEY) || "{}"); } catch (error) { return {}; }
  }
  function allVoices() {
    return speech ? speech.getVoices() : [];
  }
  function voiceFor(who) {
    var uri = chosenVoices()[who];
    var found = null;
    allVoices().forEach(function (voice) { if (voice.voiceURI === uri) found = voice; });
    return found;
  }

  function showVoices() {
    var voices = allVoices();
    var panel = document.querySelector("#voices-panel[data-voices-panel]");  // the panel itself, once it is loaded
    if (panel) {
      var chosen = chosenVoices();
      panel.querySelector("[data-no-voices]").hidden = voices.length > 0;
      panel.querySelectorAll("[data-voice-for]").forEach(function (row) {
        var select = row.querySelector("select");
        select.length = 1;
        voices.forEach(function (voice) { select.add(new Option(voice.name + " (" + voice.lang + ")", voice.voiceURI)); });
        select.value = chosen[row.dataset.voiceFor] || "";
        select.disabled = !voices.length;
      });
      var auto = panel.querySelector("[data-auto-read]");
      auto.checked = kept(AUTO_KEY) === "on";
      auto.disabled = !voices.length;
    }
    document.querySelectorAll("[data-action=read-aloud]").forEach(function (button) {
      if (button === reading) return;
      button.disabled = !voices.length;
      button.textContent = voices.length ? "Read" : "No voices to read with";
    });
  }
  if (speech && speech.addEventListener) speech.addEventListener("voiceschanged", showVoices);
  document.addEventListener("htmx:load", showVoices);
  showVoices();

  document.addEventListener("change", function (event) {
    var select = event.target.closest && event.target.closest("[data-voice-select]");
    if (select) {
      var chosen = chosenVoices();
      chosen[select.closest("[data-voice-for]").dataset.voiceFor] = select.value;
      keep(VOICES_KEY, JSON.stringify(chosen));
    } else if (event.target.matches && event.target.matches("[data-auto-read]")) {
      keep(AUTO_KEY, event.target.checked ? "on" : "off");
    }
  });

  function cast() {
    var found = [];
    document.querySelectorAll("#voices-panel [data-voice-for]").forEach(function (row) {
      var names = (row.dataset.names || "").split("|").filter(Boolean);
      if (names.length) found.push({ who: row.dataset.voiceFor, names: names });
    });
    return found;
  }

  // Return who says the quote at [start, end) of ``text``: the character named nearest it, else the narrator.
  function speakerOf(text, start, end, people) {
    var best = "narrator", distance = Infinity;
    people.forEach(function (person) {
      person.names.forEach(function (name) {
        var after = text.slice(end, end + ATTRIBUTION).indexOf(name);
        var window_ = text.slice(Math.max(0, start - ATTRIBUTION), start);
        var before = window_.lastIndexOf(name);
        var gaps = [after, before < 0 ? -1 : window_.length - before - name.length];
        gaps.forEach(function (gap) {
          if (gap >= 0 && gap < distance) { best = person.who; distance = gap; }
        });
      });
    });
    return best;
  }

  function proseParts(text, people) {
    var parts = [], last = 0, match;
    QUOTE.lastIndex = 0;
    while ((match = QUOTE.exec(text))) {
      parts.push({ text: text.slice(last, match.index), who: "narrator" });
      parts.push({ text: match[1] || match[2], who: speakerOf(text, match.index, QUOTE.lastIndex, people) });
      last = QUOTE.lastIndex;
    }
    parts.push({ text: text.slice(last), who: "narrator" });
    return parts;
  }

  function partsOf(card) {
    var people = cast(), parts = [];
    card.querySelectorAll(".voice[data-speaker]").forEach(function (voice) {
      var said = voice.querySelector(".voice-speech"), did = voice.querySelector(".voice-action:not(.muted)");
      if (said) parts.push({ text: said.textContent.replace(/^“|”$/g, ""), who: voice.dataset.speaker });
      if (did) parts.push({ text: did.textContent, who: "narrator" });
    });
    var prose = card.querySelector(".gm-narration") || card.querySelector(".prose");
    if (prose) parts = parts.concat(proseParts(prose.textContent, people));
    return parts.filter(function (part) { return /[\p{L}\p{N}]/u.test(part.text); });
  }

  function pressed(button, on) {
    button.textContent = on ? "Stop reading" : "Read";
    button.dataset.reading = on ? "true" : "";
    button.setAttribute("aria-pressed", on ? "true" : "false");
  }

  function stopReading() {
    var button = reading;
    reading = null;
    if (speech) speech.cancel();
    if (button) pressed(button, false);
  }

  function readAloud(button) {
    var card = button.closest("[data-node-id]");
    var parts = card ? partsOf(card) : [];
    stopReading();
    if (!speech || !allVoices().length || !parts.length) return;
    reading = button;
    pressed(button, true);
    parts.forEach(function (part, index) {
      var utterance = new window.SpeechSynthesisUtterance(part.text.trim());
      var voice = voiceFor(part.who);
      if (voice) {
        utterance.voice = voice;
        utterance.lang = voice.lang;
      }
      if (index === parts.length - 1) {
        utterance.onend = utterance.onerror = function () {
          if (reading === button) {
            reading = null;
            pressed(button, false);
          }
        };
      }
      speech.speak(utterance);
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-action=read-aloud]");
    if (!button) return;
    if (button === reading) stopReading();
    else readAloud(button);
  });

  // A reply that has just been written is read when the person asked for it.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var outcome = byId("turn-outcome");
    if (!outcome || outcome.dataset.outcome !== "committed" || !outcome.dataset.reply) return;
    var card = byId("node-" + outcome.dataset.reply);
    var button = card && card.querySelector("[data-action=read-aloud]");
    if (button && kept(AUTO_KEY) === "on") readAloud(button);
  }, true);
  window.addEventListener("pagehide", stopReading);

  // --- The world from the page, the drawer (issue 24) -----------------------
  // Here's buttons and the map's places play turns over the socket (their
  // ws-send, or the travel form for a place on the map). On a narrow screen
  // the panels are a drawer over the story, closed until the button in the
  // page's head opens it; a click that plays a turn closes it again, so the
  // turn is seen as it plays. Ask puts the character's name at the start of
  // a Say: that character answers what is said next.
  var drawerToggle = byId("drawer-toggle");
  function drawer(open) {
    play.classList.toggle("drawer-open", open);
    if (drawerToggle) drawerToggle.setAttribute("aria-expanded", open ? "true" : "false");
  }

  function sendTravel(place) {
    var form = byId("travel-form");
    if (!form) return;
    form.querySelector("[name=place]").value = place;
    if (busy()) {
      refuse("A reply is still being written. Wait for it, or press Stop.");
      return;
    }
    drawer(false);
    form.requestSubmit();
  }

  function askTo(who, name) {
    var box = byId("action-text");
    var say = document.querySelector("#action-form [name=mode][value=say]");
    if (!box || !say) return;
    say.checked = true;
    byId("action-ask").value = who;
    byId("action-asked").textContent = name + " answers what you say next.";
    if (box.value.trim().indexOf(name) !== 0) box.value = name + ", " + box.value.trim();
    drawer(false);
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
  }

  document.addEventListener("click", function (event) {
    if (event.target.closest("#drawer-toggle")) {
      drawer(!play.classList.contains("drawer-open"));
      return;
    }
    if (event.target.closest("[data-action=close-drawer]")) {
      drawer(false);
      return;
    }
    var travel = event.target.closest("[data-travel]");
    if (travel && play.contains(travel)) {
      event.preventDefault();
      sendTravel(travel.dataset.travel);
      return;
    }
    var ask = event.target.closest("[data-act=ask]");
    if (ask) askTo(ask.dataset.ask, ask.dataset.name);
  });

  document.addEventListener("htmx:wsConfigSend", function (event) {
    var from = event.target;
    if (from.closest && from.closest("#side-panels")) drawer(false);
    if (from.id === "action-form") {  // the one Say it was asked for
      byId("action-ask").value = "";
      byId("action-asked").textContent = "";
    }
  });

  // The map on its own page sends a place here (?travel=<place>): it is sent once the socket is open.
  var asked = new URLSearchParams(window.location.search).get("travel");
  if (asked) {
    history.replaceState(null, "", window.location.pathname);
    document.addEventListener("htmx:wsOpen", function once() {
      document.removeEventListener("htmx:wsOpen", once);
      sendTravel(asked);
    });
  }

  // --- The side panels -------------------------------------------------------
  // Open beside the story on wide screens, closed below it on narrow ones;
  // a panel the person opens or closes stays so on this device.
  var narrow = window.matchMedia("(max-width: 959px)");

  function panelKey(panel) {
    return "storyteller.panel." + (narrow.matches ? "narrow." : "wide.") + panel.dataset.panel;
  }

  function remembered(panel) {
    try { return window.localStorage.getItem(panelKey(panel)); } catch (error) { return null; }
  }

  function arrangePanels() {
    document.querySelectorAll("details.side-panel").forEach(function (panel) {
      var saved = remembered(panel);
      // In the drawer, the three a player uses most are open until the person closes them.
      panel.open = saved ? saved === "open" : !narrow.matches || panel.hasAttribute("data-first");
    });
    if (!narrow.matches) drawer(false);
  }
  arrangePanels();
  narrow.addEventListener("change", arrangePanels);

  // A panel reads itself again whenever the story moves (a turn, undo, the
  // worker finishing) and while its recording is pending. That must not take
  // what the person is writing in it: while a field in the panel holds typed
  // text, a chosen option or a changed box, only the panel's own forms may
  // redraw it (a check picked in the dice form, then the reason typed, was
  // reset by a redraw between the two). Disclosures left open stay open.
  function changed(field) {
    if (field.tagName === "SELECT") {
      var chosen = 0;  // what the page drew as chosen: the last option marked selected, else the first
      Array.prototype.forEach.call(field.options, function (option, index) { if (option.defaultSelected) chosen = index; });
      return field.options.length > 0 && field.selectedIndex !== chosen;
    }
    if (field.type === "checkbox" || field.type === "radio") return field.checked !== field.defaultChecked;
    if (["hidden", "submit", "button", "reset", "file", "image"].indexOf(field.type) !== -1) return false;
    return field.value !== field.defaultValue;
  }
  function beingWritten(panel) {
    // Typed text anywhere; a choice only in a form (the voices' choices are the page's own, kept in the browser).
    return Array.prototype.some.call(panel.querySelectorAll("textarea, input, select"), function (field) {
      var typed = field.tagName === "TEXTAREA" || field.type === "text";
      return (typed || field.form) && changed(field);
    });
  }
  var reopen = {};  // ids of the disclosures open in a panel being redrawn
  document.addEventListener("htmx:beforeSwap", function (event) {
    var panel = event.detail.target;
    if (!panel || !panel.closest || !panel.closest("#side-panels") || !panel.id.endsWith("-panel")) return;
    var source = event.detail.requestConfig && event.detail.requestConfig.elt;
    var ownForm = source && source.closest && source.closest("form") && panel.contains(source);
    if (!ownForm && beingWritten(panel)) {
      event.detail.shouldSwap = false;
      return;
    }
    panel.querySelectorAll("details[open][id]").forEach(function (disclosure) { reopen[disclosure.id] = true; });
  });
  document.addEventListener("htmx:load", function (event) {
    var loaded = event.detail.elt;
    if (!loaded.querySelectorAll) return;
    loaded.querySelectorAll("details[id]").forEach(function (disclosure) {
      if (reopen[disclosure.id]) {
        disclosure.open = true;
        delete reopen[disclosure.id];
      }
    });
  });

  document.addEventListener("click", function (event) {
    var summary = event.target.closest("details.side-panel > summary");
    if (!summary) return;
    var panel = summary.parentElement;
    try { window.localStorage.setItem(panelKey(panel), panel.open ? "closed" : "open"); } catch (error) { /* private mode */ }
  });
})();

// A table's round panel (issue 30, i30b): once the round an action was sent for is told (a [data-told] part
// arrives in the story), the box it was sent from empties, unless it was changed since (then it holds the next
// action being written, and stays). A refused send keeps the box as it is.
(function () {
  "use strict";
  var sent = "";
  var told = 0;
  document.addEventListener("htmx:wsConfigSend", function (event) {
    if (event.target.id !== "round-form") return;
    var box = document.getElementById("round-text");
    sent = box ? box.value : "";
  });
  document.addEventListener("htmx:wsAfterMessage", function () {
    var count = document.querySelectorAll("#story [data-told]").length;
    if (count === told) return;
    told = count;
    var box = document.getElementById("round-text");
    if (box && sent && box.value === sent) box.value = "";
    sent = "";
  });
})();
