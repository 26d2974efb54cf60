// The trace viewer: lists traces, shows one as a tree (main path, compression
// summaries with their originals, side branches, messages left off the path
// by rewinds, goals), follows its events live, and posts, rewinds, compresses;
// creates traces, searches messages, edits one in place, asks before what
// cannot be taken back, and moves between messages with the keyboard.
// Every piece of trace text goes through textContent or agentfsMarkdown.
"use strict";

(function () {
  const $ = (id) => document.getElementById(id);
  const state = { trace: null, data: null, follow: null, refreshTimer: null,
    tail: null, older: [], rows: new Map() };

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
    state.rows = new Map(data.traces.map((row) => [row.trace, row]));
    for (const row of data.traces) nav.append(traceRow(row));
    if (state.data && state.data.trace === state.trace) enableActions(state.data);  // its inbox
  }

  // One trace in the list: its title (or id), status, last activity and cost. The
  // fields of the trace's summary (status, last_activity, messages, title) when the
  // server sends them, else what `agentfs status --json` has (running, updated, usage).
  function traceRow(row) {
    const a = document.createElement("a");
    a.href = "#trace=" + encodeURIComponent(row.trace);
    a.dataset.trace = row.trace;
    if (row.trace === state.trace) a.className = "current";
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = row.title ? row.title : row.trace;
    if (row.title) name.title = row.trace;
    const status = row.status || (row.error ? "broken" : row.running ? "running"
      : row.approval ? "waiting" : row.last_error ? "failed" : "idle");
    const badge = document.createElement("span");
    badge.className = "badge status-" + status.replace(/[^a-z]+/gi, "-");
    badge.textContent = status;
    const note = document.createElement("span");
    note.className = "state";
    const when = row.last_activity || row.updated;
    note.textContent = "#" + row.head
      + (row.messages !== undefined ? " · " + row.messages + " messages" : "")
      + (when ? " · " + ago(when) : "")
      + (row.pending_inbox && row.pending_inbox.length ? " · " + row.pending_inbox.length + " waiting" : "")
      + (row.approval ? " · " + row.approval + " waits for approval" : "")
      + (row.usage && row.usage.calls ? " · " + row.usage.cost.text : "");
    note.title = (row.usage ? row.usage.text : "") + (when ? " · last step " + when : "");
    a.append(name, " ", badge, document.createElement("br"), note);
    return a;
  }

  // "5 min ago" for an ISO time; the date for what is older than a day.
  function ago(iso) {
    const then = new Date(iso);
    if (isNaN(then)) return iso;
    const seconds = (Date.now() - then.getTime()) / 1000;
    if (seconds < 60) return "just now";
    if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
    if (seconds < 86400) return Math.floor(seconds / 3600) + " h ago";
    return then.toISOString().slice(0, 10);
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
    const focused = focusInTree();
    $("tree").replaceChildren(buildTree(data));
    refocus(focused);
    renderApproval(data.approval);
    enableActions(data);
  }

  // A redraw (a live update, a page read) keeps the keyboard where it was: on the same
  // card, or on the element with the same tag and text in it (the same one of several
  // alike), else on the card (its button went: the head moved) or the tree's own level.
  function focusInTree() {
    const element = document.activeElement;
    if (!element || element === $("tree") || !$("tree").contains(element)) return null;
    const holder = element.closest("[id]");
    const focused = { holder: holder.id, self: holder === element, tag: element.tagName,
      text: element.textContent, index: 0 };
    focused.index = alike(holder, focused).indexOf(element);
    return focused;
  }

  function alike(holder, focused) {
    return [...holder.querySelectorAll(focused.tag)].filter((e) =>
      e.closest("[id]") === holder && e.textContent === focused.text);
  }

  function refocus(focused) {
    if (!focused || document.activeElement !== document.body) return;  // moved on since
    const holder = $(focused.holder);
    if (!holder) return;
    const found = focused.self ? [] : alike(holder, focused);
    const same = found[Math.min(focused.index, found.length - 1)];
    if (same) {
      same.focus();
    } else if (holder !== $("tree")) {
      holder.tabIndex = -1;
      holder.focus();
    }
  }

  function renderApproval(approval) {
    const waits = Boolean(approval && approval.tool && !approval.answer);
    $("approval").hidden = !waits;
    if (!waits) return;
    $("approval-tool").textContent = approval.tool;
    $("approval-input").textContent = JSON.stringify(approval.input, null, 2);
  }

  // The goal tree: each goal with its state (open, done, abandoned; the focused one
  // marked), sub-goals nested under their goal.
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
        const focused = goal.id === goals.focus;
        li.className = "goal goal-" + goal.status + (focused ? " goal-focus" : "");
        li.dataset.goal = goal.id;
        const mark = document.createElement("span");
        mark.className = "goal-state";
        mark.textContent = focused ? "focus" : goal.status;
        const title = document.createElement("span");
        title.className = "goal-title";
        title.textContent = goal.id + " " + goal.title;
        li.append(mark, " ", title);
        if (goal.summary) {
          const s = document.createElement("div");
          s.className = "muted goal-summary";
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
      header.append(actionButton("Edit", "edit",
        "Change #" + m.sequence + "'s text: committed as an edit, as an edit of its file is",
        () => openEditor(m)));
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
      renderDiff(pre, data.diff);
    }).catch((error) => { pre.textContent = error.message; });
  }

  // A unified diff into `pre`, its added, removed and hunk lines marked.
  function renderDiff(pre, diff) {
    pre.replaceChildren();
    if (!diff) pre.textContent = "(no change to show)";
    for (const line of (diff || "").split("\n")) {
      const span = document.createElement("span");
      if (line.startsWith("+") && !line.startsWith("+++")) span.className = "add";
      else if (line.startsWith("-") && !line.startsWith("---")) span.className = "del";
      else if (line.startsWith("@@")) span.className = "hunk";
      span.textContent = line + "\n";
      pre.append(span);
    }
  }

  // --- actions --------------------------------------------------------------------------

  function tracePath(suffix) {
    return "/api/traces/" + encodeURIComponent(state.trace) + suffix;
  }

  async function rewindTo(sequence, files) {
    const sure = await confirmAction(files
      ? "Make #" + sequence + " the head and put back the workspace files the agent changed "
        + "after it? Files it created since are deleted."
      : "Make #" + sequence + " the head? Later messages leave the main path (they stay in "
        + "the files and in git).", files ? "Rewind with files" : "Rewind");
    if (!sure) return null;
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
    $("approve-" + answer).addEventListener("click", async () => {
      if (answer === "no" && !await confirmAction("Refuse this call? The model is told it "
        + "was refused and goes on.", "Refuse")) return;
      await act(() => api("POST", tracePath("/approval"), { answer }),
        (r) => r.approval.tool + " answered " + answer);
    });
  }
  $("stop").addEventListener("click", async () => {
    if (!await confirmAction("Stop the run after its current step?", "Stop")) return;
    await act(() => api("POST", tracePath("/stop")), () => "stopping after the current step");
  });
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

  // --- which buttons can act -------------------------------------------------------------
  // A button that cannot act now is disabled, its title saying why.

  function enable(button, why) {
    button.disabled = Boolean(why);
    button.title = why || button.dataset.title || button.title;
  }

  function enableActions(data) {
    for (const button of document.querySelectorAll("#trace button")) {
      if (button.dataset.title === undefined) button.dataset.title = button.title;
    }
    const waits = Boolean(data.approval && data.approval.tool && !data.approval.answer);
    const busy = data.running ? (data.server_run ? "a run is going: Stop it first"
      : "another process runs this trace: wait for it or stop it there") : "";
    const row = state.rows.get(data.trace);
    const inbox = row && row.pending_inbox ? row.pending_inbox.length : 0;
    // the server's rule (what `agentfs run` stops by); the list may have seen a newer inbox
    const answered = data.waits_for_user && !inbox;
    enable($("run"), busy || (waits ? "a tool call waits for your answer below"
      : answered ? "nothing to do: the model answered; send a message first" : ""));
    enable($("send-run"), busy ? "a run is going: Send queues the message for it" : "");
    enable($("stop"), data.server_run ? "" : data.running
      ? "another process runs this trace: stop it there (Ctrl-C)" : "no run is going");
    enable($("compress"), busy);
    for (const button of document.querySelectorAll("#tree .msg > header button")) enable(button, busy);
  }

  // --- asking before what cannot be taken back -------------------------------------------

  function confirmAction(text, yes) {
    const dialog = $("confirm");
    $("confirm-text").textContent = text;
    $("confirm-yes").textContent = yes;
    dialog.returnValue = "";
    dialog.showModal();
    $("confirm-no").focus();
    return new Promise((resolve) => dialog.addEventListener(
      "close", () => resolve(dialog.returnValue === "yes"), { once: true }));
  }

  // --- editing a message, and its versions ------------------------------------------------

  function openEditor(m) {
    const dialog = $("editor");
    dialog.dataset.sequence = m.sequence;
    $("editor-title").textContent = "Edit #" + m.sequence + " " + m.role;
    $("editor-text").value = m.text;
    const box = $("editor-versions");
    box.textContent = "Loading its versions…";
    api("GET", tracePath("/messages/" + m.sequence + "/versions"))
      .then((data) => showVersions(box, data))
      .catch((error) => { box.textContent = error.message; });
    dialog.returnValue = "";
    dialog.showModal();
    $("editor-text").focus();
  }

  // The newest change of the message's text as a diff; older ones folded below it.
  function showVersions(box, data) {
    box.replaceChildren();
    if (!data.edited) {
      box.textContent = "Not edited since it was written.";
      return;
    }
    data.versions.forEach((version, i) => {
      if (!version.diff) return;
      const details = document.createElement("details");
      details.className = "version";
      details.open = i === 0;
      const summary = document.createElement("summary");
      summary.textContent = (i === 0 ? "Last change" : "Earlier change") + ": "
        + version.kind + " " + version.commit.slice(0, 8) + ", compared with the text before it";
      const pre = document.createElement("pre");
      pre.className = "diff";
      renderDiff(pre, version.diff);
      details.append(summary, pre);
      box.append(details);
    });
  }

  // Save: the edit is sent; refused, the dialog opens again with the text typed.
  $("editor").addEventListener("close", async () => {
    const dialog = $("editor");
    if (dialog.returnValue !== "save") return;
    const sequence = Number(dialog.dataset.sequence);
    const text = $("editor-text").value;
    const done = await act(() => api("PUT", tracePath("/messages/" + sequence), { text }),
      (r) => r.committed ? "edited #" + sequence + " (committed as an edit)"
        : "#" + sequence + " unchanged");
    if (done === null) {
      dialog.returnValue = "";
      dialog.showModal();
      $("editor-text").value = text;
    }
  });

  // --- search across traces ----------------------------------------------------------------

  $("search-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const q = $("search-q").value;
    try {
      const found = await api("GET", "/api/search?" + new URLSearchParams({ q, limit: "50" }));
      showHits(q, found);
    } catch (error) {
      notify(error.message, false);
    }
  });

  function showHits(q, found) {
    const list = $("search-hits");
    list.replaceChildren();
    for (const hit of found.hits) {
      const li = document.createElement("li");
      const a = document.createElement("a");
      a.href = "#trace=" + encodeURIComponent(hit.trace) + "&message=" + hit.sequence;
      a.textContent = hit.trace + " #" + hit.sequence + " " + hit.role
        + (hit.on_path ? "" : " (off the path)");
      const excerpt = document.createElement("div");
      excerpt.className = "muted excerpt";
      excerpt.textContent = hit.excerpt;
      li.append(a, excerpt);
      list.append(li);
    }
    const n = found.hits.length;
    $("search-summary").textContent = (n ? n + (found.more ? "+" : "") : "No") + " message"
      + (n === 1 ? "" : "s") + " holding " + JSON.stringify(q)
      + (found.more ? " (the first " + n + ": add words to narrow)" : "");
    const box = $("search-results");
    box.hidden = false;
    box.open = true;
  }

  // After a search result's link: the message, scrolled to and focused.
  function revealMessage() {
    const sequence = new URLSearchParams(location.hash.slice(1)).get("message");
    if (sequence === null) return;
    $("search-results").open = false;
    const card = $("m-" + sequence);
    if (!card) {
      notify("#" + sequence + " is off the main path: open the folds below to see it", false);
      return;
    }
    focusCard(card);
  }

  // --- creating a trace ------------------------------------------------------------------

  $("new-trace-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const id = $("new-trace-id").value;
    const made = await act(() => api("POST", "/api/traces", { id, text: $("new-trace-text").value }),
      (r) => "created " + r.trace + ": Run starts it");
    if (!made) return;
    $("new-trace-form").reset();
    $("new-trace-box").open = false;
    location.hash = "#trace=" + encodeURIComponent(made.trace);
  });

  // --- the keyboard ------------------------------------------------------------------------
  // j / k: next / previous message; e: edit it; /: search; Escape: close the results.

  function focusCard(card) {
    card.tabIndex = -1;
    card.focus();
    card.scrollIntoView({ block: "nearest" });
  }

  function moveFocus(step) {
    const cards = [...document.querySelectorAll("#tree article.msg")].filter(
      (c) => c.offsetParent !== null);
    if (!cards.length) return;
    const at = cards.indexOf(document.activeElement.closest("article.msg"));
    const next = at < 0 ? (step > 0 ? 0 : cards.length - 1)
      : Math.min(cards.length - 1, Math.max(0, at + step));
    focusCard(cards[next]);
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const typing = event.target.closest("input, textarea, select, dialog");
    if (event.key === "Escape" && !typing) {
      $("search-results").hidden = true;
      return;
    }
    if (typing) return;
    if (event.key === "/") {
      event.preventDefault();
      $("search-q").focus();
    } else if (event.key === "j" || event.key === "k") {
      event.preventDefault();
      moveFocus(event.key === "j" ? 1 : -1);
    } else if (event.key === "e") {
      const card = document.activeElement.closest("#tree article.msg");
      const edit = card && card.querySelector(":scope > header .edit");
      if (edit && !edit.disabled) { event.preventDefault(); edit.click(); }
    }
  });

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
    if (state.trace !== trace) return;  // another trace was chosen meanwhile: it is followed
    revealMessage();
    follow(trace);
  }

  // The list and the chosen trace are read side by side; a trace chosen while the list
  // loads (a link followed, the address changed) is shown once, by the hashchange.
  function start() {
    loadTraces().catch((error) => notify(error.message, false));
    show(chosenTrace()).catch((error) => notify(error.message, false));
  }

  window.addEventListener("hashchange", () => show(chosenTrace()).catch((e) => notify(e.message)));
  start();
})();
