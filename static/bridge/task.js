/* The task page: replays the transcript from seq 0 over /ws/tasks/<id>/, then follows it live. */
"use strict";

(function () {
  const root = document.getElementById("task");
  const taskId = root.dataset.taskId;
  const agentName = root.dataset.agentName;
  const acp = root.dataset.agent !== "claude"; // every other agent speaks ACP: it asks by title, cannot edit input
  const transcript = document.getElementById("transcript");
  const cards = document.getElementById("permissions");
  const messages = {}; // message_id -> {el, streamed, finals}
  const tools = {}; // tool_use id -> <details>
  const editedInputs = {}; // tool_use id -> the input a person allowed instead of the agent's
  const liveTokens = { input: 0, output: 0, seen: false }; // from usage events until the task's totals are known
  const resultTokens = { input: 0, output: 0, seen: false }; // from the agent's result, if it reported usage
  let openMessage = null; // text without a message id (ACP agents): streamed until its final `text` event
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
    const id = event.data.message_id;
    let msg = id ? messages[id] : openMessage;
    if (!msg) {
      msg = { el: add(el("div", "entry assistant"), event.seq), streamed: "", finals: [] };
      if (id) messages[id] = msg;
      else openMessage = msg;
    }
    if (isFinal) {
      msg.finals.push(event.data.text);
      msg.el.textContent = msg.finals.join("\n\n");
      if (!id) openMessage = null; // the next text is another message
    } else if (!msg.finals.length) {
      msg.streamed += event.data.text;
      msg.el.textContent = msg.streamed;
    }
  }

  // Plain lines of a one-shot agent's answer: one block, its lines kept apart.
  function outputLine(event) {
    const last = transcript.lastElementChild;
    if (last?.classList.contains("output")) {
      last.textContent += `\n${event.data.text}`;
      return last;
    }
    return add(el("div", "entry assistant output", event.data.text), event.seq);
  }

  // A resumed ACP session replays its history chunk by chunk: one block per speaker.
  function historyChunk(event) {
    const who = event.data.update === "user_message_chunk" ? "You" : agentName;
    let box = transcript.lastElementChild;
    if (!box?.classList.contains("history")) {
      box = el("details", "entry history");
      box.append(el("summary", "", "Earlier in this session"));
      add(box, event.seq);
    }
    let turn = box.lastElementChild;
    if (turn.dataset.who !== who) {
      turn = el("p", "history-turn");
      turn.dataset.who = who;
      turn.append(el("strong", "", `${who}: `), el("span", "", ""));
      box.append(turn);
    }
    turn.lastElementChild.textContent += event.data.text || "";
    return box;
  }

  // The little markdown agents put in tool output (bold, code, bullets, headings, fenced blocks), built as elements:
  // never innerHTML. Text that has none of it stays preformatted.
  const MARKDOWN = /\*\*|^#+ |^\s*[-*] |^```/m;

  function markdown(text, className) {
    const box = el("div", `${className} markdown`);
    let list = null;
    let fence = null;
    for (const raw of text.split("\n")) {
      if (raw.startsWith("```")) {
        fence = fence ? null : box.appendChild(el("pre", "", ""));
        continue;
      }
      if (fence) {
        fence.textContent += `${fence.textContent ? "\n" : ""}${raw}`;
        continue;
      }
      const bullet = /^\s*[-*] (.*)$/.exec(raw);
      const heading = /^#+ (.*)$/.exec(raw);
      if (bullet) {
        if (!list) box.append((list = el("ul")));
        list.append(inline(el("li"), bullet[1]));
        continue;
      }
      list = null;
      if (heading) box.append(inline(el("p", "heading"), heading[1]));
      else if (raw.trim()) box.append(inline(el("p"), raw));
    }
    return box;
  }

  function inline(node, text) {
    for (const part of text.split(/(\*\*[^*]+\*\*|`[^`]+`)/)) {
      if (part.startsWith("**") && part.endsWith("**") && part.length > 4) node.append(el("strong", "", part.slice(2, -2)));
      else if (part.startsWith("`") && part.endsWith("`") && part.length > 2) node.append(el("code", "", part.slice(1, -1)));
      else if (part) node.append(part);
    }
    return node;
  }

  function toolText(text, className) {
    return acp && MARKDOWN.test(text || "") ? markdown(text, className) : el("pre", className, text || "(no output)");
  }

  function toolUse(event) {
    const box = el("details", "entry tool");
    const summary = el("summary");
    summary.append(el("span", "tool-name", event.data.name), el("span", "muted", " tool call"));
    const input = event.data.input ?? event.data.text ?? "";
    box.append(summary, el("pre", "tool-input", pretty(input)));
    tools[event.data.id] = box;
    add(box, event.seq);
    if (editedInputs[event.data.id]) showEditedInput(box, editedInputs[event.data.id]);
  }

  // What ran is what the person allowed: the tool card shows the edited input, and says it was edited.
  function showEditedInput(box, input) {
    box.querySelector(".tool-input").textContent = pretty(input);
    if (!box.querySelector(".edited-note")) {
      box.querySelector("summary").append(el("span", "badge small edited-note", "input edited before it ran"));
    }
  }

  function toolResult(event) {
    const data = event.data;
    const box = tools[data.tool_use_id];
    const out = toolText(data.content, data.is_error ? "tool-output failed" : "tool-output");
    if (box) {
      box.append(out);
      box.classList.add(data.is_error ? "failed" : "ok");
      box.querySelector("summary").append(el("span", "badge small", data.is_error ? "error" : "result"));
    } else {
      add(out, event.seq);
    }
  }

  // Who or what ended a request, and why, from what Bridge recorded (status, decided_by, decided_via, message).
  function describeDecision(perm) {
    const parts = [perm.status + (perm.updated_input ? " (with edited input)" : "")];
    if (perm.status === "cancelled" && perm.decided_via === "agent") parts.push(`by ${agentName}`);
    else if (perm.status === "cancelled" && perm.decided_via === "supervisor") parts.push(`by ${perm.decided_by || "Bridge"}`);
    else if (perm.status !== "expired") parts.push(describeWho(perm));
    const text = parts.filter(Boolean).join(" ");
    return perm.message ? `${text} — ${perm.message}` : text;
  }

  function describeWho(perm) {
    const who = perm.decided_by ? `by ${perm.decided_by}` : "";
    const via = perm.decided_via ? ` via ${perm.decided_via}` : "";
    return `${who}${via}`.trim();
  }

  function permissionCard(perm) {
    let card = document.getElementById(`perm-${perm.request_id}`);
    if (!card) {
      card = document.getElementById("permission-card").content.firstElementChild.cloneNode(true);
      card.id = `perm-${perm.request_id}`;
      card.querySelector(".asks").textContent = acp ? `${agentName} asks: ` : "The agent asks to use ";
      card.querySelector(".tool").textContent = perm.tool_name;
      card.querySelector(".input").textContent = pretty(perm.input);
      card.querySelector(".edited").value = JSON.stringify(perm.input, null, 2);
      card.querySelector(".edit").hidden = acp; // ACP has no way to change a tool's input
      wireCard(card, perm);
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
      if (perm.rule_id && perm.decided_via === "policy") decision.append(" ", ruleLink(perm.rule_id, "See the rule"));
      if (perm.remembered?.length) showRemembered(card, perm.remembered);
      if (perm.updated_input && perm.tool_use_id) {
        editedInputs[perm.tool_use_id] = perm.updated_input;
        if (tools[perm.tool_use_id]) showEditedInput(tools[perm.tool_use_id], perm.updated_input);
      }
    } else if (state && terminalStatus(state.status)) {
      unreachable(card, state.status);
    }
    return card;
  }

  // A task that has ended has no agent left to tell: its open cards offer no buttons, and say why.
  function unreachable(card, status) {
    if (card.classList.contains("decided")) return;
    card.classList.add("decided", "unreachable");
    card.querySelector("form").hidden = true;
    const badge = card.querySelector(".state");
    badge.textContent = "unanswered";
    badge.className = "badge state perm-cancelled";
    const decision = card.querySelector(".decision");
    decision.hidden = false;
    decision.textContent = `No answer can reach the agent any more: the task has ended (${status}).`;
  }

  function terminalStatus(status) {
    return ["done", "failed", "cancelled", "timeout", "orphaned"].includes(status);
  }

  // The rules a remembered decision made, each a way to the Rules page.
  function showRemembered(card, made) {
    const note = card.querySelector(".remembered");
    note.replaceChildren(made.length === 1 ? "Remembered as the rule " : "Remembered as the rules ");
    made.forEach((rule, index) => {
      if (index) note.append(", ");
      note.append(el("code", "", rule.rule), ` (${rule.decision}) `, ruleLink(rule.id, `rule ${rule.id}`));
    });
    note.hidden = false;
  }

  function ruleLink(ruleId, text) {
    const link = el("a", "rule-link", text);
    link.href = `${root.dataset.rulesUrl}#rule-${ruleId}`;
    return link;
  }

  const REMEMBERED_FOR = { task: "this task", session: "this session", project: "this project", always: "everywhere" };

  // One click on a rule the agent offered: its decision, remembered as that very rule for the scope it names.
  function suggestionButton(suggestion, send, message) {
    const deny = suggestion.decision === "deny";
    const label = `${deny ? "Deny" : "Allow"} always: ${suggestion.rule} — ${REMEMBERED_FOR[suggestion.remember]}`;
    const button = el("button", deny ? "danger suggestion" : "suggestion", label);
    button.type = "button";
    button.onclick = () => send({
      behavior: suggestion.decision, remember: suggestion.remember, rule: suggestion.rule,
      ...(deny ? { message: message.value } : {}),
    });
    return button;
  }

  function wireCard(card, perm) {
    const requestId = perm.request_id;
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
    const scope = card.querySelector(".remember-scope");
    const message = card.querySelector(".message");
    const decide = (fields) => send(scope.value ? { ...fields, remember: scope.value } : fields);
    card.querySelector(".allow").onclick = () => decide({ behavior: "allow" });
    card.querySelector(".deny").onclick = () => decide({ behavior: "deny", message: message.value });
    card.querySelector(".allow-edited").onclick = () =>
      decide({ behavior: "allow", updated_input: card.querySelector(".edited").value });
    const suggestions = card.querySelector(".suggestions");
    suggestions.append(...(perm.suggested_rules || []).map((s) => suggestionButton(s, send, message)));
    suggestions.hidden = !suggestions.childElementCount;
  }

  // Events that draw nothing, or only extend what is streaming: they do not end an ACP agent's streamed message.
  const QUIET = new Set(["text_delta", "text", "thinking", "thinking_delta", "context_usage", "usage", "user"]);

  function onEvent(event) {
    const data = event.data;
    if (!QUIET.has(event.kind)) openMessage = null;
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
      case "output": return outputLine(event);
      case "history": return historyChunk(event);
      case "tool_update": {
        const box = tools[data.tool_use_id];
        if (box && data.content) box.append(toolText(data.content, "tool-output"));
        return box;
      }
      case "plan":
        return line(event.seq, "system", `Plan: ${(data.entries || []).map((e) => e.content).join(" · ")}`);
      case "tool_use": return toolUse(event);
      case "tool_result": return toolResult(event);
      case "permission_request": // an ACP agent names its question ("Approve edit: a.txt"), Claude the tool
        permissionCard(data);
        return line(event.seq, "system", acp ? `${agentName} asked: ${data.tool_name}` : `Asked to use ${data.tool_name}`);
      case "permission_decision": {
        permissionCard(data);
        const what = acp ? `"${data.tool_name}"` : `Permission for ${data.tool_name}`;
        return line(event.seq, `system perm-${data.status}`, `${what}: ${describeDecision(data)}`);
      }
      case "api_retry":
        return line(event.seq, "warning",
          `API error, retrying (attempt ${data.attempt ?? "?"} of ${data.max_retries ?? "?"}` +
          `${data.retry_delay_ms ? `, in ${(data.retry_delay_ms / 1000).toFixed(1)} s` : ""}): ` +
          `${data.error_status ? `HTTP ${data.error_status} ` : ""}${pretty(data.error ?? "")}`);
      case "status":
        return line(event.seq, `system status-line status-${data.status}`,
          `Status: ${data.status}${data.reason ? ` — ${data.reason}` : ""}${data.error ? ` — ${data.error}` : ""}`);
      case "agent_info": {
        const agent = data.agent || {};
        const version = agent.version ? ` ${agent.version}` : "";
        const protocol = data.protocolVersion ? ` (Agent Client Protocol ${data.protocolVersion})` : "";
        return line(event.seq, "system", `${agent.title || agent.name || agentName}${version} is ready${protocol}`);
      }
      case "init": {
        const how = data.resumed ? "resumed" : "started";
        const details = [data.model && `model ${data.model}`, data.mode && `mode ${data.mode}`].filter(Boolean);
        return line(event.seq, "system",
          `Agent session ${data.session_id} ${how}${details.length ? ` (${details.join(", ")})` : ""}`);
      }
      case "ignored_options":
        return line(event.seq, "warning",
          `Not passed to ${agentName}: ${Object.keys(data.options || {}).join(", ")} — ${data.reason}`);
      case "spawned": // its snapshot was recorded just before: what it changes is pending from now on
        if (event.seq > renderedSeq) loadChanges();
        return line(event.seq, "system", `Process ${data.pid} started`);
      case "imported": return line(event.seq, "system imported", importedText(data));
      case "cancel_requested": return line(event.seq, "warning", `Cancel requested by ${data.by || "someone"}: ${data.reason}`);
      case "result": return resultLine(event);
      case "changes": return changesLine(event);
      case "control_response":
        if (data.subtype !== "error") return null; // the agent acknowledging Bridge's interrupt
        return line(event.seq, "error", `${agentName} refused a request from Bridge: ${data.error || "no reason given"}`);
      case "control_request":
        return line(event.seq, "system",
          `${agentName} asked for "${data.request?.subtype ?? "?"}", which Bridge does not handle; it was told so`);
      case "acp_response": return null; // an accepted setting (model, mode): nothing to show
      case "stderr": case "stdout": case "truncated": case "signal": case "stopping": case "error":
        return line(event.seq, event.kind === "stdout" ? "system" : "error",
          `${event.kind}: ${pretty(data.text ?? data.message ?? data.reason ?? data)}`);
      case "context_usage": return null;
      case "mode": return line(event.seq, "system muted", `${agentName}: ${data.text}`); // a mode it switched to
      case "system":
        if (data.subtype === "status") return null; // the CLI's own spinner states ("requesting")
        return line(event.seq, "system", `${data.subtype || "system"}${data.status ? `: ${data.status}` : ""}`);
      case "usage":
        liveTokens.input += data.input_tokens || 0;
        liveTokens.output += data.output_tokens || 0;
        liveTokens.seen = true;
        return null;
      case "user": return null;
      default: return line(event.seq, "system muted", `${event.kind}: ${pretty(data)}`);
    }
  }

  // Where an imported task came from (`manage.py import_legacy`): the older tool, its id there, the file it was read
  // from, and what the import noted (a cut log, a time taken from the file).
  function importedText(data) {
    const when = data.imported_at ? ` on ${new Date(data.imported_at).toLocaleString()}` : "";
    const session = data.session_id ? `; its agent session ${data.session_id}` : "";
    const notes = (data.notes || []).length ? ` — ${data.notes.join("; ")}` : "";
    const file = data.file ? `, read from ${data.file}` : "";
    return `Imported from ${data.from || "an older tool"} (old id ${data.legacy_id ?? "?"})${file}${when}${session}${notes}`;
  }

  // How the agent's turn ended, in words: Claude reports a subtype and is_error, ACP agents a stopReason.
  const STOP_WORDS = {
    success: "finished", end_turn: "finished", cancelled: "cancelled", max_tokens: "stopped at the token limit",
    max_turn_requests: "stopped at the turn limit", error_max_turns: "stopped at the turn limit",
    refusal: "refused", error_during_execution: "stopped during execution",
    error_max_budget_usd: "stopped at the budget limit",
  };

  function resultLine(event) {
    const data = event.data;
    const reason = data.subtype ?? data.stopReason;
    let what = STOP_WORDS[reason] || (reason ? `ended (${reason})` : "ended");
    if (data.is_error && what === "finished") what = "ended with an error";
    const turns = data.num_turns == null ? "" : ` after ${data.num_turns} turn${data.num_turns === 1 ? "" : "s"}`;
    const seconds = data.duration_ms == null ? "" : ` in ${(data.duration_ms / 1000).toFixed(1)} s`;
    const usage = data.usage || {};
    const input = usage.input_tokens ?? usage.inputTokens;
    const output = usage.output_tokens ?? usage.outputTokens;
    if (input != null || output != null) {
      Object.assign(resultTokens, { input: input || 0, output: output || 0, seen: true });
    }
    const failed = data.is_error || !["finished", "cancelled"].includes(what);
    return line(event.seq, failed ? "error" : "system", `The agent's turn ${what}${turns}${seconds}`);
  }

  function tokenText(s) {
    const own = s.input_tokens != null || s.output_tokens != null;
    const tokens = own ? { input: s.input_tokens || 0, output: s.output_tokens || 0, seen: true }
      : resultTokens.seen ? resultTokens : liveTokens;
    if (tokens.seen) return `${tokens.input.toLocaleString()} / ${tokens.output.toLocaleString()}`;
    return s.cost_usd == null ? "–" : "not reported";
  }

  // As the dashboard and the usage page say it (templates/jobs/_cost.html): a run that ended without reporting a cost
  // (Hermes Agent reports none) is "not reported", not free.
  function costText(s, terminal) {
    if (s.cost_usd != null) return `$${s.cost_usd.toFixed(4)}`;
    return terminal && s.started_at ? "not reported" : "–";
  }

  function showState(s) {
    state = s;
    const status = document.getElementById("status");
    status.textContent = s.cancel_requested && s.status === "running" ? "cancelling" : s.status;
    status.className = `badge big status-${s.status}`;
    const terminal = terminalStatus(s.status);
    document.getElementById("cancel-form").hidden = terminal;
    document.getElementById("follow-up").hidden = !(terminal && s.has_session);
    document.getElementById("turns").textContent = s.num_turns ?? "–";
    document.getElementById("tokens").textContent = tokenText(s);
    if (s.session_id) document.getElementById("session").textContent = s.session_id;
    document.getElementById("cost").textContent = costText(s, terminal);
    showSessionCost(s, terminal);
    showWhere(s);
    if (s.status !== "queued") {
      for (const note of document.querySelectorAll(".message.transient")) note.remove(); // "Task queued." is past
    }
    if (terminal) {
      for (const card of cards.querySelectorAll(".permission")) unreachable(card, s.status);
      const body = document.getElementById("outcome-body");
      body.replaceChildren();
      if (s.error) body.append(el("p", "error-text", s.error));
      if (s.result) body.append(el("pre", "result", s.result));
      document.getElementById("outcome").hidden = !(s.error || s.result);
    }
    tick();
  }

  // Which supervisor runs the task, or why a queued one waits (no live supervisor serves its directory or target).
  function showWhere(s) {
    const worker = document.getElementById("worker");
    if (s.worker) {
      worker.replaceChildren(s.worker.name, " ", el("span", "muted", `on ${s.worker.host}`));
    }
    const wait = document.getElementById("wait-reason");
    wait.hidden = !s.wait_reason;
    wait.querySelector("span").textContent = s.wait_reason || "";
  }

  // The session's total as rendered, plus this task's own figure once it ends if the page was rendered before that:
  // its cost, or one more run that reported none.
  function showSessionCost(s, terminal) {
    const total = document.getElementById("session-cost");
    const stat = document.getElementById("session-cost-stat");
    if (!s.session_id) return;
    let cost = total.dataset.total ? parseFloat(total.dataset.total) : null;
    let unreported = parseInt(stat.dataset.unreported, 10) || 0;
    if (terminal && total.dataset.includesTask !== "1") {
      if (s.cost_usd != null) cost = (cost || 0) + s.cost_usd;
      else if (s.started_at) unreported += 1;
    }
    total.replaceChildren(...sumNodes(cost, unreported));
    stat.hidden = false;
  }

  // A sum as templates/jobs/_cost.html renders it: what was reported, and how many runs reported no cost.
  function sumNodes(cost, unreported) {
    const runs = `${unreported} finished task${unreported === 1 ? "" : "s"}`;
    if (cost != null && unreported) {
      const note = el("span", "muted unreported", `(${unreported} not reported)`);
      note.title = `${runs} reported no cost (Hermes Agent reports none)`;
      return [`$${cost.toFixed(4)} `, note];
    }
    if (cost != null) return [`$${cost.toFixed(4)}`];
    if (!unreported) return ["–"];
    const note = el("span", "muted unreported", "not reported");
    note.title = "no cost was reported (Hermes Agent reports none)";
    return [note];
  }

  function tick() {
    if (state) document.getElementById("elapsed").textContent = Bridge.duration(state.started_at, state.finished_at);
  }

  // --- The Changes tab: what the task changed in its directory, from GET /v1/task/changes -------------------------
  // Loaded with the page, and again when an event newer than the page moves the record on: `spawned` (the snapshot is
  // taken: pending) and `changes` (recorded, or unavailable). The patch is drawn by diff2html
  // (static/vendor/diff2html/) once its tab is shown; the file list is built as elements, as everything here: a file
  // name is the agent's text, never markup.

  const tabs = { transcript: document.getElementById("tab-transcript"), changes: document.getElementById("tab-changes") };
  const renderedSeq = parseInt(root.dataset.renderedSeq, 10) || 0; // events up to it were there when the page was
  let shownTab = "transcript";
  let changes = null; // the latest answer
  let changesAsked = 0; // the latest request: an older answer that arrives after it is dropped
  let diffDrawn = null; // the answer whose patch #changes-diff shows

  const NOT_RECORDED = { none: "Nothing recorded", pending: "Not recorded yet", unavailable: "Could not be recorded" };

  function selectTab(name) {
    shownTab = name;
    for (const [key, tab] of Object.entries(tabs)) {
      tab.setAttribute("aria-selected", String(key === name));
      tab.tabIndex = key === name ? 0 : -1;
      document.getElementById(tab.getAttribute("aria-controls")).hidden = key !== name;
    }
    history.replaceState(null, "", name === "changes" ? "#changes" : location.pathname + location.search);
    if (name === "changes") drawDiff();
  }

  async function loadChanges() {
    const asked = ++changesAsked;
    let answer;
    try {
      const response = await fetch(root.dataset.changesUrl, {
        credentials: "same-origin", headers: { Accept: "application/json" },
      });
      answer = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error(answer.error || `HTTP ${response.status}`);
    } catch (problem) {
      if (asked === changesAsked) showChangesProblem(`The changes could not be loaded: ${problem.message}`);
      return;
    }
    if (asked !== changesAsked) return;
    changes = answer;
    showChanges();
  }

  function showChangesProblem(text) {
    const reason = document.getElementById("changes-reason");
    document.getElementById("changes-loading").hidden = true;
    reason.textContent = text;
    reason.className = "message error";
    reason.hidden = false;
  }

  function showChanges() {
    const recorded = changes.state === "recorded";
    document.getElementById("changes-loading").hidden = true;
    const reason = document.getElementById("changes-reason");
    reason.hidden = recorded;
    reason.className = "message waiting";
    reason.dataset.state = changes.state;
    reason.textContent = recorded ? "" : `${NOT_RECORDED[changes.state] || changes.state}: ${changes.reason}`;
    const summary = document.getElementById("changes-summary");
    summary.hidden = !recorded;
    summary.replaceChildren(...summaryNodes(changes));
    const truncated = document.getElementById("changes-truncated");
    truncated.hidden = !changes.truncated;
    truncated.textContent = `Not everything is shown: ${changes.left_out || "a limit was reached"}`;
    document.getElementById("changes-files").replaceChildren(...changes.files.map(fileItem));
    const count = document.getElementById("changes-count");
    count.hidden = !recorded;
    count.textContent = changes.files_changed;
    count.title = `${plural(changes.files_changed, "file")} changed`;
    offerDownload();
    if (shownTab === "changes") drawDiff();
  }

  function plural(n, word) {
    return `${n} ${word}${n === 1 ? "" : "s"}`;
  }

  function summaryNodes(c) {
    if (!c.files_changed) return ["No file was changed."];
    return [`${plural(c.files_changed, "file")} changed: `, ...lineCounts(c.lines_added, c.lines_removed)];
  }

  function lineCounts(added, removed) {
    return [el("span", "lines-added", `+${added}`), " ", el("span", "lines-removed", `−${removed}`)];
  }

  function fileItem(file) {
    const item = el("li", `change change-${file.status}`);
    const moved = file.status === "renamed" && file.old_path;
    item.append(
      el("span", "badge small change-status", file.status),
      el("code", "change-path", moved ? `${file.old_path} → ${file.path}` : file.path),
    );
    const lines = el("span", "change-lines");
    if (file.binary) lines.append(el("span", "badge small change-binary", "binary"));
    else lines.append(...lineCounts(file.added, file.removed));
    item.append(lines);
    return item;
  }

  // The patch is drawn a batch of files at a time: diff2html takes seconds over a few MiB (a 3.4 MiB patch: ~7 s in
  // headless Chromium, a batch ~0.5 s), and the page would stall that long. One file's lines are capped too.
  const DRAWN_AT_ONCE = 256 * 1024; // characters of patch per batch (at least one file)
  const DIFF2HTML = {
    drawFileList: false, matching: "lines", outputFormat: "line-by-line", diffMaxChanges: 5000,
    diffMaxLineLength: 10000, diffTooBigMessage: () => "Too large to draw here: download the patch to read it.",
  };
  let undrawn = []; // the patch of each file not drawn yet

  function drawDiff() {
    if (!changes || diffDrawn === changes) return;
    diffDrawn = changes;
    undrawn = unquoteNames(changes.patch).split(/^(?=diff --git )/m).filter(Boolean);
    document.getElementById("changes-diff").replaceChildren();
    drawMore();
  }

  function drawMore() {
    let batch = "";
    while (undrawn.length && (!batch || batch.length + undrawn[0].length <= DRAWN_AT_ONCE)) batch += undrawn.shift();
    if (batch) {
      const part = el("div", "changes-part");
      part.innerHTML = Diff2Html.html(batch, DIFF2HTML); // diff2html escapes every name and line it draws
      document.getElementById("changes-diff").append(part);
    }
    const more = document.getElementById("changes-more");
    more.hidden = !undrawn.length;
    more.textContent = `Draw ${plural(undrawn.length, "more file")}`;
  }

  // A patch's header writes a name that holds a quote, a backslash or a control character in C quotes, as git does
  // ("say \"hi\".txt"; bytes past ASCII too, as octal, where core.quotePath is on), and diff2html shows it as written.
  // In each file's header lines (from `diff --git` to its first @@) such names are turned back into text, all but
  // their control characters: those stay escaped, so that no name can break a header line in two.
  function unquoteNames(patch) {
    let header = false;
    return patch.split("\n").map((text) => {
      if (text.startsWith("diff --git ")) header = true;
      else if (text.startsWith("@@")) header = false;
      return header ? text.replace(/"((?:[^"\\]|\\.)*)"/g, (_, quoted) => unquoted(quoted)) : text;
    }).join("\n");
  }

  function unquoted(quoted) {
    const bytes = [];
    const utf8 = (text) => bytes.push(...new TextEncoder().encode(text));
    for (const [escape, octal, character, literal] of quoted.matchAll(/\\([0-7]{3})|\\(.)|([^\\]+)/gs)) {
      if (literal) utf8(literal);
      else if (octal && parseInt(octal, 8) >= 0x80) bytes.push(parseInt(octal, 8)); // a byte of a UTF-8 character
      else if (character === '"' || character === "\\") utf8(character);
      else utf8(escape); // a control character: left as its escape
    }
    return new TextDecoder().decode(new Uint8Array(bytes));
  }

  // The patch as a file, to read whole or `git apply`; the previous answer's is let go.
  function offerDownload() {
    const link = document.getElementById("changes-download");
    if (link.href) URL.revokeObjectURL(link.href);
    link.hidden = !changes.patch;
    if (changes.patch) link.href = URL.createObjectURL(new Blob([changes.patch], { type: "text/x-diff" }));
    else link.removeAttribute("href");
  }

  // The transcript's line for the record, with a way to it; one newer than the page means the tab's answer is old.
  function changesLine(event) {
    if (event.seq > renderedSeq) loadChanges();
    const data = event.data;
    const recorded = data.state === "recorded";
    const text = recorded
      ? `Changed ${plural(data.files_changed, "file")} in its directory (+${data.lines_added} −${data.lines_removed})`
      : `What it changed could not be recorded: ${data.reason}`;
    const entry = line(event.seq, recorded ? "system changes-line" : "warning changes-line", text);
    const show = el("button", "show-changes", "Show the changes");
    show.type = "button";
    show.onclick = () => selectTab("changes");
    entry.append(" ", show);
    return entry;
  }

  for (const [name, tab] of Object.entries(tabs)) tab.onclick = () => selectTab(name);
  document.getElementById("changes-more").onclick = drawMore;
  tabs.changes.parentElement.addEventListener("keydown", (event) => {
    if (event.key !== "ArrowLeft" && event.key !== "ArrowRight") return;
    const next = shownTab === "changes" ? "transcript" : "changes";
    selectTab(next);
    tabs[next].focus();
  });
  if (location.hash === "#changes") selectTab("changes");
  loadChanges();

  function onMessage(message) {
    if (message.type === "event") {
      onEvent(message);
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
