/* Every page of a logged-in user: the count of permission requests waiting for someone, in the tab's title and
 * favicon, and (once allowed with the "Notify me" button) a desktop notification when a task needs a decision or
 * ends. All from the task list's websocket, /ws/tasks/: the dashboard hands its messages over (BridgeNotify.share),
 * other pages open the socket themselves. */
"use strict";

const BridgeNotify = (function () {
  const script = document.currentScript;
  const button = document.getElementById("notify-me");
  const icon = document.querySelector("link[rel=icon]");
  const plainIcon = icon.href;
  const plainTitle = document.title;
  const iconImage = new Image();
  iconImage.src = plainIcon;
  const thisTaskId = document.getElementById("task")?.dataset.taskId; // the task page's own task
  const NOTIFIED_KEY = "bridge.notified"; // tag -> when: shared by the tabs, so each request or end is told once
  const NOTIFIED_KEEP_MS = 24 * 3600 * 1000;
  let shownCount = 0;
  let cursor = null;
  let ownSocket = true;

  /* News is what happened after this tab began watching: requests and ends from before it are not announced. */
  const WATCHING_KEY = "bridge.watchingSince";
  if (!sessionStorage.getItem(WATCHING_KEY)) sessionStorage.setItem(WATCHING_KEY, script.dataset.renderedAt);
  const watchingSince = Date.parse(sessionStorage.getItem(WATCHING_KEY));

  const supported = () => "Notification" in window;
  const allowed = () => supported() && Notification.permission === "granted";

  function showButton() {
    button.hidden = !(supported() && Notification.permission === "default");
  }

  button.addEventListener("click", () => Notification.requestPermission().then(showButton));
  showButton();

  function showCount(count) {
    shownCount = count;
    document.title = count ? `(${count}) ${plainTitle}` : plainTitle;
    if (!count) {
      icon.href = plainIcon;
      return;
    }
    iconImage.decode().then(drawBadge, drawBadge); // without the icon, the badge alone
  }

  /* The favicon with the count in a red disc over its lower right corner. */
  function drawBadge() {
    if (!shownCount) return; // the count went back to 0 while the icon loaded
    const size = 64;
    const canvas = document.createElement("canvas");
    canvas.width = canvas.height = size;
    const pen = canvas.getContext("2d");
    if (iconImage.complete && iconImage.naturalWidth) pen.drawImage(iconImage, 0, 0, size, size);
    pen.fillStyle = "#dc2626";
    pen.beginPath();
    pen.arc(size * 0.66, size * 0.66, size * 0.34, 0, 2 * Math.PI);
    pen.fill();
    pen.fillStyle = "#fff";
    pen.font = `bold ${size * 0.44}px sans-serif`;
    pen.textAlign = "center";
    pen.textBaseline = "middle";
    pen.fillText(shownCount > 9 ? "9+" : String(shownCount), size * 0.66, size * 0.68);
    icon.href = canvas.toDataURL("image/png");
  }

  function notified() {
    const now = Date.now();
    const kept = Object.entries(JSON.parse(localStorage.getItem(NOTIFIED_KEY) || "{}"));
    return Object.fromEntries(kept.filter(([, when]) => now - when < NOTIFIED_KEEP_MS));
  }

  /* Told once, across this browser's tabs (each tab that does tell uses the same tag, which the system collapses);
   * not told when this tab shows that task in front of the person, who sees it happen. */
  function tell(tag, taskId, title, body) {
    const told = notified();
    if (told[tag]) return;
    told[tag] = Date.now();
    localStorage.setItem(NOTIFIED_KEY, JSON.stringify(told));
    if (taskId === thisTaskId && document.visibilityState === "visible" && document.hasFocus()) return;
    const notification = new Notification(title, { body, tag, icon: plainIcon });
    notification.onclick = () => {
      window.focus();
      notification.close();
      location.assign(`/tasks/${taskId}/`);
    };
  }

  const isNews = (iso) => iso !== null && Date.parse(iso) > watchingSince;

  function announce(message) {
    for (const request of message.pending) {
      if (isNews(request.asked_at)) {
        const tag = `bridge-decision-${request.task_id}-${request.request_id}`;
        tell(tag, request.task_id, "Decision needed", `${request.tool} · ${request.prompt}`);
      }
    }
    for (const row of message.tasks) {
      if (isNews(row.finished_at)) { // a task has finished_at once it has ended
        tell(`bridge-end-${row.id}`, row.id, `Task ${row.status}`, row.prompt);
      }
    }
  }

  function apply(message) {
    cursor = message.cursor;
    showCount(message.pending_permissions);
    if (allowed()) announce(message);
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (ownSocket) Bridge.follow("/ws/tasks/", () => cursor, apply, null);
  });

  return {
    /** For a page that follows /ws/tasks/ itself (the dashboard): hand each message to the returned function
     * instead of this page opening a second socket. */
    share() {
      ownSocket = false;
      return apply;
    },
  };
})();
