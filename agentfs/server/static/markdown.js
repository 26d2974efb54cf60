// A small Markdown renderer that builds DOM nodes: text only ever goes into
// text nodes (textContent), never into HTML, so model or user text cannot
// inject markup. Blocks: fenced code, headings, lists, quotes, rules,
// paragraphs. Inline: code spans, bold, italic, http(s) links.
"use strict";

(function () {
  const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*\n]+?)\*\*|__([^_\n]+?)__|\*([^*\s][^*\n]*?)\*|\[([^\]\n]+)\]\(([^)\s]+)\)/g;

  function el(tag, cls) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    return node;
  }

  function inline(text, parent) {
    const pattern = new RegExp(INLINE.source, "g");  // its own: inline() recurses
    let last = 0;
    for (let m; (m = pattern.exec(text)) !== null;) {
      if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
      last = pattern.lastIndex;
      if (m[1] !== undefined) {
        const code = el("code");
        code.textContent = m[2];
        parent.append(code);
      } else if (m[3] !== undefined || m[4] !== undefined) {
        const strong = el("strong");
        inline(m[3] !== undefined ? m[3] : m[4], strong);
        parent.append(strong);
      } else if (m[5] !== undefined) {
        const em = el("em");
        inline(m[5], em);
        parent.append(em);
      } else if (/^https?:\/\//i.test(m[7])) {
        const a = el("a");
        a.href = m[7];
        a.rel = "noopener noreferrer";
        a.target = "_blank";
        a.textContent = m[6];
        parent.append(a);
      } else {
        parent.append(document.createTextNode(m[0]));  // not a link we follow
      }
    }
    if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
  }

  const LIST_ITEM = /^\s{0,3}([-*+]|\d{1,9}[.)])\s+(.*)$/;

  function render(text) {
    const root = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      const fence = line.match(/^\s{0,3}(```+|~~~+)\s*([\w+-]*)/);
      if (fence) {
        const body = [];
        i += 1;
        while (i < lines.length && !lines[i].trimStart().startsWith(fence[1])) body.push(lines[i++]);
        i += 1;
        const pre = el("pre");
        const code = el("code");
        if (fence[2]) code.dataset.lang = fence[2];
        code.textContent = body.join("\n");
        pre.append(code);
        root.append(pre);
        continue;
      }
      if (!line.trim()) { i += 1; continue; }
      const heading = line.match(/^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/);
      if (heading) {
        const h = el("h" + Math.min(heading[1].length + 2, 6));
        inline(heading[2], h);
        root.append(h);
        i += 1;
        continue;
      }
      if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
        root.append(el("hr"));
        i += 1;
        continue;
      }
      if (/^\s{0,3}>/.test(line)) {
        const quoted = [];
        while (i < lines.length && /^\s{0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s{0,3}>\s?/, ""));
        const quote = el("blockquote");
        quote.append(render(quoted.join("\n")));
        root.append(quote);
        continue;
      }
      const item = line.match(LIST_ITEM);
      if (item) {
        const list = el(/\d/.test(item[1]) ? "ol" : "ul");
        while (i < lines.length) {
          const m = lines[i].match(LIST_ITEM);
          if (m) {
            const li = el("li");
            inline(m[2], li);
            list.append(li);
          } else if (/^\s+\S/.test(lines[i]) && list.lastChild) {
            list.lastChild.append(document.createTextNode(" " + lines[i].trim()));
          } else break;
          i += 1;
        }
        root.append(list);
        continue;
      }
      const para = [];
      while (i < lines.length && lines[i].trim() && !LIST_ITEM.test(lines[i])
             && !/^\s{0,3}(```|~~~|#{1,6}\s|>)/.test(lines[i])) para.push(lines[i++]);
      if (!para.length) para.push(lines[i++]);  // never stall on a line no rule took
      const p = el("p");
      inline(para.join("\n"), p);
      root.append(p);
    }
    return root;
  }

  window.agentfsMarkdown = { render };
})();
