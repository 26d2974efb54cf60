// The trace viewer: lists traces, shows one as a tree (main path, compression
// summaries with their originals, side branches, messages left off the path
// by rewinds, goals), follows its events live, and posts, rewinds, compresses.
// Every piece of trace text goes through textContent or agentfsMarkdown.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { trace: null, data: null, follow: null, refreshTimer: null,
    tail: null, older: [] };

  // --- the API -----------------------------------------------------------------
  // The browser sends the session cookie the server set when the person opened
  // the address `agentfs serve` printed; no script here ever sees the token.

  async function api(method, path, body) {
    const headers = {};
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await response.json(); } catch (e) { data = { error: response.statusText }; }
    if (response.status === 401) {
      data.error = "this browser has no session of this server";
      data.hint = "open the address agentfs serve printed when it started (it holds the token)";
    }
    if (!response.ok) {
      const error = new Error(data.error + (data.hint ? " (" + data.hint + ")" : ""));
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function notify(text, ok) {
    const notice = $("notice");
    notice.textContent = text;
    notice.className = ok ? "notice ok" : "notice";
    notice.hidden = !text;
  }

  async function act(work, done) {
    try {
      const result = await work();
      if (done) notify(done(result), true);
      await refresh();
      return result;
    } catch (error) {
      notify(error.message, false);
      return null;
    }
  }

  // --- the trace list ------------------------------------------------------------

  async function loadTraces() {
    const data = await api("GET", "/api/traces");
    $("workspace").textContent = data.workspace;
    const nav = $("traces");
    nav.replaceChildren();
    if (!data.traces.length) {
      const p = document.createElement("p");
      p.className = "muted";
      p.textContent = "No traces yet: agentfs new TRACE -m '...'";
      nav.append(p);
    }
    for (const row of data.traces) {
      const a = document.createElement("a");
      a.href = "#trace=" + encodeURIComponent(row.trace);
      a.dataset.trace = row.trace;
      if (row.trace === state.trace) a.className = "current";
      a.textContent = row.trace + " ";
      const note = document.createElement("span");
      note.className = "state";
      note.textContent = "#" + row.head + (row.running ? " running" : "")
        + (row.pending_inbox.length ? " · " + row.pending_inbox.length + " waiting" : "")
        + (row.approval ? " · " + row.approval + " waits for approval" : "")
        + (row.usage && row.usage.calls ? " · " + row.usage.cost.text : "");
      if (row.usage) note.title = row.usage.text + (row.updated ? " · last step " + row.updated : "");
      a.append(note);
      nav.append(a);
    }
  }

  function chosenTrace() {
    return new URLSearchParams(location.hash.slice(1)).get("trace");
  }

  // --- one trace -------------------------------------------------------------------

  // The tree is read a page at a time, newest first (GET .../tree?limit=&before=): the
  // tail on every refresh, older pages when the person asks for them. state.older holds
  // those, newest first; each remembers the `before` it was read with, and a page's
  // `older` is the `before` of the page before it.
  const PAGE = 100;
  const MAX_GAP_PAGES = 20;

  function treePath(before) {
    return "/api/traces/" + encodeURIComponent(state.trace) + "/tree?limit=" + PAGE
      + (before === null || before === undefined ? "" : "&before=" + before);
  }

  async function refresh() {
    if (!state.trace) return;
    const trace = state.trace;
    const tail = await api("GET", treePath(null));
    if (trace !== state.trace) return;
    if (!state.tail || state.tail.trace !== trace) state.older = [];
    state.tail = tail;
    await joinOlder(trace);
    state.data = merged();
    renderTrace(state.data);
    loadTraces().catch(() => {});
  }

  // Keep the older pages read so far when the new tail still leads to them: read the
  // pages between (messages added since), or drop them if the path changed (a rewind).
  async function joinOlder(trace) {
    if (!state.older.length) return;
    const joined = state.older[0].before;
    const between = [];
    let cursor = state.tail.older;
    while (cursor !== null && cursor > joined && between.length < MAX_GAP_PAGES) {
      const page = await api("GET", treePath(cursor));
      if (trace !== state.trace) return;
      page.before = cursor;
      if (page.older === null || page.older < joined) trimTo(page, joined);
      between.unshift(page);
      cursor = page.older;
    }
    state.older = cursor === joined ? [...between, ...state.older] : [];
  }

  // Keep of a page only what comes from main-path message `first` on (the pages before
  // hold the rest), if the page's path passes through it.
  function trimTo(page, first) {
    if (!page.path.includes(first)) return;
    page.path = page.path.filter((seq) => seq >= first);
    page.messages = page.messages.filter((m) => m.sequence >= first);
    const held = new Set(page.messages.map((m) => m.sequence));
    page.branches = page.branches.filter((b) => held.has(b.from_sequence));
    page.folds = (page.folds || []).filter((f) => f.first >= first);
    page.older = first;
  }

  // The tail and the older pages read, as one tree's data.
  function merged() {
    if (!state.older.length) return state.tail;
    const pages = [...state.older].reverse().concat([state.tail]);
    const bySeq = new Map();
    const branches = new Map();
    for (const page of pages) {
      for (const m of page.messages) bySeq.set(m.sequence, m);
      for (const b of page.branches) branches.set(b.name, b);
    }
    return Object.assign({}, state.tail, {
      path: pages.flatMap((page) => page.path),
      messages: [...bySeq.values()].sort((a, b) => a.sequence - b.sequence),
      branches: [...branches.values()],
      folds: pages.flatMap((page) => page.folds || []),
      older: pages[0].older,
    });
  }

  async function loadOlder() {
    const trace = state.trace;
    const last = state.older.length ? state.older[state.older.length - 1] : state.tail;
    if (!last || last.older === null) return;
    const page = await api("GET", treePath(last.older));
    if (trace !== state.trace) return;
    page.before = last.older;
    state.older.push(page);
    state.data = merged();
    renderTrace(state.data);
    const next = document.querySelector("#tree > button.show-older")
      || document.querySelector("#tree article button");
    if (next) next.focus();
  }

  function olderButton(data) {
    return actionButton("Show older messages", "show-older",
      "Read the " + PAGE + " messages of the main path before #" + data.older,
      () => loadOlder().catch((e) => notify(e.message, false)));
  }

  function refreshSoon() {
    clearTimeout(state.refreshTimer);
    state.refreshTimer = setTimeout(() => refresh().catch((e) => notify(e.message)), 150);
  }

  function renderTrace(data) {
    $("empty").hidden = true;
    $("trace").hidden = false;
    $("trace-title").textContent = data.trace;
    const badge = $("trace-state");
    badge.textContent = (data.running ? "running" : "idle") + " · head #" + data.head;
    badge.className = data.running ? "badge running" : "badge";
    $("trace-usage").textContent = data.usage && data.usage.calls ? data.usage.text : "";
    renderGoals(data.goals);
    $("tree").replaceChildren(buildTree(data));
    renderApproval(data.approval);
  }

  function renderApproval(approval) {
    const waits = Boolean(approval && approval.tool && !approval.answer);
    $("approval").hidden = !waits;
    if (!waits) return;
    $("approval-tool").textContent = approval.tool;
    $("approval-input").textContent = JSON.stringify(approval.input, null, 2);
  }

  function renderGoals(goals) {
    const box = $("goal-tree");
    box.replaceChildren();
    if (!goals.goals.length) {
      box.textContent = "No goals yet.";
      return;
    }
    const list = (items) => {
      const ul = document.createElement("ul");
      for (const goal of items) {
        const li = document.createElement("li");
        const mark = goal.status === "done" ? "[x] " : goal.status === "abandoned" ? "[-] " : "[ ] ";
        li.textContent = mark + goal.id + " " + goal.title;
        if (goal.status !== "open") li.className = "goal-done";
        if (goal.id === goals.focus) li.className = "goal-focus";
        if (goal.summary) {
          const s = document.createElement("div");
          s.className = "muted";
          s.textContent = goal.summary;
          li.append(s);
        }
        if (goal.children.length) li.append(list(goal.children));
        ul.append(li);
      }
      return ul;
    };
    box.append(list(goals.goals));
  }

  // --- the tree ----------------------------------------------------------------------

  function buildTree(data) {
    const bySeq = new Map(data.messages.map((m) => [m.sequence, m]));
    const children = new Map();
    for (const m of data.messages) {
      if (!children.has(m.parent)) children.set(m.parent, []);
      children.get(m.parent).push(m.sequence);
    }
    const branchesFrom = new Map();
    for (const b of data.branches) {
      if (!branchesFrom.has(b.from_sequence)) branchesFrom.set(b.from_sequence, []);
      branchesFrom.get(b.from_sequence).push(b);
    }
    const onPath = new Set(data.path);
    const callNames = new Map();
    for (const m of [...data.messages, ...data.branches.flatMap((b) => b.messages)]) {
      for (const c of m.tool_calls) callNames.set(c.id, c.name);
    }
    const ctx = { data, bySeq, children, branchesFrom, onPath, callNames };
    const root = document.createDocumentFragment();
    if (data.older !== null && data.older !== undefined) root.append(olderButton(data));
    for (const fold of data.folds || []) if (fold.after === null) root.append(foldBox(ctx, fold));
    data.path.forEach((seq, i) => {
      root.append(card(ctx, bySeq.get(seq)));
      attachments(ctx, seq, data.path[i + 1], root);
      for (const fold of data.folds || []) {
        if (fold.after === seq && !summaryFold(ctx, fold)) root.append(foldBox(ctx, fold));
      }
    });
    const top = (children.get(null) || []).filter((s) => !onPath.has(s));
    for (const seq of top) root.append(fork(ctx, seq));
    return root;
  }

  function subtreeSize(ctx, seq) {
    let size = 0;
    const stack = [seq];
    while (stack.length) {
      const s = stack.pop();
      size += 1;
      stack.push(...(ctx.children.get(s) || []));
    }
    return size;
  }

  // What hangs beside message `seq` besides `next`: side branches that continued it,
  // and messages left off the path below it (originals go into their summary's card).
  function attachments(ctx, seq, next, container) {
    for (const branch of ctx.branchesFrom.get(seq) || []) container.append(branchBox(ctx, branch));
    for (const child of ctx.children.get(seq) || []) {
      if (child === next || ctx.bySeq.get(child).replaced_by !== null) continue;
      container.append(fork(ctx, child));
    }
  }

  // Messages from `seq` down: the longest line of the same kind (the originals of one
  // summary, or messages off the path) first, other lines folded beside it.
  function chain(ctx, seq, container) {
    const kind = ctx.bySeq.get(seq).replaced_by;
    let current = seq;
    while (current !== undefined) {
      container.append(card(ctx, ctx.bySeq.get(current)));
      const kids = (ctx.children.get(current) || []).filter(
        (k) => ctx.bySeq.get(k).replaced_by === kind && !ctx.onPath.has(k));
      let next;
      for (const k of kids) if (next === undefined || subtreeSize(ctx, k) > subtreeSize(ctx, next)) next = k;
      attachments(ctx, current, next, container);
      current = next;
    }
  }

  // Folds the person opened stay open when a live update draws the tree again.
  const openFolds = new Set();

  function folded(cls, title, fill) {
    const details = document.createElement("details");
    details.className = cls;
    const summary = document.createElement("summary");
    summary.textContent = title;
    const inner = document.createElement("div");
    details.append(summary, inner);
    const key = state.trace + "\u0000" + cls + "\u0000" + title;
    let filled = false;
    details.addEventListener("toggle", () => {
      if (details.open) openFolds.add(key); else openFolds.delete(key);
      if (details.open && !filled) { filled = true; fill(inner); }
    });
    if (openFolds.has(key)) { filled = true; fill(inner); details.open = true; }
    return details;
  }

  function fork(ctx, seq) {
    const n = subtreeSize(ctx, seq);
    const first = ctx.bySeq.get(seq);
    const why = first.synthetic === "summary" ? "a summary no longer on the path (rewound)"
      : n + " message" + (n > 1 ? "s" : "") + " left off the path (rewound or edited)";
    return folded("fork", "#" + seq + "…: " + why, (inner) => chain(ctx, seq, inner));
  }

  function branchBox(ctx, branch) {
    const outcome = branch.summary !== null ? " → summary #" + branch.summary : "";
    const title = branch.type + " side branch " + branch.name + " ("
      + branch.messages.length + " messages)" + outcome;
    return folded("branch branch-" + branch.type, title, (inner) => {
      for (const m of branch.messages) inner.append(card(ctx, m, true));
    });
  }

  function card(ctx, m, onBranch) {
    const article = document.createElement("article");
    const classes = ["msg", "role-" + m.role];
    if (!m.on_path && !onBranch) classes.push("off-path");
    if (m.synthetic === "summary") classes.push("summary");
    if (m.sequence === ctx.data.head && !onBranch) classes.push("head");
    article.className = classes.join(" ");
    article.id = (onBranch ? "b-" : "m-") + m.sequence;
    article.dataset.sequence = m.sequence;
    const header = document.createElement("header");
    const label = document.createElement("span");
    let text = "#" + m.sequence + " " + m.role;
    if (m.synthetic) text += " (" + m.synthetic + ")";
    if (m.model) text += " · " + m.model;
    if (m.goal_id) text += " · goal " + m.goal_id;
    if (!m.on_path && !onBranch) text += " · off the path";
    label.textContent = text;
    header.append(label);
    if (m.usage) {
      const used = document.createElement("span");
      used.className = "usage muted";
      used.textContent = m.usage.text;
      header.append(used);
    }
    if (!onBranch && m.sequence !== ctx.data.head) {
      header.append(actionButton("Rewind here", "rewind",
        "Make #" + m.sequence + " the head (later messages stay, off the path)",
        () => rewindTo(m.sequence, false)));
      header.append(actionButton("Rewind with files", "rewind-files",
        "Make #" + m.sequence + " the head and put back the workspace files the agent "
        + "changed after it (refused if you changed them since)",
        () => rewindTo(m.sequence, true)));
    }
    if (!onBranch) {
      header.append(actionButton("Fork here", "fork",
        "Start a new trace from the main path up to #" + m.sequence + " (this one stays)",
        () => forkAt(m.sequence)));
    }
    article.append(header);
    if (m.role === "tool") {
      const name = ctx.callNames.get(m.tool_call_id) || "tool";
      const details = document.createElement("details");
      details.className = "result" + (m.is_error ? " error" : "");
      const summary = document.createElement("summary");
      summary.textContent = "result of " + name + (m.is_error ? " (error)" : "")
        + " · " + m.text.split("\n").length + " lines";
      const pre = document.createElement("pre");
      pre.className = "data";
      pre.textContent = m.text;
      details.append(summary, pre);
      article.append(details);
      if (m.files_changed.length && !onBranch) {
        article.append(folded("files", "Files changed: " + m.files_changed.join(", "),
          (inner) => showDiff(m.sequence, inner)));
      }
    } else if (m.role === "system") {
      article.append(folded("result", "system prompt", (inner) => {
        const body = document.createElement("div");
        body.className = "body";
        body.append(window.agentfsMarkdown.render(m.text));
        inner.append(body);
      }));
    } else if (m.text) {
      const body = document.createElement("div");
      body.className = "body";
      body.append(window.agentfsMarkdown.render(m.text));
      article.append(body);
    }
    for (const call of m.tool_calls) {
      const details = document.createElement("details");
      details.className = "call";
      const summary = document.createElement("summary");
      const args = JSON.stringify(call.input);
      summary.textContent = "→ " + call.name + "(" + (args.length > 80 ? args.slice(0, 77) + "…" : args) + ")"
        + (call.synthetic ? " [" + call.synthetic + "]" : "");
      const pre = document.createElement("pre");
      pre.className = "data";
      pre.textContent = JSON.stringify(call.input, null, 2);
      details.append(summary, pre);
      article.append(details);
    }
    if (m.synthetic === "summary" && !onBranch) {
      const originals = (ctx.children.get(m.parent) || []).filter(
        (s) => s !== m.sequence && ctx.bySeq.get(s).replaced_by === m.sequence);
      const count = ctx.data.messages.filter((x) => x.replaced_by === m.sequence).length;
      const fold = (ctx.data.folds || []).find((f) => f.before === m.sequence);
      if (fold && m.on_path) {
        article.append(foldBox(ctx, fold, "Show the " + fold.count + " messages before this "
          + "summary (the originals it replaced), #" + fold.first + "–#" + fold.last));
      } else if (originals.length) {
        article.append(folded("originals", "Show the " + count + " messages this summary replaced",
          (inner) => { for (const s of originals) chain(ctx, s, inner); }));
      } else if (m.on_path === false) {
        const note = document.createElement("p");
        note.className = "muted";
        note.textContent = "Its originals are on the main path again.";
        article.append(note);
      }
    }
    return article;
  }

  // --- folds: long runs of messages off the path a page of the tree left out ------------
  // (GET .../tree?first=&end=&limit=), read a page at a time when their fold is opened.

  const foldPages = new Map();  // what was read of each fold, kept across redraws

  // A fold the server made just before a summary on the path holds its originals:
  // the summary's card shows it.
  function summaryFold(ctx, fold) {
    const next = ctx.bySeq.get(fold.before);
    return Boolean(next && next.synthetic === "summary" && next.on_path);
  }

  function foldBox(ctx, fold, title) {
    const label = title || fold.count + " messages left off the path (rewound or edited), #"
      + fold.first + "–#" + fold.last;
    const cls = title ? "originals" : "fork";
    return folded(cls, label, (inner) => {
      const key = state.trace + "\u0000" + fold.first + "\u0000" + fold.last + "\u0000" + fold.count;
      if (!foldPages.has(key)) foldPages.set(key, { messages: [], next: fold.first });
      const read = foldPages.get(key);
      const draw = () => drawFold(ctx, fold, read, inner, more);
      const more = async () => {
        const page = await api("GET", tracePath("/tree?first=" + read.next + "&end="
          + (fold.last + 1) + "&limit=" + PAGE));
        read.messages.push(...page.messages);
        read.next = page.next;
        draw();
      };
      if (read.messages.length) draw();
      else more().catch((e) => { inner.textContent = e.message; });
    });
  }

  // The messages of a fold read so far, as chains by parent (a sub-tree of their own),
  // and "Show more" while the fold holds more.
  function drawFold(ctx, fold, read, inner, more) {
    const bySeq = new Map(read.messages.map((m) => [m.sequence, m]));
    const children = new Map();
    for (const m of read.messages) {
      if (!children.has(m.parent)) children.set(m.parent, []);
      children.get(m.parent).push(m.sequence);
    }
    const sub = Object.assign({}, ctx, { bySeq, children });
    const hadFocus = inner.contains(document.activeElement);
    inner.replaceChildren();
    for (const m of read.messages) if (!bySeq.has(m.parent)) chain(sub, m.sequence, inner);
    if (read.next !== null) {
      const left = fold.count - read.messages.length;
      const button = actionButton("Show more", "show-more",
        "Read the next " + Math.min(PAGE, left) + " of the " + left + " messages not shown yet",
        () => more().catch((e) => notify(e.message, false)));
      inner.append(button);
      if (hadFocus) button.focus();
    } else if (hadFocus) {
      inner.parentElement.querySelector("summary").focus();
    }
  }

  function actionButton(label, cls, title, action) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = cls;
    button.textContent = label;
    button.title = title;
    button.addEventListener("click", action);
    return button;
  }

  // The diff of the files a tool result changed, fetched when its fold is opened.
  function showDiff(sequence, inner) {
    const pre = document.createElement("pre");
    pre.className = "diff";
    pre.textContent = "Loading…";
    inner.append(pre);
    api("GET", tracePath("/messages/" + sequence + "/diff")).then((data) => {
      pre.replaceChildren();
      if (!data.diff) pre.textContent = "(no change to show)";
      for (const line of data.diff.split("\n")) {
        const span = document.createElement("span");
        if (line.startsWith("+") && !line.startsWith("+++")) span.className = "add";
        else if (line.startsWith("-") && !line.startsWith("---")) span.className = "del";
        else if (line.startsWith("@@")) span.className = "hunk";
        span.textContent = line + "\n";
        pre.append(span);
      }
    }).catch((error) => { pre.textContent = error.message; });
  }

  // --- actions --------------------------------------------------------------------------

  function tracePath(suffix) {
    return "/api/traces/" + encodeURIComponent(state.trace) + suffix;
  }

  function rewindTo(sequence, files) {
    return act(() => api("POST", tracePath("/rewind"), { sequence, files }),
      (r) => (r.moved ? "head moved from #" + r.previous + " to #" + r.head : "already there")
        + (r.files.length ? "; restored " + r.files.join(", ") : ""));
  }

  async function forkAt(sequence) {
    const made = await act(() => api("POST", tracePath("/fork"), { at: sequence }),
      (r) => "forked as " + r.trace + " from #" + r.head);
    if (made) location.hash = "#trace=" + encodeURIComponent(made.trace);
  }

  async function send(run) {
    const text = $("message").value;
    if (!text.trim()) return;
    const result = await act(() => api("POST", tracePath("/messages"), { text, run }),
      (r) => r.status === "committed" ? "posted as #" + r.sequence
        : "queued: the running trace takes it at its next step");
    if (result) $("message").value = "";
  }

  $("composer").addEventListener("submit", (event) => { event.preventDefault(); send(false); });
  $("send-run").addEventListener("click", () => send(true));
  $("run").addEventListener("click", () => act(() => api("POST", tracePath("/run"), {}),
    (r) => r.status === "running" ? "running" : "run " + (r.stop || r.status)));
  for (const answer of ["yes", "no", "always"]) {
    $("approve-" + answer).addEventListener("click", () => act(
      () => api("POST", tracePath("/approval"), { answer }),
      (r) => r.approval.tool + " answered " + answer));
  }
  $("stop").addEventListener("click", () => act(() => api("POST", tracePath("/stop")),
    () => "stopping after the current step"));
  $("compress").addEventListener("click", () => act(() => api("POST", tracePath("/compress"), {}),
    (r) => r.branches.filter((b) => b.type === "compression")
      .map((b) => "compressed: summary #" + b.messages[b.messages.length - 1] + " from " + b.branch)
      .join("; ") || "nothing was compressed"));

  // --- live events (server-sent events read with fetch, to see a refusal's status) -----

  function showLive(kind, data) {
    const live = $("live");
    if (kind === "run_started") {
      live.hidden = false;
      $("live-text").textContent = "";
      $("live-events").replaceChildren();
    }
    if (kind === "text") {
      live.hidden = false;
      $("live-text").textContent += data.text;
      return;
    }
    const line = {
      tool_call: () => "→ " + data.name,
      tool_result: () => (data.is_error ? "✗ " : "✓ ") + (data.name || "result"),
      ingested: () => "ingested " + data.file + " as #" + data.sequence,
      compressed: () => "compressed: summary #" + data.sequence,
      run_finished: () => "run finished: " + data.stop,
      run_failed: () => "run failed: " + data.error,
      retry: () => "retrying: " + data.reason,
      approval_waiting: () => "? " + data.name + " waits for your approval",
      approval: () => data.name + " answered " + data.answer,
    }[kind];
    if (line) {
      const li = document.createElement("li");
      li.textContent = line();
      $("live-events").append(li);
    }
    if (kind === "assistant") $("live-text").textContent = "";
    if (kind === "run_finished" || kind === "run_failed") {
      notify(line(), kind === "run_finished");
    }
  }

  async function follow(trace) {
    if (state.follow) state.follow.abort();
    const control = new AbortController();
    state.follow = control;
    while (!control.signal.aborted) {
      try {
        const response = await fetch("/api/traces/" + encodeURIComponent(trace) + "/events",
          { signal: control.signal });
        if (!response.ok) throw new Error("events: " + response.status);
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let kind = "message", data = "";
            for (const line of block.split("\n")) {
              if (line.startsWith("event: ")) kind = line.slice(7);
              else if (line.startsWith("data: ")) data += line.slice(6);
            }
            if (!data) continue;
            const parsed = JSON.parse(data);
            showLive(kind, parsed);
            if (kind !== "text" && kind !== "ready") refreshSoon();
          }
        }
      } catch (error) {
        if (control.signal.aborted) return;
      }
      await new Promise((resolve) => setTimeout(resolve, 2000));  // the server went away: retry
    }
  }

  // --- start ------------------------------------------------------------------------------

  async function show(trace) {
    state.trace = trace;
    if (!trace) {
      $("trace").hidden = true;
      $("empty").hidden = false;
      return;
    }
    $("live").hidden = true;
    await refresh();
    follow(trace);
  }

  async function start() {
    try {
      await loadTraces();
      await show(chosenTrace());
    } catch (error) {
      notify(error.message, false);
    }
  }

  window.addEventListener("hashchange", () => show(chosenTrace()).catch((e) => notify(e.message)));
  start();
})();
