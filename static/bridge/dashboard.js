/* The dashboard: rows re-rendered by the server arrive over /ws/tasks/ and replace or join the table. */
"use strict";

(function () {
  const table = document.getElementById("tasks");
  const body = table.querySelector("tbody");
  let cursor = Number(table.dataset.cursor);
  const notify = BridgeNotify.share(); // the title's count and the notifications read this socket too
  const wanted = (row) =>
    (!table.dataset.status || row.status === table.dataset.status) &&
    (!table.dataset.agent || row.agent === table.dataset.agent);

  function apply(message) {
    cursor = message.cursor;
    for (const row of message.tasks) {
      const old = document.getElementById(`task-${row.id}`);
      if (!wanted(row)) {
        if (old) old.remove();
        continue;
      }
      const holder = document.createElement("tbody");
      holder.innerHTML = row.html.trim();
      const fresh = holder.firstElementChild;
      if (old) old.replaceWith(fresh);
      else body.prepend(fresh);
    }
    document.getElementById("pending-permissions").textContent = message.pending_permissions;
    for (const status of ["queued", "running", "done", "failed", "cancelled"]) {
      document.getElementById(`count-${status}`).textContent = message.counts[status];
    }
    document.getElementById("count-lost").textContent = message.counts.timeout + message.counts.orphaned;
    document.getElementById("empty").hidden = body.children.length > 0;
    Bridge.tickElapsed(body);
    notify(message);
  }

  Bridge.follow("/ws/tasks/", () => cursor, apply, document.getElementById("live"));
  Bridge.tickElapsed(body);
  setInterval(() => Bridge.tickElapsed(body), 1000);
})();
