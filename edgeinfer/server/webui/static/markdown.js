// A small Markdown renderer for model answers: fenced code blocks (an unclosed fence while the
// answer streams is shown as code already), headings, lists, quotes, rules, paragraphs, and inline
// code, bold, italic and links. Everything is escaped first, so text from the model can never
// become markup; links keep only http(s) and mailto targets.
"use strict";

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function renderInline(text) {
  // Code spans first, kept aside so their contents are not formatted.
  const spans = [];
  let out = escapeHtml(text).replace(/`([^`\n]+)`/g, (_, code) => {
    spans.push(`<code>${code}</code>`);
    return `\u0000${spans.length - 1}\u0000`;
  });
  out = out
    .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
    .replace(/__([^_\n]+)__/g, "<strong>$1</strong>")
    .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>")
    .replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, "$1<em>$2</em>")
    .replace(/\[([^\]\n]+)\]\(((?:https?:\/\/|mailto:)[^)\s]+)\)/g,
             '<a href="$2" target="_blank" rel="noopener noreferrer">$1</a>');
  return out.replace(/\u0000(\d+)\u0000/g, (_, i) => spans[Number(i)]);
}

function renderBlocks(text) {
  const lines = text.split("\n");
  const html = [];
  let paragraph = [];
  let list = null; // { tag, items }

  const flushParagraph = () => {
    if (paragraph.length) html.push(`<p>${paragraph.map(renderInline).join("<br>")}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (list) html.push(`<${list.tag}>${list.items.map((i) => `<li>${renderInline(i)}</li>`).join("")}</${list.tag}>`);
    list = null;
  };

  for (const line of lines) {
    let m;
    if (!line.trim()) {
      flushParagraph();
      flushList();
    } else if ((m = line.match(/^(#{1,6})\s+(.*)$/))) {
      flushParagraph();
      flushList();
      html.push(`<h${m[1].length}>${renderInline(m[2])}</h${m[1].length}>`);
    } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flushParagraph();
      flushList();
      html.push("<hr>");
    } else if ((m = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/))) {
      flushParagraph();
      const tag = /\d/.test(m[1]) ? "ol" : "ul";
      if (list && list.tag !== tag) flushList();
      if (!list) list = { tag, items: [] };
      list.items.push(m[2]);
    } else if ((m = line.match(/^>\s?(.*)$/))) {
      flushParagraph();
      flushList();
      html.push(`<blockquote>${renderInline(m[1])}</blockquote>`);
    } else if (list && /^\s+\S/.test(line)) {
      list.items[list.items.length - 1] += " " + line.trim();
    } else {
      flushList();
      paragraph.push(line);
    }
  }
  flushParagraph();
  flushList();
  return html.join("");
}

function renderMarkdown(text) {
  const parts = [];
  const fence = /^```([\w+-]*)[^\n]*\n([\s\S]*?)(?:^```[ \t]*$|(?![\s\S]))/gm;
  let last = 0;
  let m;
  while ((m = fence.exec(text)) !== null) {
    parts.push(renderBlocks(text.slice(last, m.index)));
    const lang = m[1] ? ` data-lang="${escapeHtml(m[1])}"` : "";
    const code = m[2].replace(/\n$/, "");
    parts.push(`<pre${lang}><code>${escapeHtml(code)}</code></pre>`);
    last = fence.lastIndex;
    if (m[0].length === 0) break;
  }
  parts.push(renderBlocks(text.slice(last)));
  return parts.join("");
}

window.renderMarkdown = renderMarkdown;
