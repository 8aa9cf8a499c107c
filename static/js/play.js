// The play page's small amount of behaviour; htmx and its ws extension do the rest.
(function () {
  "use strict";

  // Name this tab, so that a change it makes itself (undo, redo…) is not
  // redrawn a second time when the app tells every open tab about it.
  // Deferred scripts run before htmx connects the websocket, so the name is
  // in place for the first connection.
  var tab = (window.crypto && crypto.randomUUID) ? crypto.randomUUID() : String(Math.random()).slice(2);
  var play = document.getElementById("play");
  if (play && play.getAttribute("ws-connect")) {
    play.setAttribute("ws-connect", play.getAttribute("ws-connect") + "?tab=" + encodeURIComponent(tab));
  }
  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-Storyteller-Tab"] = tab;
  });

  function status(text) {
    var el = document.getElementById("connection");
    if (el) el.textContent = text;
  }

  document.addEventListener("htmx:wsOpen", function () { status(""); });
  document.addEventListener("htmx:wsClose", function () {
    status("Connection to the app lost; reconnecting… Nothing you typed is lost.");
  });
  document.addEventListener("htmx:wsError", function () {
    status("The app is not answering. Is it still running?");
  });

  // Ctrl/Cmd+Enter sends the action.
  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey) && event.target.id === "action-text") {
      event.preventDefault();
      event.target.form.requestSubmit();
    }
  });

  // Keep the newest words in view while a reply streams in.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var pending = document.getElementById("pending-reply");
    if (pending) pending.scrollIntoView({ block: "end" });
  });
})();
