// Chat page: websocket streaming, markdown rendering (marked + DOMPurify), memories panels,
// stop button and reconnection with backoff. Protocol: see chat/consumers.py.
(function () {
  "use strict";

  const boot = JSON.parse(document.getElementById("chat-bootstrap").textContent);
  const list = document.getElementById("chat-messages");
  const emptyThread = document.getElementById("chat-empty-thread");
  const banner = document.getElementById("chat-banner");
  const composer = document.getElementById("chat-composer");
  const input = document.getElementById("chat-input");
  const sendButton = document.getElementById("chat-send");
  const stopButton = document.getElementById("chat-stop");
  const regenerateButton = document.getElementById("chat-regenerate");
  const connection = document.getElementById("chat-connection");
  const blendNote = document.getElementById("chat-blend");

  // Close codes after which retrying cannot help (see chat/consumers.py).
  const FINAL_CLOSE_CODES = { 4401: "You are logged out. Log in again to chat.", 4404: "This conversation does not exist or is not yours." };
  const BACKOFF_MIN_MS = 500;
  const BACKOFF_MAX_MS = 30000;

  let socket = null;
  let attempts = 0;
  let generating = false;
  let pending = null; // {item, body, memories, text}
  let renderQueued = false;
  let lastSent = ""; // the last message sent: put back in the composer when the server refuses it

  marked.setOptions({ gfm: true, breaks: true });

  function renderMarkdown(element, text) {
    element.innerHTML = DOMPurify.sanitize(marked.parse(text || ""));
  }

  function showBanner(text, kind) {
    banner.textContent = text;
    banner.dataset.kind = kind || "info";
    banner.hidden = !text;
  }

  function setConnection(state, text) {
    connection.dataset.state = state;
    connection.textContent = text;
    sendButton.disabled = state !== "open" || generating;
    updateRegenerate();
  }

  function setGenerating(value) {
    generating = value;
    stopButton.hidden = !value;
    sendButton.disabled = value || !socket || socket.readyState !== WebSocket.OPEN;
    updateRegenerate();
  }

  function updateRegenerate() {
    // Offered when the thread ends with an answer (or a question whose answer failed to start).
    const last = list.lastElementChild;
    regenerateButton.hidden = generating || !last || !socket || socket.readyState !== WebSocket.OPEN;
  }

  function formatScore(score) {
    return Number.isInteger(score) ? String(score) : score.toFixed(3);
  }

  const GROUNDING_TEXT = { grounded: "Grounded", partly: "Partly grounded", "not grounded": "Not grounded" };
  const HTML_ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
  }

  function unsureTag(citation) {
    // A supported sentence whose words the model was unsure of (engine.citations.UNSURE_BELOW).
    if (!citation.unsure) return "";
    const percent = Math.round(citation.certainty * 100);
    return ` <span class="chat-unsure" title="A memory holds these words, but the model gave them a probability of ${percent} %: `
      + `it may have picked them among others">unsure</span>`;
  }

  function citationMarker(citation, memories) {
    // After a sentence: a link per memory that supports it (hover: its text; click: its page),
    // and an "unsure" tag where the model was unsure of its words; or a visible "unsupported" tag
    // on a claim that none supports.
    if (citation.memories.length) {
      return " " + citation.memories.map((rank) => {
        const memory = memories.find((m) => m.rank === rank) || {};
        const label = `[${rank + 1}]`;
        const title = escapeHtml((memory.excerpt || "").slice(0, 500));
        const aria = `Supported by memory ${rank + 1}`;
        return memory.url
          ? `<a class="chat-cite" href="${escapeHtml(memory.url)}" title="${title}" aria-label="${aria}">${label}</a>`
          : `<span class="chat-cite" title="${title}" aria-label="${aria}">${label}</span>`;
      }).join("") + unsureTag(citation);
    }
    return citation.claim
      ? ' <span class="chat-unsupported" title="No memory that primed this answer supports this sentence">unsupported</span>'
      : "";
  }

  function citedMarkdown(message) {
    // The stored sentences are slices of the answer, in order: each is found from where the last ended.
    const text = message.content || "";
    let out = "";
    let cursor = 0;
    for (const citation of message.citations || []) {
      const at = text.indexOf(citation.text, cursor);
      if (at < 0) continue;
      const end = at + citation.text.length;
      out += text.slice(cursor, end) + citationMarker(citation, message.memories || []);
      cursor = end;
    }
    return out + text.slice(cursor);
  }

  function groundingNote(message) {
    if (message.grounding == null || !message.grounding_word) return null;
    const claims = (message.citations || []).filter((c) => c.claim);
    const supported = claims.filter((c) => c.memories.length).length;
    const unsure = claims.filter((c) => c.unsure).length;
    const element = note(`${GROUNDING_TEXT[message.grounding_word]}: ${supported} of ${claims.length} `
      + `claim${claims.length === 1 ? "" : "s"} supported by its memories`
      + (unsure ? `, ${unsure} of them unsure` : "")
      + ` (grounding ${Math.round(message.grounding * 100)} %)`,
    "grounding");
    element.dataset.grounding = message.grounding_word;
    return element;
  }

  function memoriesPanel(memories) {
    const details = document.createElement("details");
    details.className = "chat-memories";
    const summary = document.createElement("summary");
    summary.textContent = memories.length ? `Memories (${memories.length})` : "No memories primed this answer";
    details.appendChild(summary);
    const items = document.createElement("ol");
    for (const memory of memories) {
      const item = document.createElement("li");
      const head = document.createElement("div");
      head.className = "chat-memory-head";
      const where = [memory.corpus, memory.source].filter(Boolean).join(" / ") || "unknown source";
      head.textContent = `${where} · score ${formatScore(memory.score)} · ${memory.token_count} tokens`;
      const excerpt = document.createElement("blockquote");
      excerpt.textContent = memory.excerpt;
      item.append(head, excerpt);
      items.appendChild(item);
    }
    details.appendChild(items);
    return details;
  }

  function messageItem(message) {
    const item = document.createElement("li");
    item.className = `chat-message chat-${message.role}`;
    item.dataset.id = message.id || "";
    item.dataset.status = message.status || "complete";
    const who = document.createElement("div");
    who.className = "chat-who";
    who.textContent = message.role === "user" ? "You" : "Assistant";
    const body = document.createElement("div");
    body.className = "chat-body";
    if (message.role === "user") {
      body.textContent = message.content;
    } else {
      renderMarkdown(body, citedMarkdown(message));
    }
    item.append(who, body);
    if (message.role === "assistant") {
      decorateAnswer(item, message);
    }
    return item;
  }

  function decorateAnswer(item, message) {
    item.querySelectorAll(".chat-note, .chat-memories").forEach((el) => el.remove());
    item.dataset.status = message.status;
    const grounding = groundingNote(message);
    if (grounding) item.querySelector(".chat-body").after(grounding);
    if (message.status === "stopped") {
      item.appendChild(note("Stopped — the partial answer was kept."));
    } else if (message.status === "repetition" && message.finish_reason === "restated") {
      item.appendChild(note("Not an answer: the model only repeated the question. Regenerate, or ask again in other words."));
    } else if (message.status === "repetition") {
      item.appendChild(note("Cut short: the model began repeating itself. Regenerate, or ask again in other words."));
    } else if (message.status === "error") {
      item.appendChild(note(message.error || "The answer failed.", "error"));
    }
    const usage = message.completion_tokens != null
      ? `${message.prompt_tokens} prompt + ${message.completion_tokens} completion tokens` : "";
    if (usage) item.appendChild(note(usage, "meta"));
    item.appendChild(memoriesPanel(message.memories || []));
  }

  function note(text, kind) {
    const element = document.createElement("div");
    element.className = `chat-note${kind ? " chat-note-" + kind : ""}`;
    element.textContent = text;
    return element;
  }

  function append(item) {
    list.appendChild(item);
    emptyThread.hidden = true;
    item.scrollIntoView({ block: "end" });
  }

  // The composer sticks to the bottom of the window: messages scrolled into view stop above it.
  function trackComposerHeight() {
    list.style.setProperty("--composer-height", `${composer.offsetHeight}px`);
  }
  new ResizeObserver(trackComposerHeight).observe(composer);
  trackComposerHeight();

  function startAnswer(memories) {
    const item = messageItem({ role: "assistant", content: "", status: "streaming", memories: [] });
    item.querySelector(".chat-memories").replaceWith(memoriesPanel(memories));
    item.classList.add("chat-streaming");
    append(item);
    pending = { item, body: item.querySelector(".chat-body"), text: "" };
  }

  function queueRender() {
    // One markdown render per animation frame, however many deltas arrive in it.
    if (renderQueued) return;
    renderQueued = true;
    window.requestAnimationFrame(() => {
      renderQueued = false;
      if (pending) {
        renderMarkdown(pending.body, pending.text);
        pending.item.scrollIntoView({ block: "end" });
      }
    });
  }

  function clearWaiting() {
    const waiting = pending && pending.item.querySelector(".chat-note-waiting");
    if (waiting) waiting.remove();
  }

  function finishAnswer(message) {
    if (!pending) startAnswer(message.memories || []);
    clearWaiting();
    const { item, body } = pending;
    pending = null;
    item.classList.remove("chat-streaming");
    item.dataset.id = message.id;
    renderMarkdown(body, citedMarkdown(message));
    decorateAnswer(item, message);
    setGenerating(false);
  }

  function showTitle(title) {
    // The first message names a new conversation: reflect it without a reload.
    const field = document.getElementById("chat-title");
    if (field && document.activeElement !== field) field.value = title;
    const link = document.querySelector(".chat-list li.active a");
    if (link) link.textContent = title;
    document.title = document.title.replace(/^.*? · Chat/, `${title} · Chat`);
  }

  const handlers = {
    "chat.ready"(event) {
      if (blendNote) blendNote.textContent = `Blend holds ${event.blend_turns} answer${event.blend_turns === 1 ? "" : "s"}.`;
    },
    "chat.accepted"(event) {
      const existing = list.querySelector(`li[data-id="${event.message.id}"]`);
      if (existing) {
        // A regenerated turn: the old answer after it is taken back.
        while (existing.nextElementSibling) existing.nextElementSibling.remove();
        existing.scrollIntoView({ block: "end" });
      } else {
        append(messageItem(event.message));
      }
      if (event.title) showTitle(event.title);
    },
    "chat.memories"(event) {
      startAnswer(event.memories);
    },
    "chat.queued"(event) {
      // The answer waits for the model (one prompt is read at a time): say so until it streams.
      if (!pending) startAnswer([]);
      const ahead = event.ahead;
      let waiting = pending.item.querySelector(".chat-note-waiting");
      if (!waiting) {
        waiting = note("", "waiting");
        waiting.setAttribute("role", "status");
        pending.body.before(waiting);
      }
      waiting.textContent = ahead > 0
        ? `Waiting for the model: ${ahead} answer${ahead === 1 ? "" : "s"} ahead of yours…`
        : "Waiting for the model: yours is next…";
    },
    "chat.delta"(event) {
      if (!pending) startAnswer([]);
      clearWaiting();
      pending.text += event.delta;
      queueRender();
    },
    "chat.rewind"(event) {
      // The answer began repeating itself: the server took the echo back and continues from here.
      if (!pending) startAnswer([]);
      pending.text = event.content;
      queueRender();
    },
    "chat.done"(event) {
      finishAnswer(event.message);
      if (blendNote && event.blend_turns != null) {
        blendNote.textContent = `Blend holds ${event.blend_turns} answer${event.blend_turns === 1 ? "" : "s"}.`;
      }
    },
    "chat.error"(event) {
      if (event.message) {
        finishAnswer(event.message);
      } else {
        setGenerating(false);
        // Refused before it was stored (the model's queue is full): the message goes back to the composer.
        if (event.code === "llm_busy" && lastSent && !input.value) input.value = lastSent;
      }
      showBanner(event.error, "error");
    },
  };

  function connect() {
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${scheme}://${window.location.host}${boot.socket_path}`);
    setConnection("connecting", attempts ? `Reconnecting (attempt ${attempts + 1})…` : "Connecting…");
    socket.addEventListener("open", () => {
      attempts = 0;
      setConnection("open", "Connected");
      if (banner.dataset.kind === "connection") showBanner("");
    });
    socket.addEventListener("message", (message) => {
      const event = JSON.parse(message.data);
      const handler = handlers[event.type];
      if (handler) handler(event);
    });
    socket.addEventListener("close", (event) => {
      if (pending) {
        // The server keeps what was generated so far as a stopped answer.
        pending.item.classList.remove("chat-streaming");
        pending.item.appendChild(note("Connection lost — the partial answer was kept.", "error"));
        pending = null;
      }
      setGenerating(false);
      if (FINAL_CLOSE_CODES[event.code]) {
        setConnection("closed", "Disconnected");
        showBanner(FINAL_CLOSE_CODES[event.code], "error");
        return;
      }
      const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** attempts) * (0.5 + Math.random() / 2);
      attempts += 1;
      setConnection("closed", `Disconnected — retrying in ${Math.ceil(delay / 1000)} s`);
      showBanner("Connection to the server lost; reconnecting…", "connection");
      window.setTimeout(connect, delay);
    });
  }

  function send() {
    const content = input.value.trim();
    if (!content || generating || !socket || socket.readyState !== WebSocket.OPEN) return;
    showBanner("");
    socket.send(JSON.stringify({ type: "chat.send", content }));
    lastSent = content;
    input.value = "";
    setGenerating(true);
  }

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  stopButton.addEventListener("click", () => {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "chat.stop" }));
  });
  regenerateButton.addEventListener("click", () => {
    if (generating || !socket || socket.readyState !== WebSocket.OPEN) return;
    showBanner("");
    socket.send(JSON.stringify({ type: "chat.regenerate" }));
    setGenerating(true);
  });

  for (const message of boot.messages) list.appendChild(messageItem(message));
  emptyThread.hidden = boot.messages.length > 0;
  if (list.lastElementChild) list.lastElementChild.scrollIntoView({ block: "end" });
  connect();
})();
