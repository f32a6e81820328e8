/* The task page: replays the transcript from seq 0 over /ws/tasks/<id>/, then follows it live. */
"use strict";

(function () {
  const root = document.getElementById("task");
  const taskId = root.dataset.taskId;
  const transcript = document.getElementById("transcript");
  const cards = document.getElementById("permissions");
  const messages = {}; // message_id -> {el, streamed, finals}
  const tools = {}; // tool_use id -> <details>
  const liveTokens = { input: 0, output: 0 }; // summed from usage events until the task's own totals are known
  let anonymous = 0; // text without a message id (ACP agents): deltas up to the next other event are one message
  let lastSeq = 0;
  let state = null;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function add(node, seq) {
    document.getElementById("waiting")?.remove();
    node.dataset.seq = seq;
    transcript.append(node);
    return node;
  }

  function line(seq, className, text) {
    return add(el("div", `entry ${className}`, text), seq);
  }

  function pretty(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  function assistantText(event, isFinal) {
    const id = event.data.message_id || `anon-${anonymous}`;
    let msg = messages[id];
    if (!msg) {
      msg = messages[id] = { el: add(el("div", "entry assistant"), event.seq), streamed: "", finals: [] };
    }
    if (isFinal) {
      msg.finals.push(event.data.text);
      msg.el.textContent = msg.finals.join("\n\n");
    } else if (!msg.finals.length) {
      msg.streamed += event.data.text;
      msg.el.textContent = msg.streamed;
    }
  }

  function toolUse(event) {
    const box = el("details", "entry tool");
    const summary = el("summary");
    summary.append(el("span", "tool-name", event.data.name), el("span", "muted", " tool call"));
    box.append(summary, el("pre", "tool-input", pretty(event.data.input ?? event.data.text ?? "")));
    tools[event.data.id] = box;
    add(box, event.seq);
  }

  function toolResult(event) {
    const data = event.data;
    const box = tools[data.tool_use_id];
    const out = el("pre", data.is_error ? "tool-output failed" : "tool-output", data.content || "(no output)");
    if (box) {
      box.append(out);
      box.classList.add(data.is_error ? "failed" : "ok");
      box.querySelector("summary").append(el("span", "badge small", data.is_error ? "error" : "result"));
    } else {
      add(out, event.seq);
    }
  }

  function describeDecision(perm) {
    const who = perm.decided_by ? ` by ${perm.decided_by}` : "";
    const via = perm.decided_via ? ` via ${perm.decided_via}` : "";
    const why = perm.message ? ` — ${perm.message}` : "";
    const edited = perm.updated_input ? " (with edited input)" : "";
    return `${perm.status}${edited}${who}${via}${why}`;
  }

  function permissionCard(perm) {
    let card = document.getElementById(`perm-${perm.request_id}`);
    if (!card) {
      card = document.getElementById("permission-card").content.firstElementChild.cloneNode(true);
      card.id = `perm-${perm.request_id}`;
      card.querySelector(".tool").textContent = perm.tool_name;
      card.querySelector(".input").textContent = pretty(perm.input);
      card.querySelector(".edited").value = JSON.stringify(perm.input, null, 2);
      wireCard(card, perm.request_id);
      cards.prepend(card);
    }
    const badge = card.querySelector(".state");
    badge.textContent = perm.status;
    badge.className = `badge state perm-${perm.status}`;
    if (perm.status !== "pending") {
      card.classList.add("decided");
      card.querySelector(".input").textContent = JSON.stringify(perm.updated_input || perm.input);
      card.querySelector("form").hidden = true;
      const decision = card.querySelector(".decision");
      decision.hidden = false;
      decision.textContent = describeDecision(perm);
    }
    return card;
  }

  function wireCard(card, requestId) {
    const error = card.querySelector(".error-text");
    async function send(fields) {
      error.hidden = true;
      for (const b of card.querySelectorAll("button")) b.disabled = true;
      const body = new FormData();
      for (const [k, v] of Object.entries(fields)) body.append(k, v);
      try {
        const response = await fetch(`${root.dataset.decideUrl}${encodeURIComponent(requestId)}`, {
          method: "POST", body, headers: { "X-CSRFToken": Bridge.csrfToken() }, credentials: "same-origin",
        });
        const answer = await response.json();
        if (response.ok) permissionCard(answer);
        else throw new Error(answer.error || `HTTP ${response.status}`);
      } catch (problem) {
        error.textContent = problem.message;
        error.hidden = false;
      } finally {
        for (const b of card.querySelectorAll("button")) b.disabled = false;
      }
    }
    card.querySelector(".allow").onclick = () => send({ behavior: "allow" });
    card.querySelector(".deny").onclick = () =>
      send({ behavior: "deny", message: card.querySelector(".message").value });
    card.querySelector(".allow-edited").onclick = () =>
      send({ behavior: "allow", updated_input: card.querySelector(".edited").value });
  }

  function onEvent(event) {
    const data = event.data;
    switch (event.kind) {
      case "text_delta": return assistantText(event, false);
      case "text": return assistantText(event, true);
      case "thinking": case "thinking_delta": {
        let box = transcript.lastElementChild;
        if (event.kind === "thinking" || !box?.classList.contains("thinking")) {
          box = el("details", "entry thinking");
          box.append(el("summary", "", "Thinking"), el("pre", "", ""));
          add(box, event.seq);
        }
        box.querySelector("pre").textContent += data.text;
        return box;
      }
      case "output": return add(el("div", "entry assistant", data.text), event.seq);
      case "tool_update": {
        const box = tools[data.tool_use_id];
        if (box && data.content) box.append(el("pre", "tool-output", data.content));
        return box;
      }
      case "plan":
        return line(event.seq, "system", `Plan: ${(data.entries || []).map((e) => e.content).join(" · ")}`);
      case "tool_use": return toolUse(event);
      case "tool_result": return toolResult(event);
      case "permission_request":
        permissionCard(data);
        return line(event.seq, "system", `Asked to use ${data.tool_name}`);
      case "permission_decision":
        permissionCard(data);
        return line(event.seq, `system perm-${data.status}`, `Permission for ${data.tool_name}: ${describeDecision(data)}`);
      case "api_retry":
        return line(event.seq, "warning",
          `API error, retrying (attempt ${data.attempt ?? "?"} of ${data.max_retries ?? "?"}` +
          `${data.retry_delay_ms ? `, in ${(data.retry_delay_ms / 1000).toFixed(1)} s` : ""}): ` +
          `${data.error_status ? `HTTP ${data.error_status} ` : ""}${pretty(data.error ?? "")}`);
      case "status":
        return line(event.seq, `system status-line status-${data.status}`,
          `Status: ${data.status}${data.reason ? ` — ${data.reason}` : ""}${data.error ? ` — ${data.error}` : ""}`);
      case "init": return line(event.seq, "system", `Agent session ${data.session_id} started (model ${data.model})`);
      case "spawned": return line(event.seq, "system", `Process ${data.pid} started`);
      case "cancel_requested": return line(event.seq, "warning", `Cancel requested by ${data.by || "someone"}: ${data.reason}`);
      case "result":
        return line(event.seq, data.is_error ? "error" : "system",
          `Result (${data.subtype}${data.is_error ? ", error" : ""}) after ${data.num_turns ?? "?"} turns`);
      case "stderr": case "stdout": case "truncated": case "signal": case "stopping": case "error":
        return line(event.seq, event.kind === "stdout" ? "system" : "error",
          `${event.kind}: ${pretty(data.text ?? data.message ?? data.reason ?? data)}`);
      case "context_usage": return null;
      case "system":
        return line(event.seq, "system", `${data.subtype || "system"}${data.status ? `: ${data.status}` : ""}`);
      case "usage":
        liveTokens.input += data.input_tokens || 0;
        liveTokens.output += data.output_tokens || 0;
        return null;
      case "user": return null;
      default: return line(event.seq, "system muted", `${event.kind}: ${pretty(data)}`);
    }
  }

  function showState(s) {
    state = s;
    const status = document.getElementById("status");
    status.textContent = s.cancel_requested && s.status === "running" ? "cancelling" : s.status;
    status.className = `badge big status-${s.status}`;
    const terminal = ["done", "failed", "cancelled", "timeout", "orphaned"].includes(s.status);
    document.getElementById("cancel-form").hidden = terminal;
    document.getElementById("follow-up").hidden = !(terminal && s.has_session);
    document.getElementById("turns").textContent = s.num_turns ?? "–";
    const tokens = s.input_tokens == null ? liveTokens : { input: s.input_tokens, output: s.output_tokens };
    document.getElementById("tokens").textContent =
      tokens.input || tokens.output ? `${tokens.input.toLocaleString()} / ${tokens.output.toLocaleString()}` : "–";
    if (s.session_id) document.getElementById("session").textContent = s.session_id;
    document.getElementById("cost").textContent = s.cost_usd == null ? "–" : `$${s.cost_usd.toFixed(4)}`;
    showSessionCost(s, terminal);
    if (terminal) {
      const body = document.getElementById("outcome-body");
      body.replaceChildren();
      if (s.error) body.append(el("p", "error-text", s.error));
      if (s.result) body.append(el("pre", "result", s.result));
      document.getElementById("outcome").hidden = !(s.error || s.result);
    }
    tick();
  }

  // The session's total as rendered, plus this task's own cost once it ends if the page was rendered before that.
  function showSessionCost(s, terminal) {
    const total = document.getElementById("session-cost");
    if (!s.session_id) return;
    const own = terminal && total.dataset.includesTask !== "1" ? s.cost_usd || 0 : 0;
    total.textContent = `$${((parseFloat(total.dataset.total) || 0) + own).toFixed(4)}`;
    document.getElementById("session-cost-stat").hidden = false;
  }

  function tick() {
    if (state) document.getElementById("elapsed").textContent = Bridge.duration(state.started_at, state.finished_at);
  }

  function onMessage(message) {
    if (message.type === "event") {
      onEvent(message);
      if (message.kind !== "text_delta") anonymous += 1;
      lastSeq = message.seq;
    } else if (message.type === "state") {
      showState(message);
    } else if (message.type === "end") {
      return "end";
    }
    return null;
  }

  Bridge.follow(`/ws/tasks/${taskId}/`, () => lastSeq, onMessage, document.getElementById("live"));
  setInterval(tick, 1000);
})();
