// The chat page: conversations kept in this browser's localStorage (they survive reloads), each
// answer streamed from /v1/chat/completions (server-sent events) and rendered as Markdown as it
// arrives, a stop button that aborts the request (the server stops generating at the next
// token), the model picker from /v1/models, and the speed the server reports in its last chunk.
"use strict";

const STORE_KEY = "edgeinfer.chat.v1";
const SETTINGS_KEY = "edgeinfer.settings.v1";
const $ = (id) => document.getElementById(id);

const state = {
  conversations: [], // [{ id, title, model, messages: [{ role, content, stats?, stopped?, error? }] }]
  currentId: null,
  controller: null, // the AbortController of the answer streaming now
};

function load() {
  try {
    state.conversations = JSON.parse(localStorage.getItem(STORE_KEY) || "[]");
  } catch {
    state.conversations = [];
  }
  const settings = JSON.parse(localStorage.getItem(SETTINGS_KEY) || "{}");
  for (const id of ["system", "temperature", "top-p", "max-tokens", "api-key"]) {
    if (settings[id] !== undefined) $(id).value = settings[id];
  }
  state.currentId = settings.currentId || (state.conversations[0] && state.conversations[0].id) || null;
}

function save() {
  localStorage.setItem(STORE_KEY, JSON.stringify(state.conversations));
  const settings = { currentId: state.currentId };
  for (const id of ["system", "temperature", "top-p", "max-tokens", "api-key"]) settings[id] = $(id).value;
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
}

function current() {
  return state.conversations.find((c) => c.id === state.currentId) || null;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return (body.error && (body.error.message || body.error)) || response.statusText;
  } catch {
    return `${response.status} ${response.statusText}`;
  }
}

// --- the model picker -----------------------------------------------------------------------

async function loadModels() {
  const select = $("model");
  try {
    const response = await fetch("/v1/models", { headers: headers() });
    if (!response.ok) throw new Error(await errorText(response));
    const { data } = await response.json();
    const chosen = select.value || (current() && current().model);
    select.replaceChildren(...data.map((m) => {
      const option = document.createElement("option");
      option.value = m.id;
      option.textContent = m.status && m.status !== "loaded" ? `${m.id} (${m.status.replace("_", " ")})` : m.id;
      return option;
    }));
    if (chosen && data.some((m) => m.id === chosen)) select.value = chosen;
    const model = data.find((m) => m.id === select.value);
    $("model-status").textContent = model && model.n_ctx ? `context ${model.n_ctx} tokens` : "";
  } catch (e) {
    showError(`Cannot list the models: ${e.message}`);
  }
}

// --- rendering ------------------------------------------------------------------------------

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

function renderConversations() {
  const list = $("conversations");
  list.replaceChildren(...state.conversations.map((c) => {
    const item = document.createElement("li");
    item.dataset.id = c.id;
    item.className = c.id === state.currentId ? "active" : "";
    const title = document.createElement("span");
    title.className = "title";
    title.textContent = c.title || "New chat";
    title.onclick = () => select(c.id);
    const remove = document.createElement("button");
    remove.className = "delete";
    remove.title = "Delete";
    remove.textContent = "×";
    remove.onclick = () => removeConversation(c.id);
    item.append(title, remove);
    return item;
  }));
}

function messageElement(message) {
  const div = document.createElement("div");
  div.className = `message ${message.role}${message.error ? " error" : ""}`;
  fillMessage(div, message);
  return div;
}

function fillMessage(div, message) {
  if (message.role === "user" || message.error) {
    div.textContent = message.error || message.content;
  } else {
    div.innerHTML = window.renderMarkdown(message.content);
  }
  const notes = [];
  if (message.stats) {
    notes.push(`${message.stats.tokens} tokens, ${message.stats.tokPerS.toFixed(1)} tok/s`);
  }
  if (message.stopped) notes.push("stopped");
  if (notes.length) {
    const stats = document.createElement("div");
    stats.className = "stats";
    stats.textContent = notes.join(" · ");
    div.append(stats);
  }
}

function renderMessages() {
  const conversation = current();
  $("messages").replaceChildren(...(conversation ? conversation.messages.map(messageElement) : []));
  scrollDown();
}

function scrollDown() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function setStreaming(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
}

// --- conversations --------------------------------------------------------------------------

function newConversation() {
  const conversation = { id: `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, title: "", messages: [] };
  state.conversations.unshift(conversation);
  state.currentId = conversation.id;
  save();
  renderConversations();
  renderMessages();
  $("input").focus();
  return conversation;
}

function select(id) {
  if (state.controller) return; // one answer at a time
  state.currentId = id;
  const conversation = current();
  if (conversation && conversation.model) $("model").value = conversation.model;
  save();
  renderConversations();
  renderMessages();
}

function removeConversation(id) {
  if (state.controller && id === state.currentId) return;
  state.conversations = state.conversations.filter((c) => c.id !== id);
  if (state.currentId === id) state.currentId = state.conversations[0] ? state.conversations[0].id : null;
  save();
  renderConversations();
  renderMessages();
}

// --- sending and streaming ------------------------------------------------------------------

function requestBody(conversation) {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  for (const m of conversation.messages) {
    if (!m.error && m.content) messages.push({ role: m.role, content: m.content });
  }
  const body = { model: $("model").value || undefined, messages, stream: true,
                 stream_options: { include_usage: true } };
  const temperature = parseFloat($("temperature").value);
  const topP = parseFloat($("top-p").value);
  const maxTokens = parseInt($("max-tokens").value, 10);
  if (!Number.isNaN(temperature)) body.temperature = temperature;
  if (!Number.isNaN(topP)) body.top_p = topP;
  if (!Number.isNaN(maxTokens) && maxTokens > 0) body.max_tokens = maxTokens;
  return body;
}

async function send(text) {
  const conversation = current() || newConversation();
  if (!conversation.title) conversation.title = text.slice(0, 40);
  conversation.model = $("model").value;
  conversation.messages.push({ role: "user", content: text });
  const answer = { role: "assistant", content: "" };
  const body = requestBody(conversation);
  conversation.messages.push(answer);
  save();
  renderConversations();
  renderMessages();
  const element = $("messages").lastElementChild;
  showError("");
  setStreaming(true);
  state.controller = new AbortController();
  let pending = false;
  const repaint = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      fillMessage(element, answer);
      scrollDown();
    });
  };
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: state.controller.signal });
    if (!response.ok) throw new Error(await errorText(response));
    await readEvents(response, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message || String(chunk.error));
      const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
      if (delta && delta.content) {
        answer.content += delta.content;
        repaint();
      }
      if (chunk.timings) {
        answer.stats = { tokens: chunk.timings.predicted_n, tokPerS: chunk.timings.predicted_per_second };
      }
    });
  } catch (e) {
    if (e.name === "AbortError") {
      answer.stopped = true;
    } else {
      if (!answer.content) answer.error = e.message;
      showError(e.message);
    }
  } finally {
    state.controller = null;
    setStreaming(false);
    save();
    fillMessage(element, answer);
    element.className = `message assistant${answer.error ? " error" : ""}`;
    scrollDown();
    loadModels();
  }
}

async function readEvents(response, onChunk) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onChunk(JSON.parse(data));
      }
    }
  }
}

// --- wiring ---------------------------------------------------------------------------------

function start() {
  load();
  renderConversations();
  renderMessages();
  loadModels();
  $("new-chat").onclick = () => { if (!state.controller) newConversation(); };
  $("toggle-settings").onclick = () => {
    const panel = $("settings");
    panel.hidden = !panel.hidden;
    $("toggle-settings").setAttribute("aria-expanded", String(!panel.hidden));
  };
  for (const id of ["system", "temperature", "top-p", "max-tokens", "api-key"]) $(id).onchange = save;
  $("api-key").addEventListener("change", loadModels);
  $("model").onchange = loadModels;
  $("stop").onclick = () => state.controller && state.controller.abort();
  $("composer").onsubmit = (event) => {
    event.preventDefault();
    const text = $("input").value.trim();
    if (!text || state.controller) return;
    $("input").value = "";
    send(text);
  };
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
}

document.addEventListener("DOMContentLoaded", start);
