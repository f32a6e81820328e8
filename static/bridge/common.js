/* Shared helpers for Bridge's pages: a reconnecting websocket that resumes from the last seq, and formatting. */
"use strict";

/* Long waits show progress: a submitted form's button says so until the next page arrives. */
document.addEventListener("submit", (event) => {
  const button = event.target.querySelector("button.primary, button.danger");
  if (button) {
    button.disabled = true;
    button.textContent = button.dataset.busy || "Working…";
  }
});

const Bridge = {
  /** Open ws `path`, resuming from getSince() after a drop (null: no `since`, the socket's own start); stop when
   * onMessage returns "end". `live`, if given, is the element that says how the connection is. */
  follow(path, getSince, onMessage, live) {
    let closedForGood = false;
    let delay = 500;
    const say = (text, className) => {
      if (live) {
        live.textContent = text;
        live.className = className;
      }
    };
    function connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const since = getSince();
      const query = since === null ? "" : `?since=${since}`;
      const ws = new WebSocket(`${scheme}//${location.host}${path}${query}`);
      ws.onopen = () => { delay = 500; say("live", "live on"); };
      ws.onmessage = (message) => {
        const data = JSON.parse(message.data);
        if (data.type === "error") {
          closedForGood = true;
          say(data.message, "live error");
          return;
        }
        if (onMessage(data) === "end") {
          closedForGood = true;
          say("finished", "live");
        }
      };
      ws.onclose = () => {
        if (closedForGood) return;
        say("reconnecting…", "live off");
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10000);
      };
    }
    connect();
  },

  duration(startIso, endIso) {
    if (!startIso) return "–";
    const end = endIso ? Date.parse(endIso) : Date.now();
    let s = Math.max(0, Math.round((end - Date.parse(startIso)) / 1000));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    s %= 60;
    return h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
  },

  /** Fill every [data-elapsed] cell from its data-started / data-finished attributes. */
  tickElapsed(root) {
    for (const cell of root.querySelectorAll("[data-elapsed]")) {
      cell.textContent = Bridge.duration(cell.dataset.started, cell.dataset.finished);
    }
  },

  csrfToken() {
    return document.querySelector("input[name=csrfmiddlewaretoken]").value;
  },
};
