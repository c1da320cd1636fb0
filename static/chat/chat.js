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

  // Citations are added to the rendered answer, never to its Markdown: a memory's text (quotes,
  // blank lines, Markdown of its own) must not reach the renderer or any HTML string. The Markdown
  // carries only placeholders, one per cited sentence, made of private-use characters that
  // Markdown gives no meaning to; each is then replaced by elements built with the DOM.
  const MARK_OPEN = "\uE000";
  const MARK_CLOSE = "\uE001";
  const MARK_DIGIT = 0xE010; // a placeholder's number, one private-use character per decimal digit
  const PLACEHOLDER = /\uE000([\uE010-\uE019]+)\uE001/g;
  const STRAY_MARKS = /[\uE000\uE001\uE010-\uE019]/g;
  const HAS_MARK = /[\uE000\uE001\uE010-\uE019]/;

  function placeholder(index) {
    const digits = [...String(index)].map((d) => String.fromCharCode(MARK_DIGIT + Number(d))).join("");
    return MARK_OPEN + digits + MARK_CLOSE;
  }

  function placeholderIndex(digits) {
    return Number([...digits].map((c) => c.charCodeAt(0) - MARK_DIGIT).join(""));
  }

  function tag(name, className, text, title) {
    const element = document.createElement(name);
    element.className = className;
    element.textContent = text;
    if (title) element.title = title;
    return element;
  }

  function citationMarks(citation, memories) {
    // After a sentence: a link per memory that supports it (hover: its text; click: its page),
    // and an "unsure" tag where the model was unsure of its words; or a visible "unsupported" tag
    // on a claim that none supports. One span holds all of it, so the answer's own text is what
    // remains without it.
    const marks = document.createElement("span");
    marks.className = "chat-marks";
    marks.append(" ");
    if (citation.memories.length) {
      for (const rank of citation.memories) {
        const memory = memories.find((m) => m.rank === rank) || {};
        // The label names the place in its document ("[1, page 12]"); a click opens the document
        // view there (answers stored before places were kept link to the memory's page).
        const href = memory.document_url || memory.url;
        const label = memory.place ? `[${rank + 1}, ${memory.place}]` : `[${rank + 1}]`;
        const cite = tag(href ? "a" : "span", "chat-cite", label, memory.excerpt || "");
        if (href) cite.href = href;
        const where = [memory.source, memory.place].filter(Boolean).join(", ");
        cite.setAttribute("aria-label", `Supported by memory ${rank + 1}${where ? ` (${where})` : ""}`);
        marks.append(cite);
      }
      if (citation.unsure) {
        // A supported sentence whose words the model was unsure of (engine.citations.UNSURE_BELOW).
        const percent = Math.round(citation.certainty * 100);
        marks.append(" ", tag("span", "chat-unsure", "unsure", "A memory holds these words, but the model gave "
          + `them a probability of ${percent} %: it may have picked them among others`));
      }
      return marks;
    }
    if (!citation.claim) return null;
    marks.append(tag("span", "chat-unsupported", "unsupported",
      "No memory that primed this answer supports this sentence"));
    return marks;
  }

  function placeCitations(text, citations) {
    // The answer's Markdown with a placeholder after each cited sentence, and the placeholders'
    // citations. The stored sentences are slices of the answer, in order: each is found from
    // where the last ended.
    let out = "";
    let cursor = 0;
    const placed = [];
    for (const citation of citations) {
      const at = text.indexOf(citation.text, cursor);
      if (at < 0) continue;
      const end = at + citation.text.length;
      out += text.slice(cursor, end) + placeholder(placed.length);
      placed.push(citation);
      cursor = end;
    }
    return { markdown: out + text.slice(cursor), placed };
  }

  function renderAnswer(element, message) {
    // The answer rendered from its Markdown, then each placeholder replaced by its citation marks.
    const text = message.content || "";
    const { markdown, placed } = placeCitations(text, message.citations || []);
    renderMarkdown(element, markdown);
    if (!placed.length) return;
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    const nodes = [];
    while (walker.nextNode()) {
      if (walker.currentNode.nodeValue.includes(MARK_OPEN)) nodes.push(walker.currentNode);
    }
    for (const node of nodes) {
      const parts = node.nodeValue.split(PLACEHOLDER); // text, digits, text, digits, ..., text
      const replacement = document.createDocumentFragment();
      parts.forEach((part, i) => {
        if (i % 2 === 0) {
          if (part) replacement.append(part.replace(STRAY_MARKS, ""));
          return;
        }
        const marks = citationMarks(placed[placeholderIndex(part)], message.memories || []);
        if (marks) replacement.append(marks);
      });
      node.replaceWith(replacement);
    }
    // A placeholder the renderer took into an attribute (a bare URL that ends a sentence becomes
    // a link whose href swallows it) is dropped there.
    for (const node of element.querySelectorAll("*")) {
      for (const attribute of [...node.attributes]) {
        if (HAS_MARK.test(attribute.value)) node.setAttribute(attribute.name, attribute.value.replace(STRAY_MARKS, ""));
      }
    }
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
      const source = [memory.source, memory.place].filter(Boolean).join(", ");
      const where = [memory.corpus, source].filter(Boolean).join(" / ") || "unknown source";
      head.textContent = `${where} · score ${formatScore(memory.score)} · ${memory.token_count} tokens`;
      const excerpt = document.createElement("blockquote");
      excerpt.textContent = memory.excerpt;
      item.append(head, excerpt);
      if (memory.document_url) {
        const open = tag("a", "chat-memory-open", memory.place ? `Open at ${memory.place}` : "Open in the document");
        open.href = memory.document_url;
        item.append(open);
      }
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
      renderAnswer(body, message);
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
    const meta = [message.model ? `Model: ${message.model}` : "", usage].filter(Boolean).join(" · ");
    if (meta) item.appendChild(note(meta, "meta"));
    item.appendChild(memoriesPanel(message.memories || []));
    if (message.id && message.status !== "error") item.appendChild(feedbackBar(message.id, message.feedback));
  }

  // Thumbs up or down on an answer, with an optional comment (sent as chat.feedback; staff read them).
  function feedbackBar(messageId, feedback) {
    const bar = document.createElement("div");
    bar.className = "chat-feedback";
    bar.dataset.message = messageId;
    const buttons = [["up", "Helpful", "Helpful"], ["down", "Not helpful", "Not helpful: say why"]].map(
      ([rating, text, label]) => {
        const button = tag("button", "chat-feedback-button", text, label);
        button.type = "button";
        button.dataset.rating = rating;
        button.setAttribute("aria-label", label);
        button.addEventListener("click", () => {
          const current = bar.dataset.rating || "";
          if (rating === "down" && current !== "down") {
            comment.hidden = false;
            comment.querySelector("textarea").focus();
          }
          sendFeedback(messageId, current === rating ? null : rating, "");
        });
        return button;
      });
    const comment = document.createElement("form");
    comment.className = "chat-feedback-comment";
    comment.hidden = true;
    const text = document.createElement("textarea");
    text.maxLength = 2000;
    text.rows = 2;
    text.placeholder = "What was wrong? (optional)";
    text.setAttribute("aria-label", "What was wrong with this answer");
    const save = tag("button", "", "Send");
    save.type = "submit";
    comment.append(text, save);
    comment.addEventListener("submit", (event) => {
      event.preventDefault();
      sendFeedback(messageId, "down", text.value);
      comment.hidden = true;
    });
    bar.append(...buttons, comment);
    showFeedback(bar, feedback);
    return bar;
  }

  function showFeedback(bar, feedback) {
    bar.dataset.rating = feedback ? feedback.rating : "";
    bar.querySelectorAll(".chat-feedback-button").forEach((button) => {
      button.setAttribute("aria-pressed", String(Boolean(feedback) && feedback.rating === button.dataset.rating));
    });
    if (feedback && feedback.comment) bar.querySelector("textarea").value = feedback.comment;
  }

  function sendFeedback(messageId, rating, comment) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "chat.feedback", message: Number(messageId), rating, comment }));
    }
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
    renderAnswer(body, message);
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
    "chat.feedback"(event) {
      const bar = list.querySelector(`.chat-feedback[data-message="${event.message}"]`);
      if (bar) showFeedback(bar, event.feedback);
    },
    "chat.error"(event) {
      if (event.message) {
        finishAnswer(event.message);
      } else {
        setGenerating(false);
        // Refused before it was stored (the model's queue is full, or the conversation's model is not
        // one the user may use): the message goes back to the composer.
        const refused = event.code === "llm_busy" || event.code === "llm_model_unknown";
        if (refused && lastSent && !input.value) input.value = lastSent;
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
